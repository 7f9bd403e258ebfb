/**
 * Sends requests to a Bolt HTTP receiver the way Slack does: form-encoded bodies, signed with the
 * app's signing secret (Slack "Verifying requests from Slack", version v0):
 *   basestring = `v0:${X-Slack-Request-Timestamp}:${raw body}`
 *   X-Slack-Signature = `v0=` + hex(HMAC-SHA256(signing secret, basestring))
 * The receiver must reject a request whose timestamp is more than five minutes old.
 *
 * What Bolt 5.1's HTTPReceiver does with these (receivers/verify-request.ts, HTTPModuleFunctions):
 * - Bad signature, missing headers or a timestamp older than 5 minutes → HTTP 401, empty body, and
 *   no listener runs. A timestamp in the FUTURE is not rejected (only staleness is checked);
 *   gpu-medic's receiver refuses it itself (src/slack/app.ts, |now − ts| ≤ 300 s).
 * - `ssl_check=1` bodies skip verification but are answered 200 and never reach listeners.
 * - Retries: Slack re-sends Events API deliveries with `X-Slack-Retry-Num` / `X-Slack-Retry-Reason`
 *   (slash commands and interactions are not retried by Slack). Bolt does NOT deduplicate: it
 *   parses the headers into `context.retryNum` / `context.retryReason` and runs listeners again.
 *   Anything that must happen once has to be made idempotent by the app (the incident log).
 * - ack(): with processBeforeResponse false (default) the HTTP response is written when ack() is
 *   called; a string or `{ text, response_type }` becomes the body. If no listener acks within
 *   `unhandledRequestTimeoutMillis` (3001 ms) Bolt logs an error and answers 404 (empty body);
 *   Slack itself gives up after 3 s, which is why handlers must ack first.
 */
import { createHmac } from 'node:crypto';

export interface SignOptions {
  /** Unix seconds to sign with and send. Default: now. */
  timestampSec?: number;
  /** Send this X-Slack-Signature instead of the correct one (forgery tests). */
  signature?: string;
  /** Change the body after it was signed (tampering tests); the signature is kept. */
  mutateBodyAfterSigning?: (body: string) => string;
  /** Extra headers, e.g. `{ 'X-Slack-Retry-Num': '1', 'X-Slack-Retry-Reason': 'http_timeout' }`. */
  headers?: Record<string, string>;
  /** Abort the request after this many ms. Default 10 000. */
  timeoutMs?: number;
  /** Default form-encoded (commands, interactions); the Events API sends `application/json`. */
  contentType?: string;
}

export interface SignedResponse {
  status: number;
  /** Raw response text. */
  body: string;
  /** Parsed body when it is JSON. */
  json?: unknown;
  headers: Record<string, string>;
  /** Wall time from sending to the full response, to check Slack's 3 s ack budget. */
  elapsedMs: number;
}

export interface SlashCommandFields {
  command?: string;
  text: string;
  user_id: string;
  user_name?: string;
  channel_id: string;
  channel_name?: string;
  team_id?: string;
  team_domain?: string;
  api_app_id?: string;
  response_url: string;
  trigger_id?: string;
}

export function slackSignature(signingSecret: string, timestampSec: number, body: string): string {
  return `v0=${createHmac('sha256', signingSecret).update(`v0:${timestampSec}:${body}`).digest('hex')}`;
}

/** A trigger_id shaped like Slack's (`<digits>.<digits>.<hex>`); valid 3 s in real Slack, here just a string. */
function fakeTriggerId(): string {
  const hex = Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16)).join('');
  return `${Date.now()}.${Math.floor(Math.random() * 1e9)}.${hex}`;
}

/** `seconds.micros` like Slack's action_ts. */
function slackTsNow(): string {
  const ms = Date.now();
  return `${Math.floor(ms / 1000)}.${String((ms % 1000) * 1000).padStart(6, '0')}`;
}

export async function postSigned(
  url: string,
  signingSecret: string,
  body: string,
  opts: SignOptions = {},
): Promise<SignedResponse> {
  const timestampSec = opts.timestampSec ?? Math.floor(Date.now() / 1000);
  const signature = opts.signature ?? slackSignature(signingSecret, timestampSec, body);
  const sent = opts.mutateBodyAfterSigning ? opts.mutateBodyAfterSigning(body) : body;
  const started = performance.now();
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'Content-Type': opts.contentType ?? 'application/x-www-form-urlencoded',
      'User-Agent': 'Slackbot 1.0 (+https://api.slack.com/robots)',
      'X-Slack-Request-Timestamp': String(timestampSec),
      'X-Slack-Signature': signature,
      ...(opts.headers ?? {}),
    },
    body: sent,
    signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000),
  });
  const text = await res.text();
  const elapsedMs = performance.now() - started;
  const headers: Record<string, string> = {};
  res.headers.forEach((v, k) => {
    headers[k] = v;
  });
  let json: unknown;
  if (text.length > 0) {
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
  }
  return { status: res.status, body: text, headers, elapsedMs, ...(json !== undefined ? { json } : {}) };
}

