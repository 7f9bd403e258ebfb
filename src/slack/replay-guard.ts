import type { IncomingMessage } from 'node:http';
import type { AllMiddlewareArgs, AnyMiddlewareArgs, Middleware } from '@slack/bolt';
import type { Redis } from 'ioredis';
import type { Logger } from '../logger.ts';
import { replayTtlMs, requestTimeProblem } from './request-time.ts';

/**
 * Replay protection for Slack's signed HTTP requests. Bolt verifies the v0 signature but accepts
 * the SAME signed request again inside the window (the window itself: request-time.ts). So the
 * receiver lifts the two signature headers into the context (they are only read after Bolt
 * verified the signature), and a global middleware records `(timestamp, signature)` with SET NX
 * in Redis until the request could no longer be accepted (`replayTtlMs`), so a second delivery
 * is refused, also after a bot restart.
 */

/** Context keys set by `signatureProperties` (must not clash with Bolt's built-in context keys). */
const SIG_TS_KEY = 'gpuMedicSlackTimestamp';
const SIG_KEY = 'gpuMedicSlackSignature';

export const REPLAYED_TEXT = ':no_entry: This request was already received; nothing was done.';
const OUT_OF_WINDOW_TEXT = ':no_entry: This request is dated more than 5 minutes from now; nothing was done.';

/** For HTTPReceiver's `customPropertiesExtractor`: the verified request's signature headers. */
export function signatureProperties(req: IncomingMessage): Record<string, string> {
  const ts = req.headers['x-slack-request-timestamp'];
  const sig = req.headers['x-slack-signature'];
  if (typeof ts !== 'string' || typeof sig !== 'string') return {};
  return { [SIG_TS_KEY]: ts, [SIG_KEY]: sig };
}

export interface ReplayGuardOptions {
  /** A connection without an offline queue: the check must not wait for Redis past the ack budget. */
  redis: Redis;
  prefix: string;
  logger: Logger;
  /** What a request gets when Redis cannot record it (nothing can be queued then either). */
  unavailableText: string;
  /** Default 1000 ms. */
  timeoutMs?: number;
  /** The bot's clock (ms). Default Date.now. */
  now?: () => number;
}

type Args = AnyMiddlewareArgs & AllMiddlewareArgs;

/** Answers a refused request without running any listener: ephemeral text for commands, a respond() for clicks. */
async function refuse(args: Args, text: string): Promise<void> {
  if ('command' in args) {
    await args.ack({ response_type: 'ephemeral', text });
    return;
  }
  if ('ack' in args) await (args.ack as () => Promise<void>)();
  if ('respond' in args) await args.respond({ response_type: 'ephemeral', replace_original: false, text });
}

export function replayGuard(o: ReplayGuardOptions): Middleware<AnyMiddlewareArgs> {
  const timeoutMs = o.timeoutMs ?? 1000;
  const now = o.now ?? Date.now;
  return async (args) => {
    const ts = args.context[SIG_TS_KEY];
    const sig = args.context[SIG_KEY];
    // Socket Mode (no signature headers): Slack's envelope acks already make each delivery single.
    if (typeof ts !== 'string' || typeof sig !== 'string') {
      await args.next();
      return;
    }
    // The receiver refused requests outside the window before Bolt saw them (app.ts); a timestamp
    // that is still not a number here is refused rather than recorded for a guessed time.
    if (requestTimeProblem(ts, now()) !== null) {
      o.logger.warn({ requestTimestamp: ts }, 'Slack request outside the 5-minute window refused');
      await refuse(args, OUT_OF_WINDOW_TEXT);
      return;
    }
    let fresh: boolean;
    let timer: NodeJS.Timeout | undefined;
    try {
      const set = o.redis.set(`${o.prefix}:replay:${ts}:${sig}`, '1', 'PX', replayTtlMs(Number(ts), now()), 'NX');
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer from Redis within ${timeoutMs} ms`)), timeoutMs);
      });
      fresh = (await Promise.race([set, timeout])) === 'OK';
    } catch (err) {
      // Fail closed: a request we cannot record could be replayed later; and without Redis nothing can be queued anyway.
      o.logger.warn({ err }, 'replay check failed (Redis unreachable?); request refused');
      await refuse(args, o.unavailableText);
      return;
    } finally {
      clearTimeout(timer);
    }
    if (!fresh) {
      o.logger.warn(
        { requestTimestamp: ts, type: args.body.type ?? ('command' in args ? 'slash_command' : 'unknown') },
        'replayed Slack request refused',
      );
      await refuse(args, REPLAYED_TEXT);
      return;
    }
    await args.next();
  };
}
