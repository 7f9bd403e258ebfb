/**
 * App Home (the fleet's state without asking), the I/O side: who opened the Home tab, what it shows (read
 * from Redis into a `HomeModel`, rendered by the pure src/render/home.ts) and the loop that publishes it.
 *
 * - Opening the Home tab (`app_home_opened`, tab `home`) records the user in Redis (`homeKeys.users`,
 *   scored by when) and publishes their view. Only users who opened it ever get a publish.
 * - Every `tickMs` the loop reads a cheap signature of what Home shows: the watchdog's `version`
 *   counter, the newest incident id, and the newest event id of each unstick still in progress.
 *   When it moved (or `refreshMs` passed, so a watchdog that stopped shows as stale), the model is
 *   read and rendered again; if the view changed, every recent Home user is due a publish.
 * - Publishes are paced: at most one per user per `perUserMinMs`, and at most `maxPerMinute` in all
 *   (views.publish is Slack's Tier 4, 100+ per minute per workspace; we stay under 100).
 * - A publish that fails (Slack down, 429 past the client's own retries, `not_enabled`, …) is logged
 *   with Slack's error code and retried later (doubling from `retryMs` up to 5 minutes); it never
 *   throws into Bolt or stops the loop. What each user was last sent (the view's hash) is kept in
 *   Redis, so a restarted bot publishes only what changed.
 * The watchdog and everything here only read and publish: nothing is signalled or reset.
 */
import { createHash } from 'node:crypto';
import type { App, types } from '@slack/bolt';
import type { Redis } from 'ioredis';
import { IncidentLog } from '../incident/log.ts';
import type { Logger } from '../logger.ts';
import {
  HOME_SUMMARY_BLOCK_ID,
  renderHome,
  unstickStateOf,
  type HomeAlert,
  type HomeIncident,
  type HomeMachine,
  type HomeModel,
} from '../render/home.ts';
import { SnoozeStore } from '../watch-store/snooze-store.ts';
import { watchKeys } from '../watch-store/watch-keys.ts';
import { MachineGlanceSchema } from '../watchdog/watch-glance.ts';
import { alertEpisode } from '../watchdog/alert-state.ts';

const homeKeys = (prefix: string) => ({
  /** Sorted set: Slack user id → when they last opened the Home tab (ms). */
  users: `${prefix}:home:users`,
  /** Hash: Slack user id → hash of the view last published to them. */
  published: `${prefix}:home:published`,
});

export interface HomeSettings {
  /** RAM % from which a machine is shown as in trouble (the watchdog's GPU_MEDIC_WATCH_RAM_PCT). */
  ramPct: number;
  /** A reading older than this is shown as stale (ms). */
  staleAfterMs: number;
}

/** Unstick incidents older than this are not looked at (one that never finished stays in the log). */
const INCIDENT_WINDOW_MS = 24 * 3600_000;
/** How many of the newest incidents are looked at for unsticks in progress. */
const INCIDENTS_LOOKED_AT = 200;
/** Open alerts read per refresh (the view shows fewer and counts the rest). */
const ALERTS_READ = 500;

const isState = (e: { type: string }): boolean =>
  e.type === 'alert_raised' || e.type === 'alert_updated' || e.type === 'alert_cleared';

/** The model Home renders, read from Redis. `machineIds`: the inventory's, in order. */
export async function readHomeModel(
  redis: Redis,
  prefix: string,
  machineIds: readonly string[],
  settings: HomeSettings,
  now: number,
): Promise<HomeModel> {
  const keys = watchKeys(prefix);
  const log = new IncidentLog(redis, prefix);
  const [lastRaw, openIds, snoozes] = await Promise.all([
    redis.hgetall(keys.last),
    redis.zrevrange(keys.open, 0, ALERTS_READ - 1),
    new SnoozeStore(redis, prefix).active(now),
  ]);

  const machines: HomeMachine[] = machineIds.map((id) => {
    const raw = lastRaw[id];
    if (raw === undefined) return { id, glance: null };
    try {
      const g = MachineGlanceSchema.safeParse(JSON.parse(raw));
      return g.success ? { id, glance: g.data } : { id, glance: null, unreadable: true };
    } catch {
      return { id, glance: null, unreadable: true };
    }
  });

  const alerts: HomeAlert[] = await Promise.all(
    openIds.map(async (incidentId): Promise<HomeAlert> => {
      // The newest events hold its latest state, unless many clicks or snoozes came after it: then all of them.
      let events = (await log.lastEvents(incidentId, 50)) as Array<{ type: string }>;
      if (events.length === 50 && !events.some(isState))
        events = (await log.events(incidentId)) as Array<{ type: string }>;
      // Several members may share the message (the watchdog and Alertmanager): it is cleared once all are.
      const episode = alertEpisode(events as Array<{ type: string; at: string }>);
      const a = episode.alert;
      if (!a) return { incidentId, alert: null, cleared: false, snoozedUntil: null };
      const until = Math.max(snoozes[a.machineId] ?? 0, a.gpu === null ? 0 : (snoozes[`${a.machineId}/${a.gpu}`] ?? 0));
      return {
        incidentId,
        alert: a,
        cleared: episode.clearedAt !== null,
        snoozedUntil: until > now ? new Date(until).toISOString() : null,
      };
    }),
  );

  const recent = await log.recent(INCIDENTS_LOOKED_AT);
  const metas = await log.metas(recent);
  const unsticks = metas.filter(
    (m): m is NonNullable<typeof m> =>
      m !== null && m.kind === 'unstick' && now - Date.parse(m.createdAt) <= INCIDENT_WINDOW_MS,
  );
  const states = await Promise.all(
    unsticks.map(async (m) => unstickStateOf((await log.events(m.id)) as Array<{ type: string; approvalId?: string }>)),
  );
  const incidents: HomeIncident[] = unsticks.flatMap((m, i) => {
    const state = states[i] ?? null;
    return state === null
      ? []
      : [{ id: m.id, targets: m.targets, requester: m.requester, state, createdAt: m.createdAt }];
  });
  return { now, machines, alerts, incidents, ramPct: settings.ramPct, staleAfterMs: settings.staleAfterMs };
}

