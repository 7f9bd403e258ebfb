import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Logger } from '../logger.ts';
import type { RecordOutcome } from './alert-store.ts';
import { type MappedAlert, type MappingSettings, mapAlert, type NamedMachine } from './map.ts';
import { parsePayload } from './payload.ts';
import { RateLimit } from './rate-limit.ts';

/**
 * `POST /alertmanager`, the thin HTTP part of the receiver (the parse and map are pure, in
 * payload.ts and map.ts): a bearer token (Alertmanager's `http_config.authorization`) or 401; a
 * bounded body (413) and rate (503 with Retry-After, which Alertmanager retries); a malformed
 * payload or an unknown version 400, changing nothing; 200 only once every alert is recorded in
 * Redis, 503 otherwise: Alertmanager retries 5xx, so its retries are the delivery guarantee.
 */
export interface ReceiverOptions {
  /** GPU_MEDIC_ALERTMANAGER_TOKEN. */
  token: string;
  record(m: MappedAlert, nowMs: number): Promise<RecordOutcome>;
  machines: readonly NamedMachine[];
  mapping: MappingSettings;
  now(): number;
  logger: Logger;
  /** Largest body taken (bytes). Default 1 MiB (200 alerts of 64 labels fit). */
  maxBytes?: number;
  /** Notifications per second, and the burst. Default 20/s, burst 40 (Alertmanager batches by group). */
  rate?: { perSecond: number; burst: number };
}

export const ALERTMANAGER_PATH = '/alertmanager';

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

function answer(
  res: ServerResponse,
  status: number,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(`${JSON.stringify(body)}\n`);
}

export function alertmanagerHandler(o: ReceiverOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const want = digest(o.token);
  const maxBytes = o.maxBytes ?? 1024 * 1024;
  const rate = new RateLimit(o.rate?.perSecond ?? 20, o.rate?.burst ?? 40);
  return (req, res) => {
    if (req.method !== 'POST') {
      req.resume();
      answer(res, 405, { error: 'POST an Alertmanager webhook payload here' }, { allow: 'POST' });
      return;
    }
    const auth = req.headers.authorization ?? '';
    const m = /^Bearer (.+)$/.exec(auth);
    if (!m || !timingSafeEqual(digest(m[1] ?? ''), want)) {
      o.logger.warn(
        { remote: req.socket.remoteAddress, hadToken: m !== null },
        'alertmanager: request without the right token refused',
      );
      req.resume();
      answer(
        res,
        401,
        { error: 'a bearer token (http_config.authorization) is required' },
        { 'www-authenticate': 'Bearer' },
      );
      return;
    }
    if (!rate.take(o.now())) {
      req.resume();
      answer(res, 503, { error: 'too many notifications; retry later' }, { 'retry-after': String(rate.waitSec()) });
      return;
    }
    const declared = Number(req.headers['content-length'] ?? '0');
    if (declared > maxBytes) {
      req.resume();
      answer(res, 413, { error: `the body is larger than ${maxBytes} bytes: set max_alerts in the webhook_config` });
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (c: Buffer) => {
      if (tooLarge) return;
      size += c.length;
      if (size > maxBytes) {
        tooLarge = true;
        chunks.length = 0;
        answer(res, 413, { error: `the body is larger than ${maxBytes} bytes: set max_alerts in the webhook_config` });
        return;
      }
      chunks.push(c);
    });
    req.on('error', () => answer(res, 400, { error: 'the request body could not be read' }));
    req.on('end', () => {
      if (tooLarge) return;
      void handleBody(Buffer.concat(chunks).toString('utf8'), o).then(
        (r) => answer(res, r.status, r.body),
        (err: unknown) => {
          o.logger.warn(
            { err },
            'alertmanager: notification not recorded (Redis?); answered 503 so Alertmanager retries',
          );
          answer(res, 503, { error: 'not recorded; retry later' });
        },
      );
    });
  };
}

async function handleBody(
  body: string,
  o: ReceiverOptions,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const p = parsePayload(body);
  if (!p.ok) {
    o.logger.warn({ status: p.status, error: p.error }, 'alertmanager: payload refused');
    return { status: p.status, body: { error: p.error } };
  }
  const now = o.now();
  const outcomes: Record<string, number> = {};
  // One at a time, in order: a firing and a resolved of one fingerprint in one payload keep their order.
  for (const a of p.payload.alerts) {
    const mapped = mapAlert(a, o.machines, o.mapping, now);
    const r = await o.record(mapped, now);
    outcomes[r] = (outcomes[r] ?? 0) + 1;
  }
  o.logger.info({ alerts: p.payload.alerts.length, outcomes }, 'alertmanager: notification recorded');
  return { status: 200, body: { status: 'recorded', alerts: p.payload.alerts.length, outcomes } };
}

/** The receiver on a port of its own (Socket Mode, or GPU_MEDIC_ALERTMANAGER_PORT): only `POST /alertmanager`. */
export async function startAlertmanagerServer(o: {
  host: string;
  port: number;
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  logger: Logger;
}): Promise<{ port: number; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    if ((req.url ?? '').split('?')[0] !== ALERTMANAGER_PATH) {
      req.resume();
      answer(res, 404, { error: `not found: the Alertmanager receiver is at POST ${ALERTMANAGER_PATH}` });
      return;
    }
    o.handler(req, res);
  });
  server.requestTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr !== null ? addr.port : o.port;
  o.logger.info({ host: o.host, port }, 'alertmanager receiver listening');
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
