/**
 * Slack's Socket Mode, served locally: what the bot's default (production) mode talks to.
 *
 * As Slack does it (docs.slack.dev/apis/events-api/using-socket-mode):
 * - `apps.connections.open`, called with the app-level token (`xapp-...`), returns a one-time
 *   `wss://` URL (here `ws://127.0.0.1:<port>/link/?ticket=...`); a URL is good for one connection.
 * - On connect the server sends `{"type":"hello", ...}`; only then is the client connected.
 * - Each delivery is an envelope `{envelope_id, type, payload, accepts_response_payload}`; the app
 *   acknowledges with `{envelope_id, payload?}`. For a slash command, the ack payload is what the
 *   user sees (the HTTP response body, in HTTP mode).
 * - The server pings; and it asks clients to reconnect with `{"type":"disconnect","reason":"refresh_requested"}`
 *   before closing (Slack refreshes connections every few hours).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { startFakeSlack, type FakeSlack } from './fake-slack-api.ts';

export interface SocketAck {
  envelopeId: string;
  /** The ack's payload (absent when the app acked with no body). */
  payload: unknown;
  elapsedMs: number;
}

export interface FakeSocketMode {
  readonly appToken: string;
  /** What `apps.connections.open` answers: a fresh one-time URL. */
  openConnection(): { ok: true; url: string };
  /** Connections that got their hello and are still open. */
  connectedCount(): number;
  /** Times `apps.connections.open` was called. */
  opens(): number;
  waitForConnection(timeoutMs?: number): Promise<void>;
  /** Sends one envelope to a connected client; resolves with its ack, rejects if none within `timeoutMs`. */
  deliver(
    type: 'slash_commands' | 'interactive' | 'events_api',
    payload: object,
    o?: { acceptsResponsePayload?: boolean; timeoutMs?: number },
  ): Promise<SocketAck>;
  /** As Slack's connection refresh: a `disconnect` message, then the socket closes. */
  refreshAll(): void;
  close(): Promise<void>;
}

async function startFakeSocketMode(o: {
  appId: string;
  appToken?: string;
  pingIntervalMs?: number;
}): Promise<FakeSocketMode> {
  const appToken = o.appToken ?? `xapp-1-${o.appId}-${randomBytes(6).toString('hex')}`;
  const tickets = new Set<string>();
  const live = new Set<WebSocket>();
  const pending = new Map<string, { resolve: (a: SocketAck) => void; sentAt: number }>();
  let opened = 0;

  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  const port = (wss.address() as AddressInfo).port;

  wss.on('connection', (ws, req) => {
    const ticket = new URL(req.url ?? '/', 'ws://x').searchParams.get('ticket') ?? '';
    if (!tickets.delete(ticket)) {
      ws.close(4001, 'invalid ticket'); // a URL serves one connection only
      return;
    }
    live.add(ws);
    const pinger = setInterval(() => ws.ping(), o.pingIntervalMs ?? 5000);
    ws.on('close', () => {
      clearInterval(pinger);
      live.delete(ws);
    });
    ws.on('message', (data) => {
      let msg: unknown;
      try {
        msg = JSON.parse(String(data));
      } catch {
        return;
      }
      if (typeof msg !== 'object' || msg === null || !('envelope_id' in msg)) return;
      const id = String((msg as { envelope_id: unknown }).envelope_id);
      const p = pending.get(id);
      if (!p) return;
      pending.delete(id);
      p.resolve({
        envelopeId: id,
        payload: (msg as { payload?: unknown }).payload,
        elapsedMs: performance.now() - p.sentAt,
      });
    });
    ws.send(
      JSON.stringify({
        type: 'hello',
        num_connections: live.size,
        debug_info: { host: 'applink-fake', build_number: 1, approximate_connection_time: 18060 },
        connection_info: { app_id: o.appId },
      }),
    );
  });

  const connected = (): WebSocket[] => [...live].filter((w) => w.readyState === w.OPEN);

  return {
    appToken,
    openConnection() {
      opened++;
      const ticket = randomUUID();
      tickets.add(ticket);
      return { ok: true, url: `ws://127.0.0.1:${port}/link/?ticket=${ticket}&app_id=${o.appId}` };
    },
    connectedCount: () => connected().length,
    opens: () => opened,
    async waitForConnection(timeoutMs = 10_000) {
      const until = Date.now() + timeoutMs;
      while (connected().length === 0) {
        if (Date.now() > until)
          throw new Error(`fake Socket Mode: no client connected within ${timeoutMs} ms (opens: ${opened})`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    deliver(type, payload, d = {}) {
      const ws = connected()[0];
      if (!ws) return Promise.reject(new Error('fake Socket Mode: no connected client to deliver to'));
      const envelopeId = randomUUID();
      const timeoutMs = d.timeoutMs ?? 10_000;
      return new Promise<SocketAck>((resolve, reject) => {
        const timer = setTimeout(() => {
          pending.delete(envelopeId);
          reject(new Error(`fake Socket Mode: envelope ${type} not acknowledged within ${timeoutMs} ms`));
        }, timeoutMs);
        pending.set(envelopeId, {
          sentAt: performance.now(),
          resolve: (a) => {
            clearTimeout(timer);
            resolve(a);
          },
        });
        ws.send(
          JSON.stringify({
            envelope_id: envelopeId,
            payload,
            type,
            accepts_response_payload: d.acceptsResponsePayload ?? type === 'slash_commands',
          }),
        );
      });
    },
    refreshAll() {
      for (const ws of connected()) {
        ws.send(
          JSON.stringify({ type: 'disconnect', reason: 'refresh_requested', debug_info: { host: 'applink-fake' } }),
        );
        setTimeout(() => ws.close(1000), 50);
      }
    },
    async close() {
      for (const ws of live) ws.terminate();
      await new Promise<void>((r) => wss.close(() => r()));
    },
  };
}

/** Our fake Slack Web API with Socket Mode behind `apps.connections.open`: what a Socket Mode bot talks to. */
export async function startSlackWithSocketMode(
  appId = 'A0FAKEAPP1',
): Promise<{ slack: FakeSlack; socket: FakeSocketMode; close(): Promise<void> }> {
  const socket = await startFakeSocketMode({ appId });
  const slack = await startFakeSlack({
    appConnections: { appToken: socket.appToken, open: () => socket.openConnection() },
  });
  return {
    slack,
    socket,
    async close() {
      await slack.close();
      await socket.close();
    },
  };
}
