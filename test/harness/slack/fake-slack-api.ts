/**
 * A local stand-in for the Slack Web API, close enough to Slack that @slack/web-api's WebClient
 * (and therefore Bolt's `client`, `say` and `respond`) cannot tell the difference for the methods
 * gpu-medic uses. Point a WebClient at it with `slackApiUrl: fake.apiUrl`.
 *
 * What it does like Slack (sources: docs.slack.dev method pages for chat.postMessage /
 * chat.update, the Block Kit block reference pages, "Rate limits", "Handling user interaction"):
 * - `POST /api/<method>`, form-encoded (WebClient's default, nested values JSON-encoded) or JSON;
 *   token from `Authorization: Bearer` or a `token` field; errors are HTTP 200 `{ok:false,error}`.
 * - `ts` values look like `"1764495287.000100"` and strictly increase per channel.
 * - Message limits: text over 40,000 chars → `msg_too_long` (Slack documents truncation past
 *   40k; we are stricter on purpose so the bot never relies on truncation), more than 50 blocks,
 *   section text over 3,000, header over 150, fields over 10 × 2,000, more than 100 attachments
 *   (`too_many_attachments`). Block errors carry `response_metadata.messages` in Slack's
 *   `[ERROR] … [json-pointer:/blocks/0/text/text]` shape.
 * - Table block (docs.slack.dev/reference/block-kit/blocks/table-block): at most 100 rows, at most
 *   20 cells per row, at most 20 column_settings (align left|center|right, is_wrapped boolean),
 *   cells raw_text | rich_text (| raw_number, per @slack/types 3.2); messages only; ONE table per
 *   message counting blocks and attachments[].blocks. Slack answers a second table with
 *   `invalid_attachments` / `only_one_table_allowed` (reported by several integrators, e.g.
 *   netclaw-dev/netclaw#55, openclaw/openclaw#57717), so the fake answers that too. Reported but
 *   undocumented: empty raw_text cells are rejected; we reject them as well.
 * - rich_text block (docs.slack.dev/reference/block-kit/blocks/rich-text-block): its four
 *   sub-element types, lists of sections, preformatted with text and links only, each inline
 *   element's required field and boolean styles (checkRichText); no length limit (none documented).
 * - 429 carries `Retry-After: <seconds>` and `{ok:false,error:'ratelimited'}`.
 * - response_url: usable up to 5 times within 30 minutes.
 * - Message metadata (docs.slack.dev/messaging/message-metadata): `metadata` on chat.postMessage /
 *   chat.update is `{ event_type, event_payload }` (event_type a short alphanumeric/underscore
 *   string, event_payload an object), else `invalid_metadata_format`; chat.update without
 *   `metadata` keeps the message's metadata. Reading methods return a message's `metadata` only
 *   when called with `include_all_metadata=true`.
 * - conversations.history: top-level messages of a channel (thread replies only when broadcast),
 *   newest first, within `oldest`/`latest` (exclusive unless `inclusive`), `limit` default 100,
 *   at most 999 (Slack recommends ≤ 200). conversations.replies: parent then replies, oldest first,
 *   `limit` default 1000; `ts` may be the parent or any reply; `thread_not_found` for an unknown
 *   ts. Both paginate with cursors: `has_more` plus `response_metadata.next_cursor`
 *   (base64 `next_ts:<ts>`, as Slack's look), `invalid_cursor` for one we did not issue. Both are
 *   Tier 3 (50+/min) for internal apps; Slack's 2025 limits for commercially distributed
 *   non-Marketplace apps (1 call/min, 15 messages) are not modelled (gpu-medic is an internal app).
 * - views.publish (docs.slack.dev/reference/methods/views.publish, .../views/home-tab-views): Tier 4
 *   (100+/min); `user_id` must be a user id, else `invalid_arguments` ("invalid `user_id`"); the
 *   view must be `type: home` with at most 100 blocks of the Home tab's types (no table, which is
 *   for messages only), block limits as in messages, private_metadata ≤ 3,000 and callback_id ≤ 255
 *   characters, else `invalid_arguments` with `[ERROR] … [json-pointer:/view/…]` messages; over
 *   250 kB → `view_too_large`; Home tab off → `not_enabled`; a `hash` other than the view's
 *   current one → `hash_conflict`. The published view is kept per user (`homeView`), replaced by
 *   each publish, with the same view id and a new hash.
 *
 * How @slack/web-api 8.2 (WebClient.makeRequest + p-retry 4) reacts to what this server sends:
 * - 429 with a numeric Retry-After: pauses the client's whole request queue for Retry-After
 *   seconds, then retries through p-retry, so the real wait is Retry-After plus p-retry's backoff
 *   (default policy `tenRetriesInAboutThirtyMinutes`: retries 10, factor ≈1.97, randomize, first
 *   backoff 1–2 s). With `rejectRateLimitedCalls: true` it throws WebAPIRateLimitedError instead.
 *   429 without a usable Retry-After is not retried.
 * - 5xx (and any non-200 status): throws WebAPIHTTPError inside the retried task, which is NOT an
 *   AbortError, so the default policy RETRIES it with the same exponential backoff (≈1 s, 2 s,
 *   4 s, … up to 10 times over ~30 min). A non-idempotent call that reached Slack and failed on
 *   the way back can therefore be sent twice; the fake records every attempt.
 * - Connection refused/reset (setUnreachable): fetch throws, wrapped as WebAPIRequestError, also
 *   retried by the default policy.
 * - `{ok:false}` on HTTP 200 is a platform error: thrown as WebAPIPlatformError, never retried.
 * Tests that need quick failure pass `retryConfig: { retries: 0 }` or a short policy.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomBytes } from 'node:crypto';

const SLACK_LIMITS = {
  messageTextChars: 40_000,
  blocksPerMessage: 50,
  attachmentsPerMessage: 100,
  blockIdChars: 255,
  sectionTextChars: 3_000,
  sectionFields: 10,
  sectionFieldChars: 2_000,
  headerTextChars: 150,
  contextElements: 10,
  actionsElements: 25,
  buttonTextChars: 75,
  buttonValueChars: 2_000,
  /** static_select (docs.slack.dev select-menu-element, option object): options, their text and value, the placeholder. */
  selectOptions: 100,
  optionTextChars: 75,
  optionValueChars: 150,
  placeholderChars: 150,
  actionIdChars: 255,
  markdownBlockTotalChars: 12_000,
  tableRows: 100,
  tableCellsPerRow: 20,
  tableColumnSettings: 20,
  tablesPerMessage: 1,
  responseUrlUses: 5,
  responseUrlLifetimeMs: 30 * 60 * 1000,
  /** Home tab views (docs.slack.dev/reference/views/home-tab-views, views.publish). */
  viewBlocks: 100,
  viewBytes: 250_000,
  viewPrivateMetadataChars: 3_000,
  viewCallbackIdChars: 255,
} as const;

/** What a recorded call looked like, in arrival order. */
export interface RecordedCall {
  /** Web API method (`chat.postMessage`) or `response_url` for a POST to a response URL. */
  method: string;
  /** Parsed body; JSON-in-form fields (`blocks`, `attachments`, `metadata`) parsed; `token` removed. */
  body: Record<string, unknown>;
  /** Server clock (ms) when the request arrived. */
  at: number;
  status: number;
  response: unknown;
  /** Value of X-Slack-Retry-Num-like retry markers are not sent by WebClient; kept for completeness. */
  headers: Record<string, string>;
}

export interface StoredMessage {
  channel: string;
  ts: string;
  /** Set on replies only (the parent's ts). Parents carry `reply_count` instead. */
  thread_ts?: string;
  text: string;
  blocks?: unknown[];
  attachments?: unknown[];
  /** Bot user id for app messages, the human's id for seeded user messages. */
  user: string;
  bot_id?: string;
  reply_count: number;
  reply_broadcast?: boolean;
  edited?: { user: string; ts: string };
  /** Earlier versions, oldest first, each as it was before a chat.update. */
  history: Array<{ text: string; blocks?: unknown[]; attachments?: unknown[] }>;
  /** Message metadata as posted (Slack returns it only with include_all_metadata). */
  metadata?: { event_type: string; event_payload: Record<string, unknown> };
}