export interface HomePublisherOptions {
  redis: Redis;
  prefix: string;
  /** The inventory's machine ids, in order. */
  machineIds: readonly string[];
  settings: HomeSettings;
  /** views.publish for one user. */
  publish: (userId: string, view: types.HomeView) => Promise<void>;
  logger: Logger;
  now?: () => number;
  /** How often the signature is checked. Default 1 s. */
  tickMs?: number;
  /** Re-read everything at least this often, for staleness. Default 5 min. */
  refreshMs?: number;
  /** At most one publish per user per this many ms. Default 5 s. */
  perUserMinMs?: number;
  /** All publishes together, per minute. Default 90 (Slack's Tier 4 is 100+). */
  maxPerMinute?: number;
  /** First retry of a failed publish after this many ms, doubling up to 5 min. Default 2 s. */
  retryMs?: number;
  /** Users who did not open Home for this long get no more publishes. Default 30 days. */
  userTtlMs?: number;
}

interface Due {
  /** Not before (ms). */
  at: number;
  failures: number;
  /** Which pass may publish it: one that began after it was due, so it read Redis after the change or the open. */
  seq: number;
}

const errorCode = (err: unknown): string => {
  const e = err as { code?: unknown; data?: { error?: unknown } };
  if (typeof e?.data?.error === 'string') return e.data.error;
  return typeof e?.code === 'string' ? e.code : err instanceof Error ? err.name : 'unknown';
};

export class HomePublisher {
  private readonly keys;
  private readonly now: () => number;
  private readonly tickMs: number;
  private readonly refreshMs: number;
  private readonly perUserMinMs: number;
  private readonly maxPerMinute: number;
  private readonly retryMs: number;
  private readonly userTtlMs: number;
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private pass: Promise<void> = Promise.resolve();
  private signature = '';
  private refreshedAt = 0;
  private view: types.HomeView | null = null;
  private viewHash = '';
  /** Unstick incidents shown as in progress: their newest event ids are part of the signature. */
  private openIncidents: string[] = [];
  private readonly due = new Map<string, Due>();
  private readonly lastPublishAt = new Map<string, number>();
  private tokens: number;
  private tokensAt: number;
  private lastPass: number | null = null;
  private passCount = 0;
  /** Bumped when a pass begins; a due entry made meanwhile waits for the next pass. */
  private passSeq = 0;

  constructor(private readonly o: HomePublisherOptions) {
    this.keys = homeKeys(o.prefix);
    this.now = o.now ?? Date.now;
    this.tickMs = o.tickMs ?? 1000;
    this.refreshMs = o.refreshMs ?? 5 * 60_000;
    this.perUserMinMs = o.perUserMinMs ?? 5000;
    this.maxPerMinute = o.maxPerMinute ?? 90;
    this.retryMs = o.retryMs ?? 2000;
    this.userTtlMs = o.userTtlMs ?? 30 * 24 * 3600_000;
    this.tokens = Math.min(10, this.maxPerMinute);
    this.tokensAt = this.now();
  }

  /** A user opened the Home tab: remember them and publish their view (soon, paced). */
  async opened(userId: string): Promise<void> {
    if (!/^[UW][A-Z0-9]{2,20}$/.test(userId)) {
      this.o.logger.warn(
        { user: userId.slice(0, 40) },
        'app_home_opened from something that is not a user id; nothing published',
      );
      return;
    }
    const at = this.now();
    const prev = this.due.get(userId);
    this.due.set(userId, { at: Math.min(prev?.at ?? at, at), failures: prev?.failures ?? 0, seq: this.passSeq + 1 });
    this.kick();
    await this.o.redis.zadd(this.keys.users, at, userId);
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.pass;
  }

  /** When the last pass that read Redis completed (ms), for health. */
  lastPassAt(): number | null {
    return this.lastPass;
  }

  /** Passes run so far (each reads the signature and publishes what is due). */
  passes(): number {
    return this.passCount;
  }

