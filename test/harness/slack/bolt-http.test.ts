/**
 * The Slack harness end to end: the real Bolt App in HTTP mode (its HTTPReceiver on 127.0.0.1,
 * random port), its WebClient pointed at the fake Slack API, and requests signed like Slack's.
 */
import type { AddressInfo } from 'node:net';
import { App, LogLevel } from '@slack/bolt';
import type { BlockAction, Logger, StaticSelectAction } from '@slack/bolt';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeSlack } from './fake-slack-api.ts';
import type { FakeSlack } from './fake-slack-api.ts';
import {
  appHomeOpenedPayload,
  blockActionPayload,
  sendEvent,
  sendInteraction,
  sendSlashCommand,
  staticSelectPayload,
} from './signed-request.ts';

const SIGNING_SECRET = 'test-signing-secret-8f2c';
const CHANNEL = 'C0GPUOPS01';
const USER = 'U0REQUEST1';

/** Collects Bolt's log lines instead of printing them; tests can assert on them. */
function memoryLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  let level = LogLevel.WARN;
  const push =
    (lvl: string) =>
    (...msg: unknown[]) => {
      lines.push(`${lvl} ${msg.map(String).join(' ')}`);
    };
  return {
    lines,
    debug: push('debug'),
    info: push('info'),
    warn: push('warn'),
    error: push('error'),
    setLevel: (l: LogLevel) => {
      level = l;
    },
    getLevel: () => level,
    setName: () => {},
  };
}

interface Harness {
  fake: FakeSlack;
  app: App;
  url: string;
  logger: ReturnType<typeof memoryLogger>;
  runs: Array<{ text: string; retryNum: number | undefined }>;
  actions: string[];
  /** app_home_opened events the listener saw: user and tab. */
  homeOpens: Array<{ user: string; tab: string }>;
  /** Handlers still running; tests wait for 0 so one test's posts never land in the next one's fake. */
  inFlight: { count: number };
}

async function startHarness(): Promise<Harness> {
  const fake = await startFakeSlack();
  const logger = memoryLogger();
  const runs: Harness['runs'] = [];
  const actions: string[] = [];
  const homeOpens: Harness['homeOpens'] = [];
  const inFlight = { count: 0 };
  const app = new App({
    signingSecret: SIGNING_SECRET,
    token: fake.botToken,
    logger,
    // Default retry policy kept on purpose: the 429 test proves Bolt's client honours Retry-After.
    clientOptions: { slackApiUrl: fake.apiUrl },
  });
  app.command('/gpu', async ({ ack, command, client, context }) => {
    inFlight.count += 1;
    try {
      await ack({ response_type: 'ephemeral', text: `Working on \`${command.text}\`` });
      runs.push({ text: command.text, retryNum: context.retryNum });
      const parent = await client.chat.postMessage({
        channel: command.channel_id,
        text: `Incident for ${command.text}`,
      });
      if (parent.ts === undefined) throw new Error('no ts');
      await client.chat.postMessage({ channel: command.channel_id, thread_ts: parent.ts, text: 'Before snapshot' });
    } finally {
      inFlight.count -= 1;
    }
  });
  app.action<BlockAction<StaticSelectAction>>(
    { type: 'block_actions', action_id: 'pick' },
    async ({ ack, body, action, respond }) => {
      await ack();
      actions.push(
        `${body.user.id} picked ${action.selected_option.value} (${action.selected_option.text.text}) in ${body.state?.values ? JSON.stringify(body.state.values) : 'no state'}`,
      );
      await respond({
        text: `Picked ${action.selected_option.value}`,
        replace_original: false,
        response_type: 'ephemeral',
      });
    },
  );
  app.action('approve', async ({ ack, body, respond }) => {
    await ack();
    actions.push(body.user.id);
    await respond({ text: `Approved by <@${body.user.id}>`, replace_original: false, response_type: 'in_channel' });
  });
  app.event('app_home_opened', async ({ event }) => {
    homeOpens.push({ user: event.user, tab: event.tab ?? '(none)' });
  });
  const server = await app.start({ port: 0, host: '127.0.0.1' });
  const { port } = server.address() as AddressInfo;
  return { fake, app, url: `http://127.0.0.1:${port}/slack/events`, logger, runs, actions, homeOpens, inFlight };
}

