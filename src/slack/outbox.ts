import { createHash } from 'node:crypto';
import type { types } from '@slack/bolt';
import type { IncidentMeta } from '../incident/events.ts';
import type { IncidentLog } from '../incident/log.ts';
import type { MessageView } from '../render/status.ts';
import { renderThread } from '../render/thread.ts';
import type { KeyObject } from 'node:crypto';
import { cardsFromSignedPlans } from './card-plans.ts';
import type { RenderContext } from '../render/alert.ts';
import type { Logger } from '../logger.ts';

/** What every message the outbox posts carries as Slack message metadata, to be found again after a crash. */
export interface ViewTag {
  incident: string;
  viewKey: string;
  /** Hash of the content posted, so a found message is updated only if the view changed since. */
  viewHash: string;
}

/** Slack metadata event_type of gpu-medic's thread messages. */
const VIEW_EVENT_TYPE = 'gpu_medic_view';

/** The Slack calls the outbox needs; a thin adapter over WebClient in production. */
export interface SlackPoster {
  post(m: {
    channel: string;
    threadTs?: string;
    text: string;
    blocks?: types.KnownBlock[];
    tag: ViewTag;
  }): Promise<{ ts: string }>;
  update(m: { channel: string; ts: string; text: string; blocks?: types.KnownBlock[] }): Promise<void>;
  /**
   * The message carrying `tag` (incident and view key), if Slack has one: in the thread of
   * `threadTs` (conversations.replies), or among the channel's top-level messages since `oldest`
   * (conversations.history), both with include_all_metadata and followed through every page.
   */
  findTagged(q: {
    channel: string;
    threadTs?: string;
    oldest: string;
    incident: string;
    viewKey: string;
  }): Promise<{ ts: string; viewHash: string } | null>;
}

/** A message's metadata when it is one of ours for this incident and view; anything else is not trusted. */
export function viewTagOf(message: unknown): ViewTag | null {
  if (typeof message !== 'object' || message === null) return null;
  const md = (message as { metadata?: unknown }).metadata;
  if (typeof md !== 'object' || md === null) return null;
  const { event_type: type, event_payload: p } = md as { event_type?: unknown; event_payload?: unknown };
  if (type !== VIEW_EVENT_TYPE || typeof p !== 'object' || p === null) return null;
  const { incident, view_key: viewKey, view_hash: viewHash } = p as Record<string, unknown>;
  if (typeof incident !== 'string' || typeof viewKey !== 'string' || typeof viewHash !== 'string') return null;
  return { incident, viewKey, viewHash };
}

/** Slack metadata for a tag (event_payload keys in Slack's snake_case). */
export function viewMetadata(t: ViewTag): { event_type: string; event_payload: Record<string, string> } {
  return {
    event_type: VIEW_EVENT_TYPE,
    event_payload: { incident: t.incident, view_key: t.viewKey, view_hash: t.viewHash },
  };
}

/** Lookups start this long before the incident was opened (the bot's clock against Slack's). */
const LOOKUP_SKEW_MS = 10 * 60 * 1000;

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
  return createHash('sha256')
    .update(JSON.stringify([v.text, v.blocks]))
    .digest('hex')
    .slice(0, 16);
}

