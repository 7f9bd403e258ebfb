import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { FakeSlack } from './fake-slack-api.ts';
import { startSlackWithSocketMode, type FakeSocketMode } from './fake-socket-mode.ts';

/** The local Socket Mode server holds to Slack's rules, so the bot's Socket Mode test means something. */
describe('fake Socket Mode', () => {
  let socket: FakeSocketMode;
  let slack: FakeSlack;
  let close: () => Promise<void>;
  beforeAll(async () => {
    ({ slack, socket, close } = await startSlackWithSocketMode());
  });
  afterAll(() => close());

  const open = async (token: string) => {
    const r = await fetch(`${slack.apiUrl}apps.connections.open`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
    });
    return (await r.json()) as { ok: boolean; url?: string; error?: string };
  };
  const connect = (url: string) =>
    new Promise<{ first: string | null; closeCode: number | null; ws: WebSocket }>((resolve) => {
      const ws = new WebSocket(url);
      ws.once('message', (d) => resolve({ first: String(d), closeCode: null, ws }));
      ws.once('close', (code) => resolve({ first: null, closeCode: code, ws }));
    });

  it('apps.connections.open takes the app-level token only', async () => {
    expect(await open(slack.botToken)).toEqual({ ok: false, error: 'not_allowed_token_type' });
    expect(await open('xapp-1-A0FAKEAPP1-wrong')).toEqual({ ok: false, error: 'invalid_auth' });
    const ok = await open(socket.appToken);
    expect(ok.ok).toBe(true);
    expect(ok.url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+\/link\/\?ticket=/);
  });

  it('says hello on connect, and a URL serves one connection only', async () => {
    const { url } = await open(socket.appToken);
    const first = await connect(String(url));
    expect(JSON.parse(String(first.first))).toMatchObject({ type: 'hello', connection_info: { app_id: 'A0FAKEAPP1' } });
    const again = await connect(String(url));
    expect(again.closeCode).toBe(4001);
    first.ws.close();
    await slack.waitFor(() => socket.connectedCount() === 0);
  });

  it('an envelope is settled only by an ack with its envelope_id', async () => {
    const { url } = await open(socket.appToken);
    const c = await connect(String(url));
    const got: Array<{ envelope_id: string; type: string }> = [];
    c.ws.on('message', (d) => got.push(JSON.parse(String(d)) as { envelope_id: string; type: string }));
    const acked = socket.deliver('slash_commands', { text: 'status' }, { timeoutMs: 3000 });
    await slack.waitFor(() => got.length === 1);
    c.ws.send(JSON.stringify({ envelope_id: 'not-this-one', payload: { text: 'x' } }));
    c.ws.send(JSON.stringify({ envelope_id: got[0]?.envelope_id, payload: { text: 'ok' } }));
    expect(await acked).toMatchObject({ envelopeId: got[0]?.envelope_id, payload: { text: 'ok' } });
    await expect(socket.deliver('interactive', {}, { timeoutMs: 300 })).rejects.toThrow(
      /not acknowledged within 300 ms/,
    );
    c.ws.close();
  });
});