  private schedule(ms: number): void {
    if (!this.running) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      // An open that came in during the pass gets the next one at once, not a tick later.
      this.pass = this.tick().finally(() =>
        this.schedule([...this.due.values()].some((d) => d.seq > this.passSeq && d.at <= this.now()) ? 0 : this.tickMs),
      );
    }, ms);
  }

  /** Runs a pass soon, unless one is under way (it is followed by another within tickMs anyway). */
  private kick(): void {
    if (this.timer) this.schedule(0);
  }

  private async tick(): Promise<void> {
    this.passSeq += 1;
    try {
      await this.refresh();
      this.lastPass = this.now();
    } catch (err) {
      this.o.logger.warn(
        { err: errorCode(err) },
        'App Home could not read what it shows (Redis unreachable?); will try again',
      );
    }
    // Users who just opened Home get the last view read, even while Redis is away.
    await this.publishDue();
    this.passCount += 1;
  }

  private async currentSignature(): Promise<string> {
    const log = new IncidentLog(this.o.redis, this.o.prefix);
    const [version, newest, lastIds] = await Promise.all([
      this.o.redis.get(watchKeys(this.o.prefix).version),
      log.recent(1),
      log.lastEventIds(this.openIncidents),
    ]);
    return JSON.stringify([version ?? '0', newest[0] ?? '', this.openIncidents, lastIds]);
  }

  private async refresh(): Promise<void> {
    const now = this.now();
    const sig = await this.currentSignature();
    if (sig === this.signature && this.view !== null && now - this.refreshedAt < this.refreshMs) return;
    const model = await readHomeModel(this.o.redis, this.o.prefix, this.o.machineIds, this.o.settings, now);
    this.openIncidents = model.incidents.map((i) => i.id);
    // The signature as read BEFORE the model: a change committed while the model was being read moves
    // it, so the next pass reads the model again. Read again after the model, it took such a change in
    // without the model having it, and Home showed the older model until the next full refresh
    // (refreshMs). When the model found other incidents in progress, the next pass's signature (over
    // those) differs too: one more read, then steady.
    this.signature = sig;
    this.refreshedAt = now;
    const view = renderHome(model);
    // The summary line says when the view was read: left out of the hash, so only a change of content republishes.
    const content = view.blocks.filter((b) => b.block_id !== HOME_SUMMARY_BLOCK_ID);
    const hash = createHash('sha256').update(JSON.stringify(content)).digest('hex').slice(0, 32);
    this.view = view;
    if (hash === this.viewHash) return;
    this.viewHash = hash;
    await this.o.redis.zremrangebyscore(this.keys.users, '-inf', now - this.userTtlMs);
    const [users, sent] = await Promise.all([
      this.o.redis.zrangebyscore(this.keys.users, now - this.userTtlMs, '+inf'),
      this.o.redis.hgetall(this.keys.published),
    ]);
    for (const u of users)
      if (sent[u] !== hash && !this.due.has(u)) this.due.set(u, { at: now, failures: 0, seq: this.passSeq });
  }

  private takeToken(now: number): boolean {
    this.tokens = Math.min(
      Math.min(10, this.maxPerMinute),
      this.tokens + ((now - this.tokensAt) / 60_000) * this.maxPerMinute,
    );
    this.tokensAt = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  private async publishDue(): Promise<void> {
    const view = this.view;
    if (view === null || this.due.size === 0) return;
    const now = this.now();
    const seq = this.passSeq;
    const ready = [...this.due.entries()]
      .filter(([u, d]) => d.seq <= seq && d.at <= now && now - (this.lastPublishAt.get(u) ?? 0) >= this.perUserMinMs)
      .sort((a, b) => a[1].at - b[1].at);
    for (const [user, d] of ready) {
      if (!this.running) return;
      if (!this.takeToken(this.now())) return;
      const hash = this.viewHash;
      this.lastPublishAt.set(user, this.now());
      try {
        await this.o.publish(user, view);
        await this.o.redis.hset(this.keys.published, user, hash).catch(() => undefined);
        // A newer view (or a new open) may have come in meanwhile: keep that one due.
        if (this.due.get(user) === d) this.due.delete(user);
      } catch (err) {
        const failures = d.failures + 1;
        const wait = Math.min(5 * 60_000, this.retryMs * 2 ** (failures - 1));
        const code = errorCode(err);
        this.o.logger.warn(
          { user, error: code, failures, retryInMs: wait },
          `App Home publish (views.publish) failed: ${code}${code === 'not_enabled' ? " (the app's Home tab is off: App Home > Show Tabs > Home Tab, or slack/manifest.yaml)" : ''}; will retry`,
        );
        if (this.due.get(user) === d) this.due.set(user, { at: this.now() + wait, failures, seq: d.seq });
      }
    }
  }
}

/** Bolt: opening the Home tab publishes its view; the Messages tab and anything else publish nothing. */
export function registerHome(app: App, home: HomePublisher, logger: Logger): void {
  app.event('app_home_opened', async ({ event }) => {
    if (event.tab !== 'home') return;
    try {
      await home.opened(event.user);
    } catch (err) {
      logger.warn(
        { err: errorCode(err) },
        'App Home open not recorded (Redis unreachable?); the view is published on the next open',
      );
    }
  });
}