/** What an intercepted call does (`interceptNext`): the hook runs, then the connection is dropped unanswered. */
export interface Intercept {
  /** Web API method, e.g. `chat.postMessage`; `'*'` for any. */
  method: string;
  /** Only calls whose parsed body satisfies this count (default: every call to `method`). */
  match?: (body: Record<string, unknown>, method: string) => boolean;
  /** `true`: Slack performs the call (the message is stored) and the answer is lost; `false`: the call never took effect. */
  perform: boolean;
  /** Runs after the call was (or was not) performed and before the connection is dropped, e.g. SIGKILL the caller. */
  then: () => void;
}

/** A user's Home tab as the app last published it (views.publish). */
export interface PublishedView {
  user: string;
  /** Slack's view id: the same for every publish to that user. */
  id: string;
  /** Changes with every publish; a publish naming an older one gets hash_conflict. */
  hash: string;
  view: Record<string, unknown>;
  /** How many times it was published. */
  publishes: number;
}

export interface EphemeralMessage {
  channel: string;
  user: string;
  text: string;
  blocks?: unknown[];
  attachments?: unknown[];
  thread_ts?: string;
  message_ts: string;
  at: number;
}

export interface ResponseUrlPost {
  id: string;
  url: string;
  body: {
    text?: string;
    blocks?: unknown[];
    attachments?: unknown[];
    response_type?: 'ephemeral' | 'in_channel' | string;
    replace_original?: boolean;
    delete_original?: boolean;
    thread_ts?: string;
    [key: string]: unknown;
  };
  at: number;
  /** Which use of this URL it was (1-based). */
  use: number;
}

export type Fault =
  | { status: 429; retryAfterSec?: number }
  /** `performed: true`: Slack did the call (a message is stored) and the answer was lost to a 5xx on the way back. */
  | { status: 500 | 502 | 503 | 504; body?: string; performed?: boolean }
  /** HTTP 200 with `{ok:false,error}`: a platform error WebClient does not retry. */
  | { error: string };

/** A token bucket: `burst` requests at once, refilled at `perSecond`. */
export interface BucketSpec {
  perSecond: number;
  burst: number;
}

export interface RateLimitConfig {
  /** chat.postMessage per channel. Default ~1/s with a burst of 3 ("short bursts >1 allowed"). */
  postMessagePerChannel?: BucketSpec;
  /** Other methods, per method for the whole app. Defaults follow Slack's tiers (see below). */
  methods?: Record<string, BucketSpec>;
}

/** Slack tiers: Tier 2 20+/min, Tier 3 50+/min, Tier 4 100+/min, "sporadic bursts" tolerated. */
const tier = (perMinute: number): BucketSpec => ({
  perSecond: perMinute / 60,
  burst: Math.max(3, Math.ceil(perMinute / 10)),
});
const DEFAULT_METHOD_LIMITS: Record<string, BucketSpec> = {
  'auth.test': tier(100), // special tier, generous
  'chat.update': tier(50), // Tier 3
  'chat.postEphemeral': tier(100), // Tier 4
  'chat.delete': tier(50), // Tier 3
  'conversations.replies': tier(50), // Tier 3 for internal apps
  'conversations.history': tier(50), // Tier 3 for internal apps
  'views.publish': tier(100), // Tier 4
};

export interface FakeSlackOptions {
  /** Bot token the server accepts. Default `xoxb-fake-gpu-medic`. */
  botToken?: string;
  teamId?: string;
  teamDomain?: string;
  botUserId?: string;
  botId?: string;
  appId?: string;
  /** Clock in ms for ts values, rate limits and response_url expiry. Default `Date.now`. */
  now?: () => number;
  /** Start with rate limiting on. Default off (turn on with `enableRateLimits`). */
  rateLimits?: RateLimitConfig;
  /** Socket Mode: `apps.connections.open` takes this app-level token and answers with `open()`. */
  appConnections?: { appToken: string; open(): Json };
  /** The app's Home tab is on (views.publish works). Default true; false: `not_enabled`, as Slack answers. */
  homeTabEnabled?: boolean;
}

export interface FakeSlack {
  /** `http://127.0.0.1:<port>/api/`, for WebClient's `slackApiUrl`. */
  readonly apiUrl: string;
  /** `http://127.0.0.1:<port>` */
  readonly baseUrl: string;
  readonly port: number;
  readonly botToken: string;
  readonly botUserId: string;
  readonly botId: string;
  readonly teamId: string;
  readonly appId: string;
  /** Every call in arrival order (a copy), optionally only one method's. */
  calls(method?: string): RecordedCall[];
  /** Top-level messages of a channel (what conversations.history would list), ts order, updates applied. */
  messages(channel: string): StoredMessage[];
  /** Parent then replies, ts order, updates applied; empty if there is no such parent. */
  thread(channel: string, ts: string): StoredMessage[];
  ephemerals(): EphemeralMessage[];
  responses(): ResponseUrlPost[];
  /** A user's Home tab as last published (a copy), or undefined when nothing was published to them. */
  homeView(user: string): PublishedView | undefined;
  /** Users with a published Home tab. */
  homeUsers(): string[];
  /** Switch the app's Home tab on or off (off: views.publish answers not_enabled). */
  setHomeTabEnabled(enabled: boolean): void;
  /** A fresh response URL on this server, as Slack puts in slash-command and interaction payloads. */
  newResponseUrl(): string;
  /** A message posted by a human (e.g. the thread parent a user wrote). Returns its ts. */
  seedUserMessage(args: { channel: string; user: string; text: string; thread_ts?: string }): string;
  /**
   * Polls `predicate` every 10 ms until it returns a truthy value, which is returned. Rejects after
   * `timeoutMs` (default 3000) with the recent calls in the message, to make failures readable.
   */
  waitFor<T>(predicate: () => T | undefined | null | false, timeoutMs?: number): Promise<T>;
  /**
   * The next call matching `i` is intercepted once: performed or not, then `i.then()` runs and the
   * connection is destroyed without an answer (a crash of the caller at that point, or a lost reply).
   */
  interceptNext(i: Intercept): void;
  /** The next `count` calls to `method` (`'*'`: any method, `'response_url'`: response URLs) fail. */
  failNext(method: string, count: number, fault: Fault): void;
  /** Drops every fault still pending from failNext (Slack is healthy again). */
  clearFaults(): void;
  enableRateLimits(config?: RateLimitConfig): void;
  disableRateLimits(): void;
  /** true: every connection, open or new, is destroyed (as in an outage). false: back to normal. */
  setUnreachable(unreachable: boolean): void;
  /** Forget messages, calls, faults and buckets (not the tokens). */
  reset(): void;
  close(): Promise<void>;
}

type Json = Record<string, unknown>;

interface ApiResult {
  status: number;
  body: Json;
  headers?: Record<string, string>;
}

class SlackApiError extends Error {
  constructor(
    readonly error: string,
    readonly messages: string[] = [],
  ) {
    super(error);
  }
}

const isRecord = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined =>
  typeof v === 'string' ? v : typeof v === 'number' ? String(v) : undefined;
const bool = (v: unknown): boolean | undefined =>
  typeof v === 'boolean' ? v : v === 'true' || v === '1' ? true : v === 'false' || v === '0' ? false : undefined;

const JSON_FIELDS = new Set(['blocks', 'attachments', 'metadata', 'view']);

