import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HTTPReceiver } from '@slack/bolt';
import type { Logger } from '../logger.ts';

/**
 * The request-time rule for Slack's signed HTTP requests. Bolt refuses timestamps older than
 * 5 minutes, but accepts a timestamp in the FUTURE (any distance). So:
 * - `requestTimeProblem` enforces Slack's rule on the absolute difference, |now − ts| ≤ 300 s,
 *   by the bot's clock; `withRequestWindow` applies it in front of Bolt, answering like a stale
 *   request: 401, no body;
 * - `replayTtlMs` says how long replay-guard.ts must remember a request: until it could no longer
 *   be accepted, plus a margin.
 */

/** Slack's window: a request is acceptable while |now − X-Slack-Request-Timestamp| ≤ 5 minutes. */
const REQUEST_WINDOW_SEC = 300;
/** Kept past the end of the window, so a record never expires while its request is still acceptable. */
export const REPLAY_MARGIN_MS = 60 * 1000;
/** X-Slack-Request-Timestamp: whole seconds since the epoch. */
const TIMESTAMP_PATTERN = /^\d{1,12}$/;

/** Why a request's timestamp header is outside the window by the bot's clock (`nowMs`), or null. Pure. */
export function requestTimeProblem(header: string | string[] | undefined, nowMs: number): string | null {
  if (typeof header !== 'string' || !TIMESTAMP_PATTERN.test(header)) return 'no usable X-Slack-Request-Timestamp';
  const skewSec = Number(header) - nowMs / 1000;
  if (skewSec > REQUEST_WINDOW_SEC) return `request dated ${Math.round(skewSec)} s in the future`;
  if (skewSec < -REQUEST_WINDOW_SEC) return `request dated ${Math.round(-skewSec)} s in the past`;
  return null;
}

/**
 * How long the replay record of a request dated `tsSec` must live, from `nowMs` (the bot's clock):
 * until the request leaves the window (ts + 300 s), plus a margin. Never less than the margin.
 */
export function replayTtlMs(tsSec: number, nowMs: number): number {
  return Math.max(REPLAY_MARGIN_MS, Math.ceil((tsSec + REQUEST_WINDOW_SEC) * 1000 - nowMs) + REPLAY_MARGIN_MS);
}

/**
 * Bolt refuses a stale timestamp but not one in the future. Every POST carrying Slack's timestamp
 * header is checked on the absolute difference by the bot's clock and refused exactly as Bolt
 * refuses a stale one (401, no body), so a future-dated request is neither served nor replayable
 * once the bot's clock catches up. Requests without the header are left to Bolt, which refuses
 * them (401), except `ssl_check`, which runs nothing.
 */
export function withRequestWindow(receiver: HTTPReceiver, now: () => number, logger: Logger): HTTPReceiver {
  const inner = receiver.requestListener;
  receiver.requestListener = (req: IncomingMessage, res: ServerResponse) => {
    const header = req.headers['x-slack-request-timestamp'];
    const problem = req.method === 'POST' && header !== undefined ? requestTimeProblem(header, now()) : null;
    if (problem !== null) {
      logger.warn({ requestTimestamp: header, problem }, 'Slack request outside the 5-minute window refused');
      // Drain the body so the client reads the answer rather than a reset connection.
      req.resume();
      res.writeHead(401);
      res.end();
      return;
    }
    inner(req, res);
  };
  return receiver;
}
