/**
 * The fake Slack API on its own, driven by the real @slack/web-api WebClient: the behaviours bot
 * tests rely on (ts, threads, updates, limits, faults, rate limits, outage) must hold here first.
 */
import { silentSlackLogger } from './silent-logger.ts';
import { WebClient } from '@slack/web-api';
import type { WebClientOptions } from '@slack/web-api';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { slackRefusal, startFakeSlack } from './fake-slack-api.ts';
import type { FakeSlack } from './fake-slack-api.ts';

const C = 'C0GPUOPS01';
const quick = { retries: 0 };

const silent = silentSlackLogger;
const webClient = (token: string | undefined, apiUrl: string, opts: WebClientOptions = {}) =>
  new WebClient(token, { slackApiUrl: apiUrl, logger: silent, retryConfig: quick, ...opts });

describe('fake Slack Web API', () => {
  let fake: FakeSlack;
  let client: WebClient;
  beforeAll(async () => {
    fake = await startFakeSlack();
    client = webClient(fake.botToken, fake.apiUrl);
  });
  afterAll(async () => {
    await fake.close();
  });
  afterEach(() => {
    fake.reset();
    fake.disableRateLimits();
    fake.setUnreachable(false);
  });

  it('serves under /api/ and answers auth.test with the bot identity', async () => {
    expect(fake.apiUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/api\/$/);
    await expect(client.auth.test()).resolves.toMatchObject({
      ok: true,
      user_id: fake.botUserId,
      bot_id: fake.botId,
      team_id: fake.teamId,
    });
  });

  it('rejects a wrong token (invalid_auth), a missing one (not_authed) and unknown methods', async () => {
    const wrong = webClient('xoxb-not-ours', fake.apiUrl);
    await expect(wrong.chat.postMessage({ channel: C, text: 'x' })).rejects.toMatchObject({
      data: { error: 'invalid_auth' },
    });
    const none = webClient(undefined, fake.apiUrl);
    await expect(none.auth.test()).rejects.toMatchObject({ data: { error: 'not_authed' } });
    await expect(client.apiCall('gpu.reset')).rejects.toMatchObject({ data: { error: 'unknown_method' } });
    expect(fake.messages(C)).toEqual([]);
  });

  it('gives Slack-shaped ts values that strictly increase per channel, and threads replies', async () => {
    const a = await client.chat.postMessage({ channel: C, text: 'one' });
    const b = await client.chat.postMessage({ channel: C, text: 'two' });
    const r = await client.chat.postMessage({ channel: C, text: 'reply', thread_ts: a.ts });
    for (const ts of [a.ts, b.ts, r.ts]) expect(ts).toMatch(/^\d{10}\.\d{6}$/);
    expect(Number(b.ts)).toBeGreaterThan(Number(a.ts));
    expect(Number(r.ts)).toBeGreaterThan(Number(b.ts));
    expect(fake.messages(C).map((m) => m.text)).toEqual(['one', 'two']);
    expect(fake.thread(C, a.ts!).map((m) => m.text)).toEqual(['one', 'reply']);
    expect(fake.thread(C, a.ts!)[0]?.reply_count).toBe(1);
    await expect(client.conversations.replies({ channel: C, ts: a.ts! })).resolves.toMatchObject({
      messages: [
        { text: 'one', reply_count: 1 },
        { text: 'reply', thread_ts: a.ts },
      ],
    });
  });

  it('refuses thread_ts that is unknown or a reply, and unknown channel ids', async () => {
    const a = await client.chat.postMessage({ channel: C, text: 'parent' });
    const r = await client.chat.postMessage({ channel: C, text: 'reply', thread_ts: a.ts });
    await expect(
      client.chat.postMessage({ channel: C, text: 'x', thread_ts: '1700000000.000100' }),
    ).rejects.toMatchObject({
      data: { error: 'thread_not_found' },
    });
    await expect(client.chat.postMessage({ channel: C, text: 'x', thread_ts: r.ts })).rejects.toMatchObject({
      data: { error: 'thread_not_found' },
    });
    await expect(client.chat.postMessage({ channel: 'C0OTHER001', text: 'x', thread_ts: a.ts })).rejects.toMatchObject({
      data: { error: 'thread_not_found' },
    });
    await expect(client.chat.postMessage({ channel: '#gpu-ops', text: 'x' })).rejects.toMatchObject({
      data: { error: 'channel_not_found' },
    });
    await expect(client.chat.postMessage({ channel: C, text: '' })).rejects.toMatchObject({
      data: { error: 'no_text' },
    });
  });

  it('chat.update applies to the stored message, keeps omitted blocks, and refuses unknown or foreign messages', async () => {
    const blocks = [{ type: 'section', text: { type: 'mrkdwn', text: '*Before*' } }];
    const a = await client.chat.postMessage({ channel: C, text: 'v1', blocks });
    await client.chat.update({ channel: C, ts: a.ts!, text: 'v2' });
    const [msg] = fake.messages(C);
    expect(msg).toMatchObject({ text: 'v2', blocks, history: [{ text: 'v1' }] });
    expect(msg?.edited?.user).toBe(fake.botUserId);
    await client.chat.update({ channel: C, ts: a.ts!, text: 'v3', blocks: [] });
    expect(fake.messages(C)[0]?.blocks).toBeUndefined();
    await expect(client.chat.update({ channel: C, ts: '1700000000.000100', text: 'x' })).rejects.toMatchObject({
      data: { error: 'message_not_found' },
    });
    const human = fake.seedUserMessage({ channel: C, user: 'U0HUMAN001', text: '/gpu unstick ct129' });
    await expect(client.chat.update({ channel: C, ts: human, text: 'x' })).rejects.toMatchObject({
      data: { error: 'cant_update_message' },
    });
    // A human's message is a valid thread parent.
    await expect(client.chat.postMessage({ channel: C, thread_ts: human, text: 'on it' })).resolves.toMatchObject({
      ok: true,
    });
  });

  it('records ephemerals with their user', async () => {
    await client.chat.postEphemeral({ channel: C, user: 'U0REQUEST1', text: 'only you' });
    expect(fake.ephemerals()).toMatchObject([{ channel: C, user: 'U0REQUEST1', text: 'only you' }]);
    expect(fake.messages(C)).toEqual([]);
  });

  it('accepts JSON bodies with a Bearer token, as Slack documents for POST methods', async () => {
    const res = await fetch(`${fake.apiUrl}chat.postMessage`, {
      method: 'POST',
      headers: { 'content-type': 'application/json; charset=utf-8', authorization: `Bearer ${fake.botToken}` },
      body: JSON.stringify({ channel: C, text: 'json', blocks: [{ type: 'divider' }] }),
    });
    expect(await res.json()).toMatchObject({ ok: true, channel: C });
    expect(fake.calls('chat.postMessage')[0]?.body).toEqual({
      channel: C,
      text: 'json',
      blocks: [{ type: 'divider' }],
    });
  });

  describe('message limits', () => {
    const section = (text: string) => ({ type: 'section', text: { type: 'mrkdwn', text } });

    it('rejects text over 40,000 characters with msg_too_long', async () => {
      await expect(client.chat.postMessage({ channel: C, text: 'x'.repeat(40_001) })).rejects.toMatchObject({
        data: { error: 'msg_too_long' },
      });
    });

    it('rejects 51 blocks, a 3001-char section and a 151-char header with invalid_blocks and a json-pointer', async () => {
      const many = Array.from({ length: 51 }, () => ({ type: 'divider' }));
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: many })).rejects.toMatchObject({
        data: {
          error: 'invalid_blocks',
          response_metadata: { messages: ['[ERROR] no more than 50 items allowed [json-pointer:/blocks]'] },
        },
      });
      await expect(
        client.chat.postMessage({
          channel: C,
          text: 't',
          blocks: Array.from({ length: 50 }, () => ({ type: 'divider' })),
        }),
      ).resolves.toMatchObject({ ok: true });
      await expect(
        client.chat.postMessage({ channel: C, text: 't', blocks: [section('x'.repeat(3001))] }),
      ).rejects.toMatchObject({
        data: {
          error: 'invalid_blocks',
          response_metadata: {
            messages: ['[ERROR] must be less than 3001 characters [json-pointer:/blocks/0/text/text]'],
          },
        },
      });
      await expect(
        client.chat.postMessage({ channel: C, text: 't', blocks: [section('x'.repeat(3000))] }),
      ).resolves.toMatchObject({ ok: true });
      const header = (n: number) => [{ type: 'header', text: { type: 'plain_text', text: 'h'.repeat(n) } }];
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: header(151) })).rejects.toMatchObject({
        data: { error: 'invalid_blocks' },
      });
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: header(150) })).resolves.toMatchObject({
        ok: true,
      });
    });

    it('applies the same limits to chat.update', async () => {
      const a = await client.chat.postMessage({ channel: C, text: 't' });
      await expect(
        client.chat.update({ channel: C, ts: a.ts!, text: 't', blocks: [section('x'.repeat(3001))] }),
      ).rejects.toMatchObject({
        data: { error: 'invalid_blocks' },
      });
      expect(fake.messages(C)[0]?.blocks).toBeUndefined();
    });

    const cell = (text: string) => ({ type: 'raw_text', text });
    const table = (rows: number, cols: number) => ({
      type: 'table',
      rows: Array.from({ length: rows }, (_, r) => Array.from({ length: cols }, (_, c) => cell(`${r}:${c}`))),
    });

    it('enforces the table block limits: 100 rows, 20 cells per row, 20 column_settings, non-empty cells', async () => {
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: [table(100, 20)] })).resolves.toMatchObject(
        { ok: true },
      );
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: [table(101, 2)] })).rejects.toMatchObject({
        data: {
          error: 'invalid_blocks',
          response_metadata: { messages: ['[ERROR] no more than 100 items allowed [json-pointer:/blocks/0/rows]'] },
        },
      });
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: [table(2, 21)] })).rejects.toMatchObject({
        data: { error: 'invalid_blocks' },
      });
      const settings = { ...table(2, 2), column_settings: Array.from({ length: 21 }, () => ({ align: 'right' })) };
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: [settings] })).rejects.toMatchObject({
        data: { error: 'invalid_blocks' },
      });
      const badAlign = { ...table(2, 2), column_settings: [{ align: 'justify' }] };
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: [badAlign] })).rejects.toMatchObject({
        data: { error: 'invalid_blocks' },
      });
      const empty = { type: 'table', rows: [[cell('GPU')], [cell('')]] };
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: [empty] })).rejects.toMatchObject({
        data: {
          error: 'invalid_blocks',
          response_metadata: {
            messages: ['[ERROR] must be more than 0 characters [json-pointer:/blocks/0/rows/1/0/text]'],
          },
        },
      });
    });

    it('checks a rich_text block the way Slack documents it: its four sub-element types, a list of sections (bullet or ordered), preformatted text and links only, each element with its required field', async () => {
      const rich = (...elements: unknown[]) => ({ type: 'rich_text', elements });
      const good = rich(
        { type: 'rich_text_section', elements: [{ type: 'text', text: 'a', style: { bold: true, code: true } }] },
        {
          type: 'rich_text_list',
          style: 'bullet',
          elements: [
            {
              type: 'rich_text_section',
              elements: [
                { type: 'user', user_id: 'U0APPROV1' },
                { type: 'emoji', name: 'lock' },
              ],
            },
          ],
        },
        { type: 'rich_text_preformatted', elements: [{ type: 'text', text: 'kill -s KILL 1' }], border: 0 },
        { type: 'rich_text_quote', elements: [{ type: 'link', url: 'https://example.com', text: 'x' }] },
      );
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: [good] })).resolves.toMatchObject({
        ok: true,
      });
      const refused = (block: unknown): string[] => slackRefusal({ text: 't', blocks: [block] })?.messages ?? [];
      expect(refused({ type: 'rich_text' })).toEqual([
        '[ERROR] must provide at least 1 item [json-pointer:/blocks/0/elements]',
      ]);
      expect(refused(rich({ type: 'rich_text_table', elements: [] }))).toEqual([
        '[ERROR] must be one of: rich_text_section, rich_text_list, rich_text_preformatted, rich_text_quote [json-pointer:/blocks/0/elements/0/type]',
      ]);
      expect(
        refused(rich({ type: 'rich_text_preformatted', elements: [{ type: 'user', user_id: 'U0APPROV1' }] })),
      ).toEqual(['[ERROR] must be one of: text, link [json-pointer:/blocks/0/elements/0/elements/0/type]']);
      expect(
        refused(rich({ type: 'rich_text_list', style: 'dots', elements: [{ type: 'text', text: 'not a section' }] })),
      ).toEqual([
        '[ERROR] must be one of: bullet, ordered [json-pointer:/blocks/0/elements/0/style]',
        '[ERROR] must be one of: rich_text_section [json-pointer:/blocks/0/elements/0/elements/0/type]',
      ]);
      expect(
        refused(
          rich({
            type: 'rich_text_section',
            elements: [
              { type: 'text' },
              { type: 'text', text: 'x', style: { bold: 'yes' } },
              { type: 'user' },
              { type: 'emoji' },
              { type: 'broadcast', range: 'world' },
              { type: 'mrkdwn', text: '*x*' },
            ],
          }),
        ),
      ).toEqual([
        '[ERROR] missing required field: text [json-pointer:/blocks/0/elements/0/elements/0]',
        '[ERROR] must be a boolean [json-pointer:/blocks/0/elements/0/elements/1/style/bold]',
        '[ERROR] missing required field: user_id [json-pointer:/blocks/0/elements/0/elements/2]',
        '[ERROR] missing required field: name [json-pointer:/blocks/0/elements/0/elements/3]',
        '[ERROR] must be one of: here, channel, everyone [json-pointer:/blocks/0/elements/0/elements/4/range]',
        '[ERROR] unsupported type: mrkdwn [json-pointer:/blocks/0/elements/0/elements/5/type]',
      ]);
    });

    it('enforces the static_select limits in an actions block: 1 to 100 options, option text 75 and value 150 characters, a plain_text placeholder', async () => {
      const select = (
        options: Array<{ text: string; value: string }>,
        placeholder: unknown = { type: 'plain_text', text: 'Pick' },
      ) => [
        {
          type: 'actions',
          elements: [
            {
              type: 'static_select',
              action_id: 'pick',
              placeholder,
              options: options.map((o) => ({ text: { type: 'plain_text', text: o.text }, value: o.value })),
            },
          ],
        },
      ];
      const n = (k: number) => Array.from({ length: k }, (_, i) => ({ text: `ct${i}`, value: `v${i}` }));
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: select(n(100)) })).resolves.toMatchObject({
        ok: true,
      });
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: select(n(101)) })).rejects.toMatchObject({
        data: {
          error: 'invalid_blocks',
          response_metadata: {
            messages: ['[ERROR] no more than 100 items allowed [json-pointer:/blocks/0/elements/0/options]'],
          },
        },
      });
      await expect(client.chat.postMessage({ channel: C, text: 't', blocks: select([]) })).rejects.toMatchObject({
        data: { error: 'invalid_blocks' },
      });
      await expect(
        client.chat.postMessage({ channel: C, text: 't', blocks: select([{ text: 'x'.repeat(76), value: 'v' }]) }),
      ).rejects.toMatchObject({
        data: {
          error: 'invalid_blocks',
          response_metadata: {
            messages: [
              '[ERROR] must be less than 76 characters [json-pointer:/blocks/0/elements/0/options/0/text/text]',
            ],
          },
        },
      });
      await expect(
        client.chat.postMessage({ channel: C, text: 't', blocks: select([{ text: 'x', value: 'v'.repeat(151) }]) }),
      ).rejects.toMatchObject({
        data: {
          error: 'invalid_blocks',
          response_metadata: {
            messages: ['[ERROR] must be less than 151 characters [json-pointer:/blocks/0/elements/0/options/0/value]'],
          },
        },
      });
      await expect(
        client.chat.postMessage({ channel: C, text: 't', blocks: select(n(2), { type: 'mrkdwn', text: 'Pick' }) }),
      ).rejects.toMatchObject({ data: { error: 'invalid_blocks' } });
    });

    it('allows one table per message, counting blocks and attachments', async () => {
      await expect(
        client.chat.postMessage({ channel: C, text: 't', blocks: [table(2, 2), table(2, 2)] }),
      ).rejects.toMatchObject({
        data: { error: 'invalid_attachments' },
      });
      await expect(
        client.chat.postMessage({
          channel: C,
          text: 't',
          blocks: [table(2, 2)],
          attachments: [{ blocks: [table(2, 2)] }],
        }),
      ).rejects.toMatchObject({ data: { error: 'invalid_attachments' } });
      await expect(
        client.chat.postMessage({ channel: C, text: 't', attachments: [{ blocks: [table(2, 2)] }] }),
      ).resolves.toMatchObject({ ok: true });
    });
  });

  describe('views.publish (App Home)', () => {
    const section = (text: string) => ({ type: 'section', text: { type: 'mrkdwn', text } });
    const home = (blocks: unknown[], extra: Record<string, unknown> = {}) =>
      ({ type: 'home' as const, blocks, ...extra }) as unknown as { type: 'home'; blocks: [] };
    const U = 'U0HOMEUSR1';

    it('keeps the published view per user: the same view id, a new hash per publish, the latest blocks', async () => {
      const a = await client.views.publish({ user_id: U, view: home([section('first')]) });
      expect(a).toMatchObject({ ok: true, view: { type: 'home', team_id: fake.teamId, app_id: fake.appId } });
      const b = await client.views.publish({ user_id: U, view: home([section('second')]) });
      expect(b.view?.id).toBe(a.view?.id);
      expect(b.view?.hash).not.toBe(a.view?.hash);
      expect(fake.homeView(U)).toMatchObject({ publishes: 2, view: { blocks: [section('second')] } });
      expect(fake.homeView('U0NOBODY01')).toBeUndefined();
      expect(fake.homeUsers()).toEqual([U]);
    });

    it('refuses a bad user_id, a view that is not home, 101 blocks, a table, a 3001-char section, long metadata, as Slack does', async () => {
      await expect(client.views.publish({ user_id: 'not-a-user', view: home([section('x')]) })).rejects.toMatchObject({
        data: { error: 'invalid_arguments', response_metadata: { messages: ['invalid `user_id`'] } },
      });
      await expect(
        client.views.publish({
          user_id: U,
          view: { type: 'modal', blocks: [section('x')] } as unknown as { type: 'home'; blocks: [] },
        }),
      ).rejects.toMatchObject({
        data: {
          error: 'invalid_arguments',
          response_metadata: { messages: ['[ERROR] must be one of: home [json-pointer:/view/type]'] },
        },
      });
      await expect(
        client.views.publish({ user_id: U, view: home(Array.from({ length: 101 }, () => ({ type: 'divider' }))) }),
      ).rejects.toMatchObject({
        data: {
          error: 'invalid_arguments',
          response_metadata: { messages: ['[ERROR] no more than 100 items allowed [json-pointer:/view/blocks]'] },
        },
      });
      await expect(
        client.views.publish({ user_id: U, view: home(Array.from({ length: 100 }, () => ({ type: 'divider' }))) }),
      ).resolves.toMatchObject({ ok: true });
      await expect(
        client.views.publish({
          user_id: U,
          view: home([{ type: 'table', rows: [[{ type: 'raw_text', text: 'a' }]] }]),
        }),
      ).rejects.toMatchObject({
        data: {
          error: 'invalid_arguments',
          response_metadata: { messages: ['[ERROR] unsupported type: table [json-pointer:/view/blocks/0/type]'] },
        },
      });
      await expect(client.views.publish({ user_id: U, view: home([section('x'.repeat(3001))]) })).rejects.toMatchObject(
        {
          data: {
            error: 'invalid_arguments',
            response_metadata: {
              messages: ['[ERROR] must be less than 3001 characters [json-pointer:/view/blocks/0/text/text]'],
            },
          },
        },
      );
      await expect(
        client.views.publish({ user_id: U, view: home([section('x')], { private_metadata: 'm'.repeat(3001) }) }),
      ).rejects.toMatchObject({ data: { error: 'invalid_arguments' } });
      await expect(
        client.views.publish({ user_id: U, view: home([section('x')], { callback_id: 'c'.repeat(256) }) }),
      ).rejects.toMatchObject({ data: { error: 'invalid_arguments' } });
      // The refused publishes changed nothing: the 100 dividers are still what the user sees.
      expect(fake.homeView(U)?.publishes).toBe(1);
    });

    it('over 250 kB: view_too_large; Home tab off: not_enabled; a stale hash: hash_conflict', async () => {
      const big = Array.from({ length: 90 }, () => section('語'.repeat(1000)));
      await expect(client.views.publish({ user_id: U, view: home(big) })).rejects.toMatchObject({
        data: { error: 'view_too_large' },
      });
      fake.setHomeTabEnabled(false);
      await expect(client.views.publish({ user_id: U, view: home([section('x')]) })).rejects.toMatchObject({
        data: { error: 'not_enabled' },
      });
      fake.setHomeTabEnabled(true);
      const first = await client.views.publish({ user_id: U, view: home([section('x')]) });
      await client.views.publish({ user_id: U, view: home([section('y')]) });
      await expect(
        client.views.publish({ user_id: U, view: home([section('z')]), hash: first.view?.hash ?? '' }),
      ).rejects.toMatchObject({ data: { error: 'hash_conflict' } });
      expect(fake.homeView(U)?.view).toMatchObject({ blocks: [section('y')] });
    });

    it('is rate limited as Tier 4 (100+/min) when rate limits are on: a burst, then 429 with Retry-After', async () => {
      fake.enableRateLimits();
      const rejecting = webClient(fake.botToken, fake.apiUrl, { rejectRateLimitedCalls: true });
      const results: string[] = [];
      for (let i = 0; i < 14; i++) {
        results.push(
          await rejecting.views.publish({ user_id: U, view: home([section(`v${i}`)]) }).then(
            () => 'ok',
            (e: { code?: string }) => e.code ?? 'error',
          ),
        );
      }
      expect(results.slice(0, 10)).toEqual(Array.from({ length: 10 }, () => 'ok'));
      expect(results).toContain('slack_webapi_rate_limited_error');
    });
  });

  describe('response URLs', () => {
    it('records what is posted to a response URL, and refuses a sixth use', async () => {
      const url = fake.newResponseUrl();
      expect(url).toMatch(new RegExp(`^${fake.baseUrl}/response/[A-Za-z0-9_-]+$`));
      const post = (body: object) =>
        fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const first = await post({ text: 'Queued', response_type: 'ephemeral', replace_original: false });
      expect(first.status).toBe(200);
      expect(fake.responses()).toMatchObject([
        { url, use: 1, body: { text: 'Queued', response_type: 'ephemeral', replace_original: false } },
      ]);
      for (let i = 2; i <= 5; i++) expect((await post({ text: `n${i}` })).status).toBe(200);
      expect((await post({ text: 'sixth' })).status).toBe(404);
      expect(fake.responses()).toHaveLength(5);
      expect((await fetch(`${fake.baseUrl}/response/nope`, { method: 'POST', body: '{}' })).status).toBe(404);
    });
  });

  describe('faults', () => {
    it('5xx: WebClient retries it (not an abort), so the message lands once after two attempts', async () => {
      const retrying = webClient(fake.botToken, fake.apiUrl, {
        retryConfig: { retries: 2, minTimeout: 10, maxTimeout: 20 },
      });
      fake.failNext('chat.postMessage', 1, { status: 503 });
      await expect(retrying.chat.postMessage({ channel: C, text: 'after 503' })).resolves.toMatchObject({ ok: true });
      expect(fake.calls('chat.postMessage').map((c) => c.status)).toEqual([503, 200]);
      expect(fake.messages(C).map((m) => m.text)).toEqual(['after 503']);
    });

    it('5xx with no retries left surfaces as slack_webapi_http_error with the status', async () => {
      fake.failNext('chat.postMessage', 1, { status: 500 });
      await expect(client.chat.postMessage({ channel: C, text: 'x' })).rejects.toMatchObject({
        code: 'slack_webapi_http_error',
        statusCode: 500,
      });
      expect(fake.messages(C)).toEqual([]);
    });

    it('a platform error (HTTP 200, ok:false) is not retried', async () => {
      const retrying = webClient(fake.botToken, fake.apiUrl, {
        retryConfig: { retries: 3, minTimeout: 10, maxTimeout: 20 },
      });
      fake.failNext('chat.postMessage', 1, { error: 'fatal_error' });
      await expect(retrying.chat.postMessage({ channel: C, text: 'x' })).rejects.toMatchObject({
        code: 'slack_webapi_platform_error',
      });
      expect(fake.calls('chat.postMessage')).toHaveLength(1);
    });

    it('429 carries Retry-After and error ratelimited; rejectRateLimitedCalls surfaces it without waiting', async () => {
      const rejecting = webClient(fake.botToken, fake.apiUrl, { rejectRateLimitedCalls: true });
      fake.failNext('chat.update', 1, { status: 429, retryAfterSec: 7 });
      await expect(rejecting.chat.update({ channel: C, ts: '1.000100', text: 'x' })).rejects.toMatchObject({
        code: 'slack_webapi_rate_limited_error',
        retryAfter: 7,
      });
      expect(fake.calls('chat.update')[0]).toMatchObject({
        status: 429,
        response: { ok: false, error: 'ratelimited' },
      });
    });

    it('the rate limiter allows a short burst per channel, then 429s with Retry-After; other channels are unaffected', async () => {
      fake.enableRateLimits({ postMessagePerChannel: { perSecond: 1, burst: 2 } });
      const rejecting = webClient(fake.botToken, fake.apiUrl, { rejectRateLimitedCalls: true });
      await rejecting.chat.postMessage({ channel: C, text: '1' });
      await rejecting.chat.postMessage({ channel: C, text: '2' });
      await expect(rejecting.chat.postMessage({ channel: C, text: '3' })).rejects.toMatchObject({ retryAfter: 1 });
      await expect(rejecting.chat.postMessage({ channel: 'C0OTHER001', text: 'elsewhere' })).resolves.toMatchObject({
        ok: true,
      });
      await new Promise((r) => setTimeout(r, 1100));
      await expect(rejecting.chat.postMessage({ channel: C, text: '3 again' })).resolves.toMatchObject({ ok: true });
      expect(fake.messages(C).map((m) => m.text)).toEqual(['1', '2', '3 again']);
    });

    it('unreachable: calls fail as request errors; a retrying client gets through once Slack is back', async () => {
      fake.setUnreachable(true);
      await expect(client.chat.postMessage({ channel: C, text: 'lost' })).rejects.toMatchObject({
        code: 'slack_webapi_request_error',
      });
      const retrying = webClient(fake.botToken, fake.apiUrl, {
        retryConfig: { retries: 20, minTimeout: 50, maxTimeout: 50 },
      });
      const pending = retrying.chat.postMessage({ channel: C, text: 'delayed' });
      await new Promise((r) => setTimeout(r, 200));
      expect(fake.calls()).toEqual([]);
      fake.setUnreachable(false);
      await expect(pending).resolves.toMatchObject({ ok: true });
      expect(fake.messages(C).map((m) => m.text)).toEqual(['delayed']);
    });
  });

  it('waitFor rejects with the recent calls when the condition never holds', async () => {
    await client.auth.test();
    await expect(fake.waitFor(() => fake.messages(C).length > 0, 50)).rejects.toThrow(/auth\.test 200/);
  });

  it('keeps message metadata and returns it only with include_all_metadata, from history and replies', async () => {
    const metadata = { event_type: 'gpu_medic_view', event_payload: { incident: 'inc_1', view_key: 'parent' } };
    const p = await client.chat.postMessage({ channel: C, text: 'parent', metadata });
    await client.chat.postMessage({
      channel: C,
      text: 'reply',
      thread_ts: p.ts!,
      metadata: { event_type: 'gpu_medic_view', event_payload: { view_key: 'r' } },
    });
    await client.chat.update({ channel: C, ts: p.ts!, text: 'parent, edited' });
    const plain = await client.conversations.history({ channel: C });
    expect(plain.messages?.[0]).not.toHaveProperty('metadata');
    const withMd = await client.conversations.history({ channel: C, include_all_metadata: true });
    expect(withMd.messages?.map((m) => [m.text, m.metadata])).toEqual([['parent, edited', metadata]]);
    const replies = await client.conversations.replies({ channel: C, ts: p.ts!, include_all_metadata: true });
    expect(replies.messages?.map((m) => m.metadata?.event_payload)).toEqual([
      metadata.event_payload,
      { view_key: 'r' },
    ]);
    await expect(
      client.apiCall('chat.postMessage', {
        channel: C,
        text: 'x',
        metadata: JSON.stringify({ event_type: 'has space', event_payload: {} }),
      }),
    ).rejects.toMatchObject({ data: { error: 'invalid_metadata_format' } });
    await expect(
      client.apiCall('chat.postMessage', { channel: C, text: 'x', metadata: JSON.stringify({ event_type: 'ok' }) }),
    ).rejects.toMatchObject({ data: { error: 'invalid_metadata_format' } });
  });

  it('pages history (newest first, oldest exclusive unless inclusive) and replies (oldest first) with cursors', async () => {
    const ts: string[] = [];
    for (let i = 0; i < 5; i++) ts.push((await client.chat.postMessage({ channel: C, text: `m${i}` })).ts!);
    for (let i = 0; i < 4; i++) await client.chat.postMessage({ channel: C, text: `r${i}`, thread_ts: ts[0]! });
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const r = await client.conversations.history({
        channel: C,
        limit: 2,
        oldest: ts[1]!,
        ...(cursor ? { cursor } : {}),
      });
      pages++;
      seen.push(...(r.messages ?? []).map((m) => m.text ?? ''));
      cursor = r.has_more ? r.response_metadata?.next_cursor : undefined;
    } while (cursor);
    expect(seen).toEqual(['m4', 'm3', 'm2']);
    expect(pages).toBe(2);
    const inclusive = await client.conversations.history({ channel: C, oldest: ts[1]!, inclusive: true });
    expect(inclusive.messages?.map((m) => m.text)).toEqual(['m4', 'm3', 'm2', 'm1']);
    const first = await client.conversations.replies({ channel: C, ts: ts[0]!, limit: 3 });
    expect(first.messages?.map((m) => m.text)).toEqual(['m0', 'r0', 'r1']);
    expect(first.has_more).toBe(true);
    const rest = await client.conversations.replies({
      channel: C,
      ts: ts[0]!,
      limit: 3,
      cursor: first.response_metadata!.next_cursor!,
    });
    expect(rest.messages?.map((m) => m.text)).toEqual(['r2', 'r3']);
    expect(rest.has_more).toBe(false);
    await expect(
      client.conversations.replies({ channel: C, ts: ts[0]!, cursor: 'bm90LW91cnM=' }),
    ).rejects.toMatchObject({ data: { error: 'invalid_cursor' } });
  });

  it('interceptNext performs the call or not, runs the hook, and drops the connection unanswered', async () => {
    let hooked = 0;
    fake.interceptNext({ method: 'chat.postMessage', perform: true, then: () => hooked++ });
    await expect(client.chat.postMessage({ channel: C, text: 'lost answer' })).rejects.toThrow();
    fake.interceptNext({
      method: 'chat.postMessage',
      match: (b) => b.text === 'never',
      perform: false,
      then: () => hooked++,
    });
    await client.chat.postMessage({ channel: C, text: 'through' });
    await expect(client.chat.postMessage({ channel: C, text: 'never' })).rejects.toThrow();
    expect(hooked).toBe(2);
    expect(fake.messages(C).map((m) => m.text)).toEqual(['lost answer', 'through']);
  });
});
