import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blockActionPayload, slashCommandPayload } from '../harness/slack/signed-request.ts';
import { keysOf, startStack, type Stack } from '../harness/stack.ts';

const OPS = 'C0ONCALL01';
const ALICE = 'U0ALICE001';

/**
 * Socket Mode is what real deployments run (no inbound port beside the SSH keys), so the same
 * path as the HTTP tests is walked here over a WebSocket: Slack's envelopes in, acks out.
 */
describe('Socket Mode end to end (the production default): envelopes in, acks out, thread posted', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({ socketMode: true, fleet: { hosts: [{ id: 'kpro5', gpus: 2 }] } });
  });
  afterAll(async () => {
    await s?.stop();
  });

  const socket = () => {
    if (!s.socket) throw new Error('stack is not in Socket Mode');
    return s.socket;
  };
  const slash = async (text: string, user = ALICE) => {
    const ack = await socket().deliver(
      'slash_commands',
      slashCommandPayload({ text, user_id: user, channel_id: OPS, response_url: s.slack.newResponseUrl() }),
    );
    const p = (ack.payload ?? {}) as { text?: string; response_type?: string };
    return { ...ack, text: String(p.text ?? ''), responseType: p.response_type };
  };

  it('connects with the app-level token and no HTTP listener', async () => {
    expect(s.bot.port).toBeNull();
    await socket().waitForConnection();
    expect(socket().connectedCount()).toBe(1);
    const opens = s.slack.calls('apps.connections.open');
    expect(opens.length).toBeGreaterThanOrEqual(1);
    expect(opens.every((c) => (c.response as { ok?: unknown }).ok === true)).toBe(true);
  });

  it('/gpu status kpro5: acked over the socket with the incident id, then the table in the thread', async () => {
    const holder = await s.fleet.spawnHolder('kpro5', { gpus: [{ index: 1, mib: 12_345 }], title: 'python3 train.py' });
    const r = await slash('status kpro5');
    expect(r.responseType).toBe('ephemeral');
    const id = /incident `(inc_[a-z0-9_]+)`/.exec(r.text)?.[1];
    expect(id, r.text).toBeDefined();
    const thread = await s.threadOf(String(id));
    expect(thread[1]?.text).toContain('12,345');
    expect(thread[1]?.text).toContain(String(holder.hostPid));
  });

  it('bad input is answered in the ack and queues nothing', async () => {
    const before = await keysOf(s.redis, s.prefix);
    const r = await slash('status kpro55');
    expect(r.responseType).toBe('ephemeral');
    expect(r.text).toMatch(/did you mean `kpro5`\?.*Nothing was queued/);
    expect(await keysOf(s.redis, s.prefix)).toEqual(before);
  });

  it('a button click arrives as an interactive envelope and is acked (an unknown approval is refused, nothing runs)', async () => {
    const responseUrl = s.slack.newResponseUrl();
    const ts = s.slack.seedUserMessage({ channel: OPS, user: 'U0FAKEBOT1', text: 'a card' });
    const ack = await socket().deliver(
      'interactive',
      blockActionPayload({
        user: ALICE,
        channel: OPS,
        messageTs: ts,
        actionId: 'gpu_approve',
        value: 'apr_doesnotexist',
        responseUrl,
      }),
    );
    expect(ack.envelopeId).toMatch(/^[0-9a-f-]{36}$/);
    const answer = await s.slack.waitFor(() => s.slack.responses().find((x) => x.url === responseUrl), 5000);
    expect(answer.body.response_type).toBe('ephemeral');
    expect(String(answer.body.text)).toMatch(/Nothing was run/);
  });

  it("Slack's connection refresh: the bot reconnects with a new URL and keeps serving", async () => {
    const opensBefore = socket().opens();
    socket().refreshAll();
    await s.slack.waitFor(() => socket().opens() > opensBefore && socket().connectedCount() === 1, 15_000);
    const r = await slash('status kpro5');
    expect(r.text).toMatch(/incident `inc_/);
  });
});