export interface OutboxOptions {
  log: IncidentLog;
  poster: SlackPoster;
  logger: Logger;
  /** How often the dirty set is polled. Default 100 ms. */
  pollMs?: number;
  /** Incidents synced at once. Default 8. */
  concurrency?: number;
  /**
   * The workers' public keys, so that what an approver sees is what runs: every approval card is drawn from
   * its worker-signed plan only, and a card whose plan does not verify is not drawn
   * (src/slack/card-plans.ts).
   */
  plans?: { workerPublicKeys: KeyObject[]; commandTimeoutMs: number };
  /** What the renderers may know of the inventory (an alert on a host offers Unstick for its containers). Default: nothing. */
  render?: RenderContext;
  /**
   * Awaited before each pass, each sync and each Slack call: the bot's acks go first (it resolves
   * once no Slack request is being answered, src/slack/requests-in-flight.ts). Default: no wait.
   */
  yieldTo?: () => Promise<void>;
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
    await this.o.yieldTo?.();
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
          this.o.logger.warn(
            { incident: id, slackError: slackErrorCode(err), err, retryInMs: delay },
            'could not render incident; will retry',
          );
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
    void next
      .catch(() => undefined)
      .finally(() => {
        if (this.chains.get(id) === next) this.chains.delete(id);
      });
    return next;
  }

  private async syncNow(id: string): Promise<void> {
    await this.o.yieldTo?.();
    const meta = await this.o.log.meta(id);
    if (!meta) {
      await this.o.log.markRendered(id, '0-0');
      return;
    }
    const logged = await this.o.log.events(id);
    const plans = this.o.plans;
    const events = plans ? cardsFromSignedPlans(logged, plans.workerPublicKeys, plans.commandTimeoutMs) : logged;
    const cursor = events.length > 0 ? (events[events.length - 1]?.id ?? '0-0') : '0-0';
    const views = renderThread(meta, events, this.o.render);
    const refs = await this.o.log.slackRefs(id);
    const posting = await this.o.log.posting(id);
    let parentTs = refs.get('parent')?.ts;
    if (!parentTs && views.some((v) => v.placement === 'reply')) {
      // First post of a thread whose results are already in: open it as "requested" and let the
      // final parent update below follow the replies, so "done" never shows above an empty thread.
      const opening = renderThread(
        meta,
        events.filter((e) => e.type === 'requested'),
        this.o.render,
      ).find((v) => v.placement === 'parent');
      if (opening) {
        const ref = await this.postOnce(id, meta, opening, posting, undefined);
        refs.set('parent', ref);
        parentTs = ref.ts;
      }
    }
    // Replies first, then the parent's state line: a reader who sees "done" finds the whole thread.
    const ordered = [
      ...views.filter((v) => !(v.placement === 'parent' && refs.has(v.key))),
      ...views.filter((v) => v.placement === 'parent' && refs.has(v.key)),
    ];
    for (const v of ordered) {
      const hash = hashOf(v);
      const ref = refs.get(v.key);
      if (ref && ref.hash === hash) continue;
      if (ref) {
        await this.withBlockFallback(v, (blocks) =>
          this.o.poster.update({ channel: meta.channel, ts: ref.ts, text: v.text, blocks }),
        );
        await this.o.log.setSlackRef(id, v.key, { ts: ref.ts, hash });
        continue;
      }
      if (v.placement === 'reply' && !parentTs) throw new Error('thread parent not posted yet');
      const posted = await this.postOnce(id, meta, v, posting, v.placement === 'reply' ? parentTs : undefined);
      if (posted.hash !== hash) {
        // Found in Slack from before a crash, with what the view said then: bring it up to date.
        await this.withBlockFallback(v, (blocks) =>
          this.o.poster.update({ channel: meta.channel, ts: posted.ts, text: v.text, blocks }),
        );
        await this.o.log.setSlackRef(id, v.key, { ts: posted.ts, hash });
      }
      if (v.placement === 'parent') parentTs = posted.ts;
    }
    await this.o.log.markRendered(id, cursor);
  }

  /**
   * Posts a view that has no recorded ts, exactly once even across a crash: the intent is recorded
   * before chat.postMessage and cleared with the ts; a view still marked from an earlier attempt is
   * first looked up in Slack by its metadata tag (that attempt may have reached Slack with its
   * answer lost), and only posted if Slack has no such message. Returns the ref recorded.
   */
  private async postOnce(
    id: string,
    meta: IncidentMeta,
    v: MessageView,
    posting: Set<string>,
    threadTs: string | undefined,
  ): Promise<{ ts: string; hash: string }> {
    const hash = hashOf(v);
    if (posting.has(v.key)) {
      const found = await this.lookup(id, meta, v.key, threadTs);
      if (found) {
        this.o.logger.info(
          { incident: id, key: v.key, ts: found.ts },
          'message found in Slack from an attempt before a restart; not posting it again',
        );
        const ref = { ts: found.ts, hash: found.viewHash };
        await this.o.log.setSlackRef(id, v.key, ref);
        posting.delete(v.key);
        return ref;
      }
    }
    await this.o.log.markPosting(id, v.key);
    posting.add(v.key);
    const tag: ViewTag = { incident: id, viewKey: v.key, viewHash: hash };
    const { ts } = await this.withBlockFallback(v, (blocks) =>
      this.o.poster.post({ channel: meta.channel, ...(threadTs ? { threadTs } : {}), text: v.text, blocks, tag }),
    );
    await this.o.log.setSlackRef(id, v.key, { ts, hash });
    posting.delete(v.key);
    return { ts, hash };
  }

  /**
   * Slack's copy of a view from an earlier attempt, or null. A refusal Slack will repeat (a missing
   * history scope, a channel the bot left) must not block the thread for good: it is logged and the
   * view is posted (a possible double, said so in the log). Anything transient (network, 5xx, 429)
   * is thrown, so the sync is retried later and nothing is posted blind.
   */
  private async lookup(
    id: string,
    meta: IncidentMeta,
    key: string,
    threadTs: string | undefined,
  ): Promise<{ ts: string; viewHash: string } | null> {
    const opened = Date.parse(meta.createdAt);
    const oldestMs = Number.isFinite(opened) ? Math.max(0, opened - LOOKUP_SKEW_MS) : 0;
    try {
      return await this.o.poster.findTagged({
        channel: meta.channel,
        ...(threadTs ? { threadTs } : {}),
        oldest: (oldestMs / 1000).toFixed(6),
        incident: id,
        viewKey: key,
      });
    } catch (err) {
      const code = slackErrorCode(err);
      if (code === null || code === 'ratelimited') throw err;
      this.o.logger.error(
        { incident: id, key, slackError: code },
        'could not look for an earlier post of this message (Slack refused the lookup); posting it, it may show twice',
      );
      return null;
    }
  }

  /** If Slack refuses our blocks (e.g. a table it cannot show), the monospace `text` still gets through. */
  private async withBlockFallback<T>(
    v: MessageView,
    send: (blocks: types.KnownBlock[] | undefined) => Promise<T>,
  ): Promise<T> {
    await this.o.yieldTo?.();
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
