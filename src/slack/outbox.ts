import { createHash } from 'node:crypto';
import type { types } from '@slack/bolt';
import type { IncidentLog } from '../incident/log.ts';
import type { MessageView } from '../render/status.ts';
import { renderThread } from '../render/thread.ts';
import type { Logger } from '../logger.ts';

/** The two Slack calls the outbox needs; a thin adapter over WebClient in production. */
export interface SlackPoster {
  post(m: { channel: string; threadTs?: string; text: string; blocks?: types.KnownBlock[] }): Promise<{ ts: string }>;
  update(m: { channel: string; ts: string; text: string; blocks?: types.KnownBlock[] }): Promise<void>;
}

/** Slack errors that will not go away by retrying the same message. */
const BLOCK_ERRORS = new Set(['invalid_blocks', 'invalid_blocks_format', 'msg_blocks_too_long']);

export function slackErrorCode(e: unknown): string | null {
  if (typeof e === 'object' && e !== null && 'data' in e) {
    const d = (e as { data?: { error?: unknown } }).data;
    if (d && typeof d.error === 'string') return d.error;
  }
  return null;
}

function hashOf(v: MessageView): string {
  return createHash('sha256').update(JSON.stringify([v.text, v.blocks])).digest('hex').slice(0, 16);
}

export interface OutboxOptions {
  log: IncidentLog;
  poster: SlackPoster;
  logger: Logger;
  /** How often the dirty set is polled. Default 100 ms. */
  pollMs?: number;
  /** Incidents synced at once. Default 8. */
  concurrency?: number;
}

/**
 * Renders incident logs into Slack threads. The thread is a view of the log: each message view
 * has a stable key mapped to its `ts`, so a retry, a Slack outage or a bot restart re-sends
 * only what is missing or changed, in order, and never loses an event.
 */
export class Outbox {
  private timer: NodeJS.Timeout | null = null;
  private readonly inflight = new Set<string>();
  private readonly backoff = new Map<string, { until: number; delay: number }>();
  private stopped = false;
  private lastPass: number | null = null;

  constructor(private readonly o: OutboxOptions) {}

  /** When the loop last completed a pass over the dirty incidents (null: never). For the health check. */
  lastPassAt(): number | null {
    return this.lastPass;
  }

  start(): void {
    this.stopped = false;
    const tick = async (): Promise<void> => {
      if (this.stopped) return;
      try {
        await this.tick();
        this.lastPass = Date.now();
      } catch (err) {
        this.o.logger.warn({ err }, 'outbox tick failed (Redis unreachable?)');
      }
      if (!this.stopped) this.timer = setTimeout(() => void tick(), this.o.pollMs ?? 100);
    };
    void tick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    while (this.inflight.size > 0) await new Promise((r) => setTimeout(r, 20));
  }

  private async tick(): Promise<void> {
    const ids = await this.o.log.dirty();
    const now = Date.now();
    const limit = this.o.concurrency ?? 8;
    for (const id of ids) {
      if (this.inflight.size >= limit) break;
      if (this.inflight.has(id)) continue;
      const b = this.backoff.get(id);
      if (b && b.until > now) continue;
      this.inflight.add(id);
      void this.sync(id)
        .then(() => this.backoff.delete(id))
        .catch((err: unknown) => {
          const delay = Math.min((b?.delay ?? 500) * 2, 60_000);
          this.backoff.set(id, { until: Date.now() + delay, delay });
          this.o.logger.warn({ incident: id, slackError: slackErrorCode(err), err, retryInMs: delay }, 'could not render incident; will retry');
        })
        .finally(() => this.inflight.delete(id));
    }
  }

  private readonly chains = new Map<string, Promise<void>>();

  /** Brings one incident's thread up to date with its log. Safe to call any number of times, even concurrently. */
  sync(id: string): Promise<void> {
    // Two syncs of one incident at once would both see a view as unposted and post it twice.
    const prev = this.chains.get(id) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(() => this.syncNow(id));
    this.chains.set(id, next);
    void next.catch(() => undefined).finally(() => {
      if (this.chains.get(id) === next) this.chains.delete(id);
    });
    return next;
  }

  private async syncNow(id: string): Promise<void> {
    const meta = await this.o.log.meta(id);
    if (!meta) {
      await this.o.log.markRendered(id, '0-0');
      return;
    }
    const events = await this.o.log.events(id);
    const cursor = events.length > 0 ? (events[events.length - 1]?.id ?? '0-0') : '0-0';
    const views = renderThread(meta, events);
    const refs = await this.o.log.slackRefs(id);
    let parentTs = refs.get('parent')?.ts;
    if (!parentTs && views.some((v) => v.placement === 'reply')) {
      // First post of a thread whose results are already in: open it as "requested" and let the
      // final parent update below follow the replies, so "done" never shows above an empty thread.
      const opening = renderThread(meta, events.filter((e) => e.type === 'requested')).find((v) => v.placement === 'parent');
      if (opening) {
        const { ts } = await this.withBlockFallback(opening, (blocks) => this.o.poster.post({ channel: meta.channel, text: opening.text, blocks }));
        await this.o.log.setSlackRef(id, 'parent', { ts, hash: hashOf(opening) });
        refs.set('parent', { ts, hash: hashOf(opening) });
        parentTs = ts;
      }
    }
    // Replies first, then the parent's state line: a reader who sees "done" finds the whole thread.
    const ordered = [...views.filter((v) => !(v.placement === 'parent' && refs.has(v.key))), ...views.filter((v) => v.placement === 'parent' && refs.has(v.key))];
    for (const v of ordered) {
      const hash = hashOf(v);
      const ref = refs.get(v.key);
      if (ref && ref.hash === hash) continue;
      if (ref) {
        await this.withBlockFallback(v, (blocks) => this.o.poster.update({ channel: meta.channel, ts: ref.ts, text: v.text, blocks }));
        await this.o.log.setSlackRef(id, v.key, { ts: ref.ts, hash });
        continue;
      }
      if (v.placement === 'reply' && !parentTs) throw new Error('thread parent not posted yet');
      const { ts } = await this.withBlockFallback(v, (blocks) =>
        this.o.poster.post({ channel: meta.channel, ...(v.placement === 'reply' && parentTs ? { threadTs: parentTs } : {}), text: v.text, blocks }),
      );
      await this.o.log.setSlackRef(id, v.key, { ts, hash });
      if (v.placement === 'parent') parentTs = ts;
    }
    await this.o.log.markRendered(id, cursor);
  }

  /** If Slack refuses our blocks (e.g. a table it cannot show), the monospace `text` still gets through. */
  private async withBlockFallback<T>(v: MessageView, send: (blocks: types.KnownBlock[] | undefined) => Promise<T>): Promise<T> {
    try {
      return await send(v.blocks);
    } catch (e) {
      const code = slackErrorCode(e);
      if (code === null || !BLOCK_ERRORS.has(code)) throw e;
      this.o.logger.warn({ key: v.key, slackError: code }, 'Slack refused the blocks; sending text only');
      return send(undefined);
    }
  }
}