/** The fields of a slash command as Slack sends them, in Slack's order (form body over HTTP, JSON payload over Socket Mode). */
export function slashCommandPayload(fields: SlashCommandFields): Record<string, string> {
  return {
    // `token` is the deprecated verification token; Slack still sends it.
    token: 'deprecated-verification-token',
    team_id: fields.team_id ?? 'T0FAKE0001',
    team_domain: fields.team_domain ?? 'gpu-medic-test',
    channel_id: fields.channel_id,
    channel_name: fields.channel_name ?? 'gpu-ops',
    user_id: fields.user_id,
    user_name: fields.user_name ?? fields.user_id.toLowerCase(),
    command: fields.command ?? '/gpu',
    text: fields.text,
    api_app_id: fields.api_app_id ?? 'A0FAKEAPP1',
    is_enterprise_install: 'false',
    response_url: fields.response_url,
    trigger_id: fields.trigger_id ?? fakeTriggerId(),
  };
}

/** POSTs a slash command with the fields Slack sends, in Slack's order. */
export function sendSlashCommand(
  url: string,
  signingSecret: string,
  fields: SlashCommandFields,
  opts: SignOptions = {},
): Promise<SignedResponse> {
  return postSigned(url, signingSecret, new URLSearchParams(slashCommandPayload(fields)).toString(), opts);
}

/** POSTs an interaction (`payload=<json>`), as Slack does for buttons, menus and modals. */
export function sendInteraction(
  url: string,
  signingSecret: string,
  payload: object,
  opts: SignOptions = {},
): Promise<SignedResponse> {
  const form = new URLSearchParams();
  form.set('payload', JSON.stringify(payload));
  return postSigned(url, signingSecret, form.toString(), opts);
}

export interface BlockActionArgs {
  /** Slack user id of the clicker, e.g. `U0APPROVER`. */
  user: string;
  userName?: string;
  channel: string;
  channelName?: string;
  /** ts of the message that holds the button. */
  messageTs: string;
  /** Set when that message is a thread reply (Slack puts it in container and message). */
  threadTs?: string;
  actionId: string;
  value: string;
  blockId?: string;
  buttonText?: string;
  style?: 'primary' | 'danger';
  responseUrl: string;
  /** The message as Slack shows it back to the app (defaults to a minimal bot message). */
  messageText?: string;
  messageBlocks?: unknown[];
  teamId?: string;
  teamDomain?: string;
  apiAppId?: string;
  botId?: string;
  botUserId?: string;
  triggerId?: string;
  actionTs?: string;
}

/** The `block_actions` payload Slack sends when a user clicks a button in a message. */
export function blockActionPayload(a: BlockActionArgs): Record<string, unknown> {
  const teamId = a.teamId ?? 'T0FAKE0001';
  const blockId = a.blockId ?? 'actions';
  const buttonText = a.buttonText ?? a.actionId;
  return {
    type: 'block_actions',
    user: {
      id: a.user,
      username: a.userName ?? a.user.toLowerCase(),
      name: a.userName ?? a.user.toLowerCase(),
      team_id: teamId,
    },
    api_app_id: a.apiAppId ?? 'A0FAKEAPP1',
    token: 'deprecated-verification-token',
    container: {
      type: 'message',
      message_ts: a.messageTs,
      channel_id: a.channel,
      is_ephemeral: false,
      ...(a.threadTs !== undefined ? { thread_ts: a.threadTs } : {}),
    },
    trigger_id: a.triggerId ?? fakeTriggerId(),
    team: { id: teamId, domain: a.teamDomain ?? 'gpu-medic-test' },
    enterprise: null,
    is_enterprise_install: false,
    channel: { id: a.channel, name: a.channelName ?? 'gpu-ops' },
    message: {
      type: 'message',
      subtype: 'bot_message',
      text: a.messageText ?? '',
      ts: a.messageTs,
      bot_id: a.botId ?? 'B0FAKEBOT1',
      user: a.botUserId ?? 'U0FAKEBOT1',
      ...(a.threadTs !== undefined ? { thread_ts: a.threadTs } : {}),
      blocks: a.messageBlocks ?? [
        {
          type: 'actions',
          block_id: blockId,
          elements: [
            {
              type: 'button',
              action_id: a.actionId,
              text: { type: 'plain_text', text: buttonText, emoji: true },
              value: a.value,
              ...(a.style ? { style: a.style } : {}),
            },
          ],
        },
      ],
    },
    state: { values: {} },
    response_url: a.responseUrl,
    actions: [
      {
        type: 'button',
        action_id: a.actionId,
        block_id: blockId,
        text: { type: 'plain_text', text: buttonText, emoji: true },
        value: a.value,
        ...(a.style ? { style: a.style } : {}),
        action_ts: a.actionTs ?? slackTsNow(),
      },
    ],
  };
}