describe('Bolt HTTP receiver + fake Slack', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => {
    await h.app.stop();
    await h.fake.close();
  });
  afterEach(async () => {
    await h.fake.waitFor(() => h.inFlight.count === 0, 15_000);
    h.fake.reset();
    h.runs.length = 0;
    h.actions.length = 0;
    h.homeOpens.length = 0;
  });

  it('an Events API delivery (app_home_opened, JSON, signed) is acked with 200 and reaches the event listener', async () => {
    const res = await sendEvent(h.url, SIGNING_SECRET, appHomeOpenedPayload({ user: USER }));
    expect(res.status).toBe(200);
    const seen = await h.fake.waitFor(() => (h.homeOpens.length > 0 ? h.homeOpens : null));
    expect(seen).toEqual([{ user: USER, tab: 'home' }]);
  });

  it('an Events API delivery with a forged signature gets 401 and no listener runs', async () => {
    const res = await sendEvent(h.url, SIGNING_SECRET, appHomeOpenedPayload({ user: USER }), {
      signature: `v0=${'cd'.repeat(32)}`,
    });
    expect(res.status).toBe(401);
    await new Promise((r) => setTimeout(r, 100));
    expect(h.homeOpens).toEqual([]);
  });

  it('acks a signed slash command with an ephemeral body, then posts a parent and a thread reply', async () => {
    const res = await sendSlashCommand(h.url, SIGNING_SECRET, {
      text: 'status ct129',
      user_id: USER,
      channel_id: CHANNEL,
      response_url: h.fake.newResponseUrl(),
    });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ response_type: 'ephemeral', text: 'Working on `status ct129`' });
    expect(res.elapsedMs).toBeLessThan(3000);

    const [parent] = await h.fake.waitFor(() => {
      const top = h.fake.messages(CHANNEL);
      return top.length === 1 && h.fake.thread(CHANNEL, top[0]?.ts ?? '').length === 2 ? top : undefined;
    });
    expect(parent?.text).toBe('Incident for status ct129');
    const thread = h.fake.thread(CHANNEL, parent?.ts ?? '');
    expect(thread.map((m) => m.text)).toEqual(['Incident for status ct129', 'Before snapshot']);
    expect(thread[1]?.thread_ts).toBe(parent?.ts);
    expect(thread[1]?.ts.localeCompare(parent?.ts ?? '')).toBe(1);
    expect(h.runs).toEqual([{ text: 'status ct129', retryNum: undefined }]);
  });

  it('rejects a forged signature with 401 and never runs the handler', async () => {
    const res = await sendSlashCommand(
      h.url,
      SIGNING_SECRET,
      { text: 'unstick ct129', user_id: USER, channel_id: CHANNEL, response_url: h.fake.newResponseUrl() },
      { signature: `v0=${'ab'.repeat(32)}` },
    );
    expect(res.status).toBe(401);
    expect(res.body).toBe('');
    await new Promise((r) => setTimeout(r, 100));
    expect(h.runs).toEqual([]);
    expect(h.fake.calls('chat.postMessage')).toEqual([]);
  });

  it('rejects a body changed after signing (signature of another body)', async () => {
    const res = await sendSlashCommand(
      h.url,
      SIGNING_SECRET,
      { text: 'status ct129', user_id: USER, channel_id: CHANNEL, response_url: h.fake.newResponseUrl() },
      { mutateBodyAfterSigning: (b) => b.replace('status', 'unstick') },
    );
    expect(res.status).toBe(401);
    expect(h.runs).toEqual([]);
  });

  it('rejects a correctly signed but stale request (timestamp 5 min + 1 s old) with 401', async () => {
    const res = await sendSlashCommand(
      h.url,
      SIGNING_SECRET,
      { text: 'unstick ct129', user_id: USER, channel_id: CHANNEL, response_url: h.fake.newResponseUrl() },
      { timestampSec: Math.floor(Date.now() / 1000) - 301 },
    );
    expect(res.status).toBe(401);
    await new Promise((r) => setTimeout(r, 100));
    expect(h.runs).toEqual([]);
    expect(h.fake.calls('chat.postMessage')).toEqual([]);
  });

  it('accepts a request signed 4 minutes ago (inside the window)', async () => {
    const res = await sendSlashCommand(
      h.url,
      SIGNING_SECRET,
      { text: 'status ct130', user_id: USER, channel_id: CHANNEL, response_url: h.fake.newResponseUrl() },
      { timestampSec: Math.floor(Date.now() / 1000) - 240 },
    );
    expect(res.status).toBe(200);
  });

  it('does not dedup a redelivery: X-Slack-Retry-Num reaches context.retryNum and the handler runs again', async () => {
    const fields = { text: 'status ct131', user_id: USER, channel_id: CHANNEL, response_url: h.fake.newResponseUrl() };
    await sendSlashCommand(h.url, SIGNING_SECRET, fields);
    await sendSlashCommand(h.url, SIGNING_SECRET, fields, {
      headers: { 'X-Slack-Retry-Num': '1', 'X-Slack-Retry-Reason': 'http_timeout' },
    });
    await h.fake.waitFor(() => h.fake.messages(CHANNEL).length === 2);
    expect(h.runs).toEqual([
      { text: 'status ct131', retryNum: undefined },
      { text: 'status ct131', retryNum: 1 },
    ]);
  });

  it('waits out a 429 Retry-After on chat.postMessage and delivers the message exactly once', async () => {
    h.fake.failNext('chat.postMessage', 1, { status: 429, retryAfterSec: 1 });
    const res = await sendSlashCommand(h.url, SIGNING_SECRET, {
      text: 'status ct132',
      user_id: USER,
      channel_id: CHANNEL,
      response_url: h.fake.newResponseUrl(),
    });
    expect(res.status).toBe(200);
    await h.fake.waitFor(() => {
      const top = h.fake.messages(CHANNEL);
      return top.length === 1 && h.fake.thread(CHANNEL, top[0]?.ts ?? '').length === 2;
    }, 10_000);
    const posts = h.fake.calls('chat.postMessage');
    expect(posts.map((c) => c.status)).toEqual([429, 200, 200]);
    const [limited, retried] = posts;
    expect(retried!.at - limited!.at).toBeGreaterThanOrEqual(1000);
    expect(h.fake.messages(CHANNEL).map((m) => m.text)).toEqual(['Incident for status ct132']);
  });

  it('a button click (block_actions) is verified, acked and answered through response_url', async () => {
    const responseUrl = h.fake.newResponseUrl();
    const payload = blockActionPayload({
      user: 'U0APPROVE1',
      channel: CHANNEL,
      messageTs: '1764495287.000100',
      actionId: 'approve',
      value: 'apr_123',
      responseUrl,
    });
    const res = await sendInteraction(h.url, SIGNING_SECRET, payload);
    expect(res.status).toBe(200);
    const [resp] = await h.fake.waitFor(() => (h.fake.responses().length === 1 ? h.fake.responses() : undefined));
    expect(resp?.url).toBe(responseUrl);
    expect(resp?.body).toMatchObject({
      text: 'Approved by <@U0APPROVE1>',
      replace_original: false,
      response_type: 'in_channel',
    });
    expect(h.actions).toEqual(['U0APPROVE1']);

    const forged = await sendInteraction(h.url, 'not-the-secret', payload);
    expect(forged.status).toBe(401);
    expect(h.actions).toEqual(['U0APPROVE1']);
  });

  it('a static_select pick (block_actions with selected_option and state) reaches the listener of its action_id, with the chosen value', async () => {
    const responseUrl = h.fake.newResponseUrl();
    const payload = staticSelectPayload({
      user: 'U0ALICE001',
      channel: CHANNEL,
      messageTs: '1764495287.000100',
      actionId: 'pick',
      blockId: 'b1',
      selected: { text: 'ct130', value: 'inc_x|ct130' },
      responseUrl,
    });
    const res = await sendInteraction(h.url, SIGNING_SECRET, payload);
    expect(res.status).toBe(200);
    const [resp] = await h.fake.waitFor(() => (h.fake.responses().length === 1 ? h.fake.responses() : undefined));
    expect(resp?.body).toMatchObject({ text: 'Picked inc_x|ct130', response_type: 'ephemeral' });
    expect(h.actions).toEqual([
      'U0ALICE001 picked inc_x|ct130 (ct130) in {"b1":{"pick":{"type":"static_select","selected_option":{"text":{"type":"plain_text","text":"ct130","emoji":true},"value":"inc_x|ct130"}}}}',
    ]);
  });

  it("enforces Slack's limits on Bolt's client: a 41k-character text fails with msg_too_long", async () => {
    await expect(h.app.client.chat.postMessage({ channel: CHANNEL, text: 'x'.repeat(41_000) })).rejects.toMatchObject({
      code: 'slack_webapi_platform_error',
      data: { ok: false, error: 'msg_too_long' },
    });
    expect(h.fake.messages(CHANNEL)).toEqual([]);
    await expect(h.app.client.chat.postMessage({ channel: CHANNEL, text: 'x'.repeat(40_000) })).resolves.toMatchObject({
      ok: true,
    });
  });
});