function parseBody(raw: string, contentType: string): Json {
  if (raw.length === 0) return {};
  if (contentType.includes('application/json')) {
    const parsed: unknown = JSON.parse(raw);
    if (!isRecord(parsed)) throw new SlackApiError('invalid_json');
    return parsed;
  }
  const out: Json = {};
  for (const [key, value] of new URLSearchParams(raw)) {
    if (JSON_FIELDS.has(key) && value.length > 0) {
      try {
        out[key] = JSON.parse(value);
      } catch {
        // Slack answers a blocks field that is not JSON with invalid_blocks_format.
        throw new SlackApiError(
          key === 'blocks' ? 'invalid_blocks_format' : key === 'view' ? 'invalid_arguments' : `invalid_${key}`,
        );
      }
    } else {
      out[key] = value;
    }
  }
  return out;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** Formats ms-since-epoch plus a per-channel sequence into Slack's `seconds.micros` ts. */
function tsFromMicros(micros: bigint): string {
  const sec = micros / 1_000_000n;
  const frac = (micros % 1_000_000n).toString().padStart(6, '0');
  return `${sec}.${frac}`;
}

function microsFromTs(ts: string): bigint | undefined {
  const m = /^(\d+)\.(\d{6})$/.exec(ts);
  if (!m || m[1] === undefined || m[2] === undefined) return undefined;
  return BigInt(m[1]) * 1_000_000n + BigInt(m[2]);
}

// ---------------------------------------------------------------------------------------------
// Block Kit validation, in the shape Slack reports it.

interface BlockCheck {
  errors: string[];
  tables: number;
  markdownChars: number;
}

const err = (what: string, pointer: string) => `[ERROR] ${what} [json-pointer:${pointer}]`;

const MESSAGE_BLOCK_TYPES = new Set([
  'section',
  'header',
  'divider',
  'context',
  'actions',
  'image',
  'rich_text',
  'markdown',
  'table',
  'file',
  'video',
  'context_actions',
]);

/** Blocks a Home tab view may hold: no table (messages only) and no markdown block. */
const HOME_BLOCK_TYPES = new Set([
  'section',
  'header',
  'divider',
  'context',
  'actions',
  'image',
  'rich_text',
  'input',
  'file',
  'video',
  'context_actions',
]);

function checkTextObject(v: unknown, pointer: string, max: number, allowed: readonly string[], out: BlockCheck): void {
  if (!isRecord(v)) {
    out.errors.push(err('must provide an object', pointer));
    return;
  }
  const type = str(v.type);
  if (type === undefined || !allowed.includes(type)) {
    out.errors.push(err(`must be one of: ${allowed.join(', ')}`, `${pointer}/type`));
  }
  const text = str(v.text);
  if (text === undefined || text.length === 0) {
    out.errors.push(err('must be more than 0 characters', `${pointer}/text`));
  } else if (text.length > max) {
    out.errors.push(err(`must be less than ${max + 1} characters`, `${pointer}/text`));
  }
}

function checkElement(el: unknown, pointer: string, out: BlockCheck): void {
  if (!isRecord(el)) {
    out.errors.push(err('must provide an object', pointer));
    return;
  }
  const actionId = str(el.action_id);
  if (actionId !== undefined && actionId.length > SLACK_LIMITS.actionIdChars) {
    out.errors.push(err(`must be less than ${SLACK_LIMITS.actionIdChars + 1} characters`, `${pointer}/action_id`));
  }
  if (el.type === 'button') {
    checkTextObject(el.text, `${pointer}/text`, SLACK_LIMITS.buttonTextChars, ['plain_text'], out);
    const value = str(el.value);
    if (value !== undefined && value.length > SLACK_LIMITS.buttonValueChars) {
      out.errors.push(err(`must be less than ${SLACK_LIMITS.buttonValueChars + 1} characters`, `${pointer}/value`));
    }
    if (el.style !== undefined && el.style !== 'primary' && el.style !== 'danger') {
      out.errors.push(err('must be one of: primary, danger', `${pointer}/style`));
    }
  }
  if (el.type === 'static_select') {
    if (el.placeholder !== undefined)
      checkTextObject(el.placeholder, `${pointer}/placeholder`, SLACK_LIMITS.placeholderChars, ['plain_text'], out);
    // Exactly one of options / option_groups; this fake checks the options form (the one gpu-medic sends).
    if (el.options === undefined && el.option_groups === undefined)
      out.errors.push(err('must provide either options or option_groups', pointer));
    if (el.options !== undefined) {
      if (!Array.isArray(el.options) || el.options.length === 0) {
        out.errors.push(err('must provide at least 1 item', `${pointer}/options`));
      } else {
        if (el.options.length > SLACK_LIMITS.selectOptions)
          out.errors.push(err(`no more than ${SLACK_LIMITS.selectOptions} items allowed`, `${pointer}/options`));
        el.options.forEach((o: unknown, k) => {
          const op = `${pointer}/options/${k}`;
          if (!isRecord(o)) {
            out.errors.push(err('must provide an object', op));
            return;
          }
          checkTextObject(o.text, `${op}/text`, SLACK_LIMITS.optionTextChars, ['plain_text'], out);
          const value = str(o.value);
          if (value === undefined || value.length === 0)
            out.errors.push(err('must be more than 0 characters', `${op}/value`));
          else if (value.length > SLACK_LIMITS.optionValueChars)
            out.errors.push(err(`must be less than ${SLACK_LIMITS.optionValueChars + 1} characters`, `${op}/value`));
        });
      }
    }
  }
}

function checkTable(block: Json, pointer: string, out: BlockCheck): void {
  out.tables += 1;
  const rows = block.rows;
  if (!Array.isArray(rows) || rows.length === 0) {
    out.errors.push(err('must provide at least 1 item', `${pointer}/rows`));
    return;
  }
  if (rows.length > SLACK_LIMITS.tableRows) {
    out.errors.push(err(`no more than ${SLACK_LIMITS.tableRows} items allowed`, `${pointer}/rows`));
  }
  rows.forEach((row: unknown, r) => {
    const rp = `${pointer}/rows/${r}`;
    if (!Array.isArray(row) || row.length === 0) {
      out.errors.push(err('must provide at least 1 item', rp));
      return;
    }
    if (row.length > SLACK_LIMITS.tableCellsPerRow) {
      out.errors.push(err(`no more than ${SLACK_LIMITS.tableCellsPerRow} items allowed`, rp));
    }
    row.forEach((cell: unknown, c) => {
      const cp = `${rp}/${c}`;
      if (!isRecord(cell)) {
        out.errors.push(err('must provide an object', cp));
        return;
      }
      if (cell.type === 'raw_text') {
        const text = str(cell.text);
        if (text === undefined || text.length === 0)
          out.errors.push(err('must be more than 0 characters', `${cp}/text`));
      } else if (cell.type === 'raw_number') {
        if (typeof cell.number !== 'number' && typeof cell.text !== 'string') {
          out.errors.push(err('missing required field: number', cp));
        }
      } else if (cell.type === 'rich_text') {
        if (!Array.isArray(cell.elements) || cell.elements.length === 0) {
          out.errors.push(err('missing required field: elements', cp));
        }
      } else {
        out.errors.push(err('must be one of: raw_text, rich_text, raw_number', `${cp}/type`));
      }
    });
  });
  const settings = block.column_settings;
  if (settings !== undefined) {
    if (!Array.isArray(settings)) {
      out.errors.push(err('must provide an array', `${pointer}/column_settings`));
    } else {
      if (settings.length > SLACK_LIMITS.tableColumnSettings) {
        out.errors.push(
          err(`no more than ${SLACK_LIMITS.tableColumnSettings} items allowed`, `${pointer}/column_settings`),
        );
      }
      settings.forEach((s: unknown, i) => {
        if (s === null) return; // Slack's own examples skip a column with null
        const sp = `${pointer}/column_settings/${i}`;
        if (!isRecord(s)) {
          out.errors.push(err('must provide an object', sp));
          return;
        }
        if (s.align !== undefined && s.align !== 'left' && s.align !== 'center' && s.align !== 'right') {
          out.errors.push(err('must be one of: left, center, right', `${sp}/align`));
        }
        if (s.is_wrapped !== undefined && typeof s.is_wrapped !== 'boolean') {
          out.errors.push(err('must be a boolean', `${sp}/is_wrapped`));
        }
      });
    }
  }
}

/**
 * The rich_text block (docs.slack.dev/reference/block-kit/blocks/rich-text-block and its
 * sub-element pages; @slack/types RichText*): `elements` holds rich_text_section, rich_text_list,
 * rich_text_preformatted and rich_text_quote; a list's items are sections and its style is bullet
 * or ordered (indent 0-8, border 0|1); preformatted holds text and link elements only. Inline
 * elements are the @slack/types set, each with its required field (text.text, link.url,
 * user.user_id, emoji.name, broadcast.range here|channel|everyone, …); a style is booleans. Slack
 * documents no length limit for rich_text, so none is checked here.
 */
const RICH_SUB_ELEMENTS = ['rich_text_section', 'rich_text_list', 'rich_text_preformatted', 'rich_text_quote'];
const RICH_INLINE_REQUIRED: Record<string, readonly string[]> = {
  text: ['text'],
  link: ['url'],
  user: ['user_id'],
  usergroup: ['usergroup_id'],
  channel: ['channel_id'],
  team: ['team_id'],
  emoji: ['name'],
  broadcast: ['range'],
  date: ['timestamp', 'format'],
  color: ['value'],
};
const RICH_STYLE_KEYS = ['bold', 'italic', 'strike', 'code', 'underline'];

function checkRichInline(el: unknown, pointer: string, allowed: readonly string[] | null, out: BlockCheck): void {
  if (!isRecord(el)) {
    out.errors.push(err('must provide an object', pointer));
    return;
  }
  const type = str(el.type) ?? '';
  if (allowed !== null && !allowed.includes(type)) {
    out.errors.push(err(`must be one of: ${allowed.join(', ')}`, `${pointer}/type`));
    return;
  }
  const required = RICH_INLINE_REQUIRED[type];
  if (required === undefined) {
    out.errors.push(err(`unsupported type: ${type}`, `${pointer}/type`));
    return;
  }
  for (const field of required)
    if (el[field] === undefined) out.errors.push(err(`missing required field: ${field}`, pointer));
  if (type === 'broadcast' && el.range !== undefined && !['here', 'channel', 'everyone'].includes(String(el.range)))
    out.errors.push(err('must be one of: here, channel, everyone', `${pointer}/range`));
  if (el.style !== undefined) {
    if (!isRecord(el.style)) out.errors.push(err('must provide an object', `${pointer}/style`));
    else
      for (const [k, v] of Object.entries(el.style)) {
        if (!RICH_STYLE_KEYS.includes(k)) out.errors.push(err(`unsupported style: ${k}`, `${pointer}/style/${k}`));
        else if (typeof v !== 'boolean') out.errors.push(err('must be a boolean', `${pointer}/style/${k}`));
      }
  }
}

function checkRichElements(v: unknown, pointer: string, allowed: readonly string[] | null, out: BlockCheck): void {
  if (!Array.isArray(v)) {
    out.errors.push(err('must provide an array', pointer));
    return;
  }
  v.forEach((el: unknown, i) => checkRichInline(el, `${pointer}/${i}`, allowed, out));
}

function checkRichBorder(sub: Json, pointer: string, out: BlockCheck): void {
  if (sub.border !== undefined && sub.border !== 0 && sub.border !== 1)
    out.errors.push(err('must be one of: 0, 1', `${pointer}/border`));
}

function checkRichText(block: Json, pointer: string, out: BlockCheck): void {
  const els = block.elements;
  if (!Array.isArray(els) || els.length === 0) {
    out.errors.push(err('must provide at least 1 item', `${pointer}/elements`));
    return;
  }
  els.forEach((sub: unknown, i) => {
    const sp = `${pointer}/elements/${i}`;
    if (!isRecord(sub)) {
      out.errors.push(err('must provide an object', sp));
      return;
    }
    switch (sub.type) {
      case 'rich_text_section':
        checkRichElements(sub.elements, `${sp}/elements`, null, out);
        break;
      case 'rich_text_quote':
        checkRichBorder(sub, sp, out);
        checkRichElements(sub.elements, `${sp}/elements`, null, out);
        break;
      case 'rich_text_preformatted':
        checkRichBorder(sub, sp, out);
        checkRichElements(sub.elements, `${sp}/elements`, ['text', 'link'], out);
        break;
      case 'rich_text_list': {
        if (sub.style !== 'bullet' && sub.style !== 'ordered')
          out.errors.push(err('must be one of: bullet, ordered', `${sp}/style`));
        if (
          sub.indent !== undefined &&
          !(Number.isInteger(sub.indent) && Number(sub.indent) >= 0 && Number(sub.indent) <= 8)
        )
          out.errors.push(err('must be a number from 0 to 8', `${sp}/indent`));
        checkRichBorder(sub, sp, out);
        const items = sub.elements;
        if (!Array.isArray(items)) {
          out.errors.push(err('must provide an array', `${sp}/elements`));
          break;
        }
        items.forEach((item: unknown, j) => {
          const ip = `${sp}/elements/${j}`;
          if (!isRecord(item) || item.type !== 'rich_text_section') {
            out.errors.push(err('must be one of: rich_text_section', `${ip}/type`));
            return;
          }
          checkRichElements(item.elements, `${ip}/elements`, null, out);
        });
        break;
      }
      default:
        out.errors.push(err(`must be one of: ${RICH_SUB_ELEMENTS.join(', ')}`, `${sp}/type`));
    }
  });
}

function checkBlocks(
  blocks: unknown,
  pointer: string,
  out: BlockCheck,
  maxBlocks: number = SLACK_LIMITS.blocksPerMessage,
  allowedTypes: ReadonlySet<string> = MESSAGE_BLOCK_TYPES,
): void {
  if (!Array.isArray(blocks)) {
    out.errors.push(err('must provide an array', pointer));
    return;
  }
  if (blocks.length > maxBlocks) {
    out.errors.push(err(`no more than ${maxBlocks} items allowed`, pointer));
  }
  const blockIds = new Set<string>();
  blocks.forEach((block: unknown, i) => {
    const p = `${pointer}/${i}`;
    if (!isRecord(block)) {
      out.errors.push(err('must provide an object', p));
      return;
    }
    const type = str(block.type);
    if (type === undefined || !allowedTypes.has(type)) {
      out.errors.push(err(`unsupported type: ${String(type)}`, `${p}/type`));
      return;
    }
    const blockId = str(block.block_id);
    if (blockId !== undefined) {
      if (blockId.length > SLACK_LIMITS.blockIdChars) {
        out.errors.push(err(`must be less than ${SLACK_LIMITS.blockIdChars + 1} characters`, `${p}/block_id`));
      }
      if (blockIds.has(blockId)) out.errors.push(err(`duplicate block_id: ${blockId}`, `${p}/block_id`));
      blockIds.add(blockId);
    }
    switch (type) {
      case 'section': {
        if (block.text === undefined && block.fields === undefined) {
          out.errors.push(err('must provide either text or fields', p));
        }
        if (block.text !== undefined) {
          checkTextObject(block.text, `${p}/text`, SLACK_LIMITS.sectionTextChars, ['plain_text', 'mrkdwn'], out);
        }
        if (block.fields !== undefined) {
          if (!Array.isArray(block.fields)) {
            out.errors.push(err('must provide an array', `${p}/fields`));
          } else {
            if (block.fields.length > SLACK_LIMITS.sectionFields) {
              out.errors.push(err(`no more than ${SLACK_LIMITS.sectionFields} items allowed`, `${p}/fields`));
            }
            block.fields.forEach((f: unknown, j) =>
              checkTextObject(f, `${p}/fields/${j}`, SLACK_LIMITS.sectionFieldChars, ['plain_text', 'mrkdwn'], out),
            );
          }
        }
        if (block.accessory !== undefined) checkElement(block.accessory, `${p}/accessory`, out);
        break;
      }
      case 'header':
        checkTextObject(block.text, `${p}/text`, SLACK_LIMITS.headerTextChars, ['plain_text'], out);
        break;
      case 'context': {
        const els = block.elements;
        if (!Array.isArray(els) || els.length === 0)
          out.errors.push(err('must provide at least 1 item', `${p}/elements`));
        else if (els.length > SLACK_LIMITS.contextElements) {
          out.errors.push(err(`no more than ${SLACK_LIMITS.contextElements} items allowed`, `${p}/elements`));
        }
        break;
      }
      case 'actions': {
        const els = block.elements;
        if (!Array.isArray(els) || els.length === 0) {
          out.errors.push(err('must provide at least 1 item', `${p}/elements`));
          break;
        }
        if (els.length > SLACK_LIMITS.actionsElements) {
          out.errors.push(err(`no more than ${SLACK_LIMITS.actionsElements} items allowed`, `${p}/elements`));
        }
        const actionIds = new Set<string>();
        els.forEach((el: unknown, j) => {
          checkElement(el, `${p}/elements/${j}`, out);
          const id = isRecord(el) ? str(el.action_id) : undefined;
          if (id !== undefined) {
            if (actionIds.has(id)) out.errors.push(err(`duplicate action_id: ${id}`, `${p}/elements/${j}/action_id`));
            actionIds.add(id);
          }
        });
        break;
      }
      case 'markdown': {
        const text = str(block.text) ?? '';
        if (text.length === 0) out.errors.push(err('must be more than 0 characters', `${p}/text`));
        out.markdownChars += text.length;
        break;
      }
      case 'table':
        checkTable(block, p, out);
        break;
      case 'rich_text':
        checkRichText(block, p, out);
        break;
      default:
        break;
    }
  });
}

/** Why Slack would refuse this message (`invalid_blocks` with its messages), or null: for renderer tests. */
export function slackRefusal(message: {
  text?: string;
  blocks?: unknown[];
}): { error: string; messages: string[] } | null {
  try {
    checkMessagePayload(message as Json, true);
    return null;
  } catch (e) {
    if (e instanceof SlackApiError) return { error: e.error, messages: e.messages };
    throw e;
  }
}

/** Checks a message payload (post, update, ephemeral, response_url) the way Slack does. */
function checkMessagePayload(body: Json, requireContent: boolean): void {
  const text = str(body.text);
  const hasBlocks = Array.isArray(body.blocks) && body.blocks.length > 0;
  const hasAttachments = Array.isArray(body.attachments) && body.attachments.length > 0;
  if (requireContent && (text === undefined || text.length === 0) && !hasBlocks && !hasAttachments) {
    throw new SlackApiError('no_text');
  }
  if (text !== undefined && text.length > SLACK_LIMITS.messageTextChars) throw new SlackApiError('msg_too_long');
  const check: BlockCheck = { errors: [], tables: 0, markdownChars: 0 };
  if (body.blocks !== undefined) checkBlocks(body.blocks, '/blocks', check);
  if (check.markdownChars > SLACK_LIMITS.markdownBlockTotalChars) {
    check.errors.push(
      err(`markdown blocks may hold at most ${SLACK_LIMITS.markdownBlockTotalChars} characters in total`, '/blocks'),
    );
  }
  if (check.errors.length > 0) throw new SlackApiError('invalid_blocks', check.errors);
  const attachmentCheck: BlockCheck = { errors: [], tables: 0, markdownChars: 0 };
  if (body.attachments !== undefined) {
    if (!Array.isArray(body.attachments))
      throw new SlackApiError('invalid_attachments', [err('must provide an array', '/attachments')]);
    if (body.attachments.length > SLACK_LIMITS.attachmentsPerMessage) throw new SlackApiError('too_many_attachments');
    body.attachments.forEach((a: unknown, i) => {
      if (isRecord(a) && a.blocks !== undefined) checkBlocks(a.blocks, `/attachments/${i}/blocks`, attachmentCheck);
    });
  }
  if (attachmentCheck.errors.length > 0) throw new SlackApiError('invalid_attachments', attachmentCheck.errors);
  if (check.tables + attachmentCheck.tables > SLACK_LIMITS.tablesPerMessage) {
    throw new SlackApiError('invalid_attachments', [
      `[ERROR] only_one_table_allowed: a message may hold ${SLACK_LIMITS.tablesPerMessage} table block, found ${check.tables + attachmentCheck.tables}`,
    ]);
  }
}

// ---------------------------------------------------------------------------------------------

interface Bucket {
  tokens: number;
  updatedAt: number;
}

export async function startFakeSlack(opts: FakeSlackOptions = {}): Promise<FakeSlack> {
  const now = opts.now ?? Date.now;
  const botToken = opts.botToken ?? 'xoxb-fake-gpu-medic';
  const teamId = opts.teamId ?? 'T0FAKE0001';
  const teamDomain = opts.teamDomain ?? 'gpu-medic-test';
  const botUserId = opts.botUserId ?? 'U0FAKEBOT1';
  const botId = opts.botId ?? 'B0FAKEBOT1';
  const appId = opts.appId ?? 'A0FAKEAPP1';

  let calls: RecordedCall[] = [];
  let channels = new Map<string, StoredMessage[]>();
  let lastTs = new Map<string, bigint>();
  let ephemerals: EphemeralMessage[] = [];
  let responses: ResponseUrlPost[] = [];
  let responseUrls = new Map<string, { createdAt: number; uses: number }>();
  let faults: Array<{ method: string; remaining: number; fault: Fault }> = [];
  let rateLimits: { postMessage: BucketSpec; methods: Record<string, BucketSpec> } | undefined;
  let buckets = new Map<string, Bucket>();
  let unreachable = false;
  let intercepts: Intercept[] = [];
  let homeViews = new Map<string, PublishedView>();
  let homeTabEnabled = opts.homeTabEnabled ?? true;
  let viewSeq = 0;
  const sockets = new Set<Socket>();

  const nextTs = (channel: string): string => {
    const fromClock = BigInt(Math.floor(now())) * 1000n;
    const prev = lastTs.get(channel) ?? 0n;
    // Slack's ts fractions step in hundreds in practice (…000100, …000200).
    const micros = fromClock > prev ? fromClock : prev + 100n;
    lastTs.set(channel, micros);
    return tsFromMicros(micros);
  };

  const channelMessages = (channel: string): StoredMessage[] => {
    let list = channels.get(channel);
    if (!list) {
      list = [];
      channels.set(channel, list);
    }
    return list;
  };

  const validChannel = (channel: string | undefined): channel is string =>
    channel !== undefined && /^[CGD][A-Z0-9]{2,}$/.test(channel);

  const findMessage = (channel: string, ts: string): StoredMessage | undefined =>
    channels.get(channel)?.find((m) => m.ts === ts);

  const takeToken = (key: string, spec: BucketSpec): number | undefined => {
    const t = now();
    const b = buckets.get(key) ?? { tokens: spec.burst, updatedAt: t };
    b.tokens = Math.min(spec.burst, b.tokens + ((t - b.updatedAt) / 1000) * spec.perSecond);
    b.updatedAt = t;
    buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return undefined;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / spec.perSecond));
  };

  const rateLimitFor = (method: string, body: Json): number | undefined => {
    if (!rateLimits) return undefined;
    if (method === 'chat.postMessage') {
      return takeToken(`chat.postMessage:${str(body.channel) ?? ''}`, rateLimits.postMessage);
    }
    const spec = rateLimits.methods[method];
    return spec ? takeToken(method, spec) : undefined;
  };

  const takeFault = (method: string): Fault | undefined => {
    const f = faults.find((x) => x.remaining > 0 && (x.method === method || x.method === '*'));
    if (!f) return undefined;
    f.remaining -= 1;
    faults = faults.filter((x) => x.remaining > 0);
    return f.fault;
  };

  const faultResult = (fault: Fault): ApiResult => {
    if ('error' in fault) return { status: 200, body: { ok: false, error: fault.error } };
    if (fault.status === 429) {
      const retryAfter = fault.retryAfterSec ?? 1;
      return { status: 429, body: { ok: false, error: 'ratelimited' }, headers: { 'retry-after': String(retryAfter) } };
    }
    return {
      status: fault.status,
      body: { ok: false, error: 'fatal_error', fake_body: fault.body ?? 'upstream failure' },
    };
  };

  const toMessageView = (m: StoredMessage, withMetadata = false): Json => ({
    type: 'message',
    ...(m.bot_id ? { subtype: 'bot_message', bot_id: m.bot_id, app_id: appId } : {}),
    user: m.user,
    text: m.text,
    ts: m.ts,
    ...(m.blocks ? { blocks: m.blocks } : {}),
    ...(m.attachments ? { attachments: m.attachments } : {}),
    ...(m.thread_ts ? { thread_ts: m.thread_ts } : {}),
    ...(m.thread_ts === undefined && m.reply_count > 0 ? { thread_ts: m.ts, reply_count: m.reply_count } : {}),
    ...(m.edited ? { edited: m.edited } : {}),
    ...(withMetadata && m.metadata ? { metadata: m.metadata } : {}),
    team: teamId,
  });

  /** `{event_type, event_payload}` or undefined when absent; Slack's error for anything else. */
  const parseMetadata = (v: unknown): StoredMessage['metadata'] => {
    if (v === undefined || v === '') return undefined;
    if (
      !isRecord(v) ||
      typeof v.event_type !== 'string' ||
      !/^[A-Za-z0-9_]{1,255}$/.test(v.event_type) ||
      !isRecord(v.event_payload)
    ) {
      throw new SlackApiError('invalid_metadata_format');
    }
    return { event_type: v.event_type, event_payload: { ...v.event_payload } };
  };

  /** One page of `list` (already in answer order) after `cursor`, Slack-style. */
  const page = (
    list: StoredMessage[],
    body: Json,
    defaultLimit: number,
    maxLimit: number,
  ): { items: StoredMessage[]; next: string | undefined } => {
    const rawLimit = str(body.limit);
    const limit =
      rawLimit === undefined
        ? defaultLimit
        : Math.min(maxLimit, Math.max(1, Math.floor(Number(rawLimit)) || defaultLimit));
    let start = 0;
    const cursor = str(body.cursor);
    if (cursor !== undefined && cursor !== '') {
      const m = /^next_ts:(\d+\.\d{6})$/.exec(Buffer.from(cursor, 'base64').toString('utf8'));
      const at = m?.[1] === undefined ? -1 : list.findIndex((x) => x.ts === m[1]);
      if (at < 0) throw new SlackApiError('invalid_cursor');
      start = at;
    }
    const items = list.slice(start, start + limit);
    const following = list[start + limit];
    return { items, next: following ? Buffer.from(`next_ts:${following.ts}`).toString('base64') : undefined };
  };

  /** `oldest` / `latest` / `inclusive` as Slack applies them (latest defaults to now). */
  const inWindow = (body: Json): ((m: StoredMessage) => boolean) => {
    const oldest = microsFromTs(normTs(str(body.oldest) ?? '0'));
    const latest = str(body.latest) === undefined ? undefined : microsFromTs(normTs(str(body.latest) ?? '0'));
    const inclusive = bool(body.inclusive) === true;
    return (m) => {
      const t = microsFromTs(m.ts) ?? 0n;
      if (oldest !== undefined && (inclusive ? t < oldest : t <= oldest)) return false;
      if (latest !== undefined && (inclusive ? t > latest : t >= latest)) return false;
      return true;
    };
  };

  /** `1764495287` or `1764495287.5` → `1764495287.500000` (Slack accepts both for oldest/latest). */
  const normTs = (v: string): string => {
    const m = /^(\d+)(?:\.(\d{1,6}))?$/.exec(v);
    if (!m || m[1] === undefined) throw new SlackApiError('invalid_ts_oldest');
    return `${m[1]}.${(m[2] ?? '').padEnd(6, '0')}`;
  };

  const methods: Record<string, (body: Json) => Json> = {
    'api.test': (body) => ({ ok: true, args: body }),
    'apps.connections.open': () => ({ ok: false, error: 'not_allowed_token_type' }), // answered in handleApi
    'auth.test': () => ({
      ok: true,
      url: `https://${teamDomain}.slack.com/`,
      team: 'GPU Medic Test',
      user: 'gpu-medic',
      team_id: teamId,
      user_id: botUserId,
      bot_id: botId,
      is_enterprise_install: false,
    }),
    'chat.postMessage': (body) => {
      const channel = str(body.channel);
      if (!validChannel(channel)) throw new SlackApiError('channel_not_found');
      checkMessagePayload(body, true);
      const threadTs = str(body.thread_ts);
      let parent: StoredMessage | undefined;
      if (threadTs !== undefined && threadTs !== '') {
        parent = findMessage(channel, threadTs);
        if (!parent || parent.thread_ts !== undefined) throw new SlackApiError('thread_not_found');
      }
      const metadata = parseMetadata(body.metadata);
      const ts = nextTs(channel);
      const msg: StoredMessage = {
        channel,
        ts,
        ...(metadata ? { metadata } : {}),
        text: str(body.text) ?? '',
        user: botUserId,
        bot_id: botId,
        reply_count: 0,
        history: [],
        ...(Array.isArray(body.blocks) ? { blocks: body.blocks } : {}),
        ...(Array.isArray(body.attachments) ? { attachments: body.attachments } : {}),
        ...(parent ? { thread_ts: parent.ts } : {}),
        ...(parent && bool(body.reply_broadcast) ? { reply_broadcast: true } : {}),
      };
      if (parent) parent.reply_count += 1;
      channelMessages(channel).push(msg);
      return { ok: true, channel, ts, message: toMessageView(msg) };
    },
    'chat.update': (body) => {
      const channel = str(body.channel);
      const ts = str(body.ts);
      if (!validChannel(channel)) throw new SlackApiError('channel_not_found');
      if (ts === undefined) throw new SlackApiError('message_not_found');
      const msg = findMessage(channel, ts);
      if (!msg) throw new SlackApiError('message_not_found');
      if (msg.bot_id !== botId) throw new SlackApiError('cant_update_message');
      checkMessagePayload(body, false);
      const metadata = parseMetadata(body.metadata);
      const text = str(body.text);
      const blocks = Array.isArray(body.blocks) ? body.blocks : undefined;
      const attachments = Array.isArray(body.attachments) ? body.attachments : undefined;
      if (text === undefined && blocks === undefined && attachments === undefined) throw new SlackApiError('no_text');
      msg.history.push({
        text: msg.text,
        ...(msg.blocks ? { blocks: msg.blocks } : {}),
        ...(msg.attachments ? { attachments: msg.attachments } : {}),
      });
      // Omitted blocks/attachments are kept; an empty array removes them (chat.update docs).
      if (text !== undefined) msg.text = text;
      if (blocks !== undefined) {
        if (blocks.length === 0) delete msg.blocks;
        else msg.blocks = blocks;
      }
      if (attachments !== undefined) {
        if (attachments.length === 0) delete msg.attachments;
        else msg.attachments = attachments;
      }
      if (metadata) msg.metadata = metadata;
      msg.edited = { user: botUserId, ts: tsFromMicros(BigInt(Math.floor(now())) * 1000n) };
      return { ok: true, channel, ts, text: msg.text, message: toMessageView(msg) };
    },
    'chat.postEphemeral': (body) => {
      const channel = str(body.channel);
      const user = str(body.user);
      if (!validChannel(channel)) throw new SlackApiError('channel_not_found');
      if (user === undefined || !/^[UW][A-Z0-9]{2,}$/.test(user)) throw new SlackApiError('user_not_found');
      checkMessagePayload(body, true);
      const threadTs = str(body.thread_ts);
      const messageTs = nextTs(channel);
      ephemerals.push({
        channel,
        user,
        text: str(body.text) ?? '',
        message_ts: messageTs,
        at: now(),
        ...(Array.isArray(body.blocks) ? { blocks: body.blocks } : {}),
        ...(Array.isArray(body.attachments) ? { attachments: body.attachments } : {}),
        ...(threadTs ? { thread_ts: threadTs } : {}),
      });
      return { ok: true, message_ts: messageTs };
    },
    'views.publish': (body) => {
      const user = str(body.user_id);
      if (user === undefined || !/^[UW][A-Z0-9]{2,}$/.test(user))
        throw new SlackApiError('invalid_arguments', ['invalid `user_id`']);
      const view = body.view;
      if (!isRecord(view)) throw new SlackApiError('invalid_arguments', [err('must provide an object', '/view')]);
      if (Buffer.byteLength(JSON.stringify(view), 'utf8') > SLACK_LIMITS.viewBytes)
        throw new SlackApiError('view_too_large');
      if (view.type === 'home' && !homeTabEnabled) throw new SlackApiError('not_enabled');
      const check: BlockCheck = { errors: [], tables: 0, markdownChars: 0 };
      if (view.type !== 'home') check.errors.push(err('must be one of: home', '/view/type'));
      checkBlocks(view.blocks, '/view/blocks', check, SLACK_LIMITS.viewBlocks, HOME_BLOCK_TYPES);
      const meta = view.private_metadata;
      if (meta !== undefined && (typeof meta !== 'string' || meta.length > SLACK_LIMITS.viewPrivateMetadataChars)) {
        check.errors.push(
          err(`must be less than ${SLACK_LIMITS.viewPrivateMetadataChars + 1} characters`, '/view/private_metadata'),
        );
      }
      const callbackId = view.callback_id;
      if (
        callbackId !== undefined &&
        (typeof callbackId !== 'string' || callbackId.length > SLACK_LIMITS.viewCallbackIdChars)
      ) {
        check.errors.push(
          err(`must be less than ${SLACK_LIMITS.viewCallbackIdChars + 1} characters`, '/view/callback_id'),
        );
      }
      if (check.errors.length > 0) throw new SlackApiError('invalid_arguments', check.errors);
      const prev = homeViews.get(user);
      const hash = str(body.hash);
      if (hash !== undefined && hash !== '' && hash !== prev?.hash) throw new SlackApiError('hash_conflict');
      viewSeq += 1;
      const published: PublishedView = {
        user,
        id: prev?.id ?? `V${String(viewSeq).padStart(9, '0')}`,
        hash: `${Math.floor(now() / 1000)}.${String(viewSeq).padStart(8, '0')}`,
        view: structuredClone(view),
        publishes: (prev?.publishes ?? 0) + 1,
      };
      homeViews.set(user, published);
      return {
        ok: true,
        view: {
          id: published.id,
          team_id: teamId,
          type: 'home',
          blocks: view.blocks,
          private_metadata: str(view.private_metadata) ?? '',
          callback_id: str(view.callback_id) ?? '',
          external_id: str(view.external_id) ?? '',
          state: { values: {} },
          hash: published.hash,
          clear_on_close: false,
          notify_on_close: false,
          close: null,
          submit: null,
          root_view_id: published.id,
          previous_view_id: null,
          app_id: appId,
          bot_id: botId,
        },
      };
    },
    'conversations.replies': (body) => {
      const channel = str(body.channel);
      const ts = str(body.ts);
      if (!validChannel(channel)) throw new SlackApiError('channel_not_found');
      const parentTs = ts === undefined ? undefined : (findMessage(channel, ts)?.thread_ts ?? ts);
      const thread = parentTs === undefined ? [] : threadOf(channel, parentTs);
      if (thread.length === 0) throw new SlackApiError('thread_not_found');
      const { items, next } = page(thread.filter(inWindow(body)), body, 1000, 1000);
      const withMetadata = bool(body.include_all_metadata) === true;
      return {
        ok: true,
        messages: items.map((m) => toMessageView(m, withMetadata)),
        has_more: next !== undefined,
        ...(next !== undefined ? { response_metadata: { next_cursor: next } } : {}),
      };
    },
    'conversations.history': (body) => {
      const channel = str(body.channel);
      if (!validChannel(channel)) throw new SlackApiError('channel_not_found');
      const top = (channels.get(channel) ?? []).filter((m) => m.thread_ts === undefined || m.reply_broadcast === true);
      const newestFirst = top.filter(inWindow(body)).sort((a, b) => compareTs(b.ts, a.ts));
      const { items, next } = page(newestFirst, body, 100, 999);
      const withMetadata = bool(body.include_all_metadata) === true;
      return {
        ok: true,
        messages: items.map((m) => toMessageView(m, withMetadata)),
        has_more: next !== undefined,
        pin_count: 0,
        ...(next !== undefined ? { response_metadata: { next_cursor: next } } : {}),
      };
    },
  };

  const threadOf = (channel: string, ts: string): StoredMessage[] => {
    const list = channels.get(channel) ?? [];
    const parent = list.find((m) => m.ts === ts && m.thread_ts === undefined);
    if (!parent) return [];
    const replies = list.filter((m) => m.thread_ts === ts);
    return [parent, ...replies].sort((a, b) => compareTs(a.ts, b.ts));
  };

  const compareTs = (a: string, b: string): number => {
    const x = microsFromTs(a) ?? 0n;
    const y = microsFromTs(b) ?? 0n;
    return x < y ? -1 : x > y ? 1 : 0;
  };

  const handleApi = (method: string, body: Json, authHeader: string | undefined): ApiResult => {
    const fault = takeFault(method);
    if (fault && 'status' in fault && fault.status !== 429 && fault.performed === true) {
      handleApi(method, body, authHeader);
      return faultResult(fault);
    }
    if (fault) return faultResult(fault);
    const handler = methods[method];
    if (!handler) return { status: 200, body: { ok: false, error: 'unknown_method' } };
    const bearer = authHeader?.startsWith('Bearer ') ? authHeader.slice('Bearer '.length) : undefined;
    const token = bearer ?? str(body.token);
    if (method === 'apps.connections.open') {
      // The one method that takes the app-level token, and only that (Slack: not_allowed_token_type).
      if (token === undefined || token === '') return { status: 200, body: { ok: false, error: 'not_authed' } };
      if (!opts.appConnections || !token.startsWith('xapp-'))
        return { status: 200, body: { ok: false, error: 'not_allowed_token_type' } };
      if (token !== opts.appConnections.appToken) return { status: 200, body: { ok: false, error: 'invalid_auth' } };
      return { status: 200, body: opts.appConnections.open() };
    }
    if (method !== 'api.test') {
      if (token === undefined || token === '') return { status: 200, body: { ok: false, error: 'not_authed' } };
      if (token !== botToken) return { status: 200, body: { ok: false, error: 'invalid_auth' } };
    }
    const retryAfter = rateLimitFor(method, body);
    if (retryAfter !== undefined) {
      return { status: 429, body: { ok: false, error: 'ratelimited' }, headers: { 'retry-after': String(retryAfter) } };
    }
    try {
      return { status: 200, body: handler(body) };
    } catch (e) {
      if (e instanceof SlackApiError) {
        return {
          status: 200,
          body: {
            ok: false,
            error: e.error,
            ...(e.messages.length > 0 ? { response_metadata: { messages: e.messages } } : {}),
          },
        };
      }
      throw e;
    }
  };

  const handleResponseUrl = (id: string, body: Json): ApiResult => {
    const fault = takeFault('response_url');
    if (fault) return faultResult(fault);
    const entry = responseUrls.get(id);
    if (!entry) return { status: 404, body: { ok: false, error: 'no_such_url' } };
    if (now() - entry.createdAt > SLACK_LIMITS.responseUrlLifetimeMs) {
      return { status: 404, body: { ok: false, error: 'expired_url' } };
    }
    if (entry.uses >= SLACK_LIMITS.responseUrlUses) return { status: 404, body: { ok: false, error: 'used_url' } };
    try {
      if (!bool(body.delete_original)) checkMessagePayload(body, true);
    } catch (e) {
      if (e instanceof SlackApiError) {
        return { status: 400, body: { ok: false, error: e.error, response_metadata: { messages: e.messages } } };
      }
      throw e;
    }
    entry.uses += 1;
    const post: ResponseUrlPost = {
      id,
      url: `${baseUrl}/response/${id}`,
      body: { ...body },
      at: now(),
      use: entry.uses,
    };
    for (const k of ['replace_original', 'delete_original'] as const) {
      const b = bool(body[k]);
      if (b !== undefined) post.body[k] = b;
    }
    responses.push(post);
    return { status: 200, body: { ok: true } };
  };

  const send = (res: ServerResponse, result: ApiResult): void => {
    res.writeHead(result.status, { 'content-type': 'application/json; charset=utf-8', ...(result.headers ?? {}) });
    res.end(JSON.stringify(result.body));
  };

  const server: Server = createServer((req, res) => {
    void (async () => {
      const at = now();
      const url = new URL(req.url ?? '/', 'http://127.0.0.1');
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) {
        if (typeof v === 'string' && k !== 'authorization') headers[k] = v;
      }
      let method = 'unknown';
      let body: Json = {};
      let result: ApiResult;
      try {
        const raw = await readBody(req);
        const contentType = req.headers['content-type'] ?? '';
        const apiMatch = /^\/api\/([A-Za-z0-9_.]+)$/.exec(url.pathname);
        const respMatch = /^\/response\/([A-Za-z0-9_-]+)$/.exec(url.pathname);
        if (req.method !== 'POST' && req.method !== 'GET') {
          result = { status: 405, body: { ok: false, error: 'method_not_allowed' } };
        } else if (apiMatch?.[1] !== undefined) {
          method = apiMatch[1];
          try {
            body = parseBody(raw, contentType);
            if (req.method === 'GET') for (const [k, v] of url.searchParams) body[k] = v;
            const hit = intercepts.find(
              (i) => (i.method === method || i.method === '*') && (i.match?.(body, method) ?? true),
            );
            if (hit) {
              intercepts = intercepts.filter((i) => i !== hit);
              const performed = hit.perform
                ? handleApi(method, body, req.headers.authorization)
                : { status: 0, body: { ok: false, error: 'intercepted' } };
              const { token: _t, ...rest } = body;
              calls.push({
                method,
                body: rest,
                at,
                status: 0,
                response: { intercepted: true, performed: hit.perform, result: performed.body },
                headers,
              });
              hit.then();
              req.socket.destroy();
              return;
            }
            result = handleApi(method, body, req.headers.authorization);
          } catch (e) {
            if (!(e instanceof SlackApiError) && !(e instanceof SyntaxError)) throw e;
            result = { status: 200, body: { ok: false, error: e instanceof SlackApiError ? e.error : 'invalid_json' } };
          }
        } else if (respMatch?.[1] !== undefined && req.method === 'POST') {
          method = 'response_url';
          try {
            body = parseBody(raw, contentType.length > 0 ? contentType : 'application/json');
            result = handleResponseUrl(respMatch[1], body);
          } catch (e) {
            if (!(e instanceof SlackApiError) && !(e instanceof SyntaxError)) throw e;
            result = { status: 400, body: { ok: false, error: 'invalid_payload' } };
          }
        } else {
          result = { status: 404, body: { ok: false, error: 'not_found' } };
        }
      } catch (e) {
        result = { status: 500, body: { ok: false, error: 'fake_internal_error', detail: String(e) } };
      }
      const { token: _token, ...bodyWithoutToken } = body;
      calls.push({ method, body: bodyWithoutToken, at, status: result.status, response: result.body, headers });
      send(res, result);
    })();
  });

  server.on('connection', (socket: Socket) => {
    if (unreachable) {
      socket.destroy();
      return;
    }
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const baseUrl = `http://127.0.0.1:${port}`;

  if (opts.rateLimits) {
    rateLimits = {
      postMessage: opts.rateLimits.postMessagePerChannel ?? { perSecond: 1, burst: 3 },
      methods: { ...DEFAULT_METHOD_LIMITS, ...(opts.rateLimits.methods ?? {}) },
    };
  }

  const fake: FakeSlack = {
    apiUrl: `${baseUrl}/api/`,
    baseUrl,
    port,
    botToken,
    botUserId,
    botId,
    teamId,
    appId,
    calls: (method) => (method === undefined ? [...calls] : calls.filter((c) => c.method === method)),
    messages: (channel) =>
      (channels.get(channel) ?? [])
        .filter((m) => m.thread_ts === undefined || m.reply_broadcast === true)
        .sort((a, b) => compareTs(a.ts, b.ts)),
    thread: (channel, ts) => threadOf(channel, ts),
    ephemerals: () => [...ephemerals],
    responses: () => [...responses],
    homeView: (user) => {
      const v = homeViews.get(user);
      return v ? structuredClone(v) : undefined;
    },
    homeUsers: () => [...homeViews.keys()],
    setHomeTabEnabled: (enabled) => {
      homeTabEnabled = enabled;
    },
    newResponseUrl: () => {
      const id = randomBytes(9).toString('base64url');
      responseUrls.set(id, { createdAt: now(), uses: 0 });
      return `${baseUrl}/response/${id}`;
    },
    seedUserMessage: ({ channel, user, text, thread_ts }) => {
      const ts = nextTs(channel);
      const parent = thread_ts === undefined ? undefined : findMessage(channel, thread_ts);
      if (thread_ts !== undefined && !parent) throw new Error(`seedUserMessage: no parent ${thread_ts} in ${channel}`);
      if (parent) parent.reply_count += 1;
      channelMessages(channel).push({
        channel,
        ts,
        text,
        user,
        reply_count: 0,
        history: [],
        ...(parent ? { thread_ts: parent.ts } : {}),
      });
      return ts;
    },
    waitFor: async <T>(predicate: () => T | undefined | null | false, timeoutMs = 3000): Promise<T> => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const v = predicate();
        if (v !== undefined && v !== null && v !== false) return v;
        if (Date.now() > deadline) {
          const recent = calls
            .slice(-10)
            .map((c) => `${c.method} ${c.status} ${JSON.stringify(c.response).slice(0, 160)}`)
            .join('\n  ');
          throw new Error(`fake Slack: condition not met within ${timeoutMs} ms; last calls:\n  ${recent || '(none)'}`);
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    interceptNext: (i) => {
      intercepts.push(i);
    },
    failNext: (method, count, fault) => {
      faults.push({ method, remaining: count, fault });
    },
    clearFaults: () => {
      faults = [];
    },
    enableRateLimits: (config = {}) => {
      rateLimits = {
        postMessage: config.postMessagePerChannel ?? { perSecond: 1, burst: 3 },
        methods: { ...DEFAULT_METHOD_LIMITS, ...(config.methods ?? {}) },
      };
      buckets = new Map();
    },
    disableRateLimits: () => {
      rateLimits = undefined;
      buckets = new Map();
    },
    setUnreachable: (value) => {
      unreachable = value;
      if (value) for (const s of sockets) s.destroy();
    },
    reset: () => {
      calls = [];
      channels = new Map();
      lastTs = new Map();
      ephemerals = [];
      responses = [];
      responseUrls = new Map();
      faults = [];
      intercepts = [];
      buckets = new Map();
      homeViews = new Map();
      homeTabEnabled = opts.homeTabEnabled ?? true;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        for (const s of sockets) s.destroy();
        server.close((e) => (e ? reject(e) : resolve()));
      }),
  };
  return fake;
}