export interface AppHomeOpenedArgs {
  /** Slack user id of who opened the App Home. */
  user: string;
  /** `home` (the Home tab) or `messages` (the Messages tab). Default `home`. */
  tab?: 'home' | 'messages';
  /** The Home tab as it was last published (Slack includes it once one was). */
  view?: Record<string, unknown>;
  teamId?: string;
  apiAppId?: string;
  botUserId?: string;
  eventId?: string;
}

/**
 * The Events API envelope (`event_callback`) Slack POSTs when a user opens the app's App Home
 * (docs.slack.dev/reference/events/app_home_opened): JSON, signed like every request.
 */
export function appHomeOpenedPayload(a: AppHomeOpenedArgs): Record<string, unknown> {
  const teamId = a.teamId ?? 'T0FAKE0001';
  const nowSec = Math.floor(Date.now() / 1000);
  return {
    token: 'deprecated-verification-token',
    team_id: teamId,
    api_app_id: a.apiAppId ?? 'A0FAKEAPP1',
    event: {
      type: 'app_home_opened',
      user: a.user,
      channel: `D${a.user.slice(1, 11).padEnd(10, '0')}`,
      tab: a.tab ?? 'home',
      event_ts: slackTsNow(),
      ...(a.view ? { view: a.view } : {}),
    },
    type: 'event_callback',
    event_id:
      a.eventId ??
      `Ev${Array.from({ length: 9 }, () => 'ABCDEFGHJKLMNPQRSTUVWXYZ0123456789'[Math.floor(Math.random() * 34)]).join('')}`,
    event_time: nowSec,
    authorizations: [
      {
        enterprise_id: null,
        team_id: teamId,
        user_id: a.botUserId ?? 'U0FAKEBOT1',
        is_bot: true,
        is_enterprise_install: false,
      },
    ],
    is_ext_shared_channel: false,
  };
}

/** POSTs an Events API delivery (JSON body), as Slack does; `opts.headers` can add X-Slack-Retry-Num. */
export function sendEvent(
  url: string,
  signingSecret: string,
  payload: object,
  opts: SignOptions = {},
): Promise<SignedResponse> {
  return postSigned(url, signingSecret, JSON.stringify(payload), { contentType: 'application/json', ...opts });
}

export interface StaticSelectArgs extends Omit<BlockActionArgs, 'value' | 'style' | 'buttonText'> {
  /** The option the user chose, as the menu listed it. */
  selected: { text: string; value: string };
  placeholder?: string;
}

/**
 * The `block_actions` payload Slack sends when a user picks an option of a static_select in a
 * message: the action carries `selected_option` (text object and value) and the placeholder, no
 * `value`; `state.values[block_id][action_id]` holds the same selection.
 */
export function staticSelectPayload(a: StaticSelectArgs): Record<string, unknown> {
  const blockId = a.blockId ?? 'actions';
  const selected = { text: { type: 'plain_text', text: a.selected.text, emoji: true }, value: a.selected.value };
  const placeholder = { type: 'plain_text', text: a.placeholder ?? 'Select an item', emoji: true };
  const base = blockActionPayload({ ...a, value: a.selected.value });
  const message = base.message as Record<string, unknown>;
  return {
    ...base,
    message: {
      ...message,
      blocks: a.messageBlocks ?? [
        {
          type: 'actions',
          block_id: blockId,
          elements: [{ type: 'static_select', action_id: a.actionId, placeholder, options: [selected] }],
        },
      ],
    },
    state: { values: { [blockId]: { [a.actionId]: { type: 'static_select', selected_option: selected } } } },
    actions: [
      {
        type: 'static_select',
        action_id: a.actionId,
        block_id: blockId,
        selected_option: selected,
        placeholder,
        action_ts: a.actionTs ?? slackTsNow(),
      },
    ],
  };
}
