import type { ChainableCommander, Redis } from 'ioredis';
import type { AnyEvent, AnyLoggedEvent } from './all-events.ts';
import { decodeEvent, IncidentMetaSchema, type IncidentMeta } from './events.ts';
import { EnvelopeSchema, type Envelope } from '../auth/envelope.ts';

/** Marks an incident rendered up to `cursor` only if no newer event arrived meanwhile (no lost wake-ups). */
const MARK_RENDERED = `
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local lastId = last[1] and last[1][1] or '0-0'
redis.call('SET', KEYS[2], ARGV[1])
if lastId == ARGV[1] then redis.call('SREM', KEYS[3], ARGV[2]) return 1 end
return 0
`;

/**
 * Opens an incident in one script: what a MULTI of separate commands wrote (meta, request, the
 * global index, when the per-machine index began, one per-machine index per target) and, when a
 * first event is given, that event and the dirty mark. One queued reply instead of up to seven
 * inside a command's MULTI, because each queued reply costs the bot CPU before it can ack. Every key is
 * passed in KEYS. KEYS: meta, request, incidents, since, events, dirty, target index…; ARGV: meta JSON,
 * request JSON or '', created (ms), id, first event JSON or ''. Returns the event's stream id, or false.
 */
const OPEN_INCIDENT = `
redis.call('SET', KEYS[1], ARGV[1], 'NX')
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2], 'NX') end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
redis.call('SET', KEYS[4], ARGV[3], 'NX')
for i = 7, #KEYS do redis.call('ZADD', KEYS[i], ARGV[3], ARGV[4]) end
if ARGV[5] == '' then return false end
local id = redis.call('XADD', KEYS[5], '*', 'e', ARGV[5])
redis.call('SADD', KEYS[6], ARGV[4])
return id
`;

/**
 * The name of OPEN_INCIDENT on a connection (ioredis defineCommand). gpu-medic's own scripts are
 * named `gpuMedic…`: the dispatcher copies them, and BullMQ's job inserts, onto a command's MULTI.
 */
const OPEN_INCIDENT_COMMAND = 'gpuMedicOpenIncident';

type OpenIncident = (numKeys: number, ...args: string[]) => unknown;
type WithOpenIncident = { [OPEN_INCIDENT_COMMAND]?: OpenIncident };

/** The per-machine index of incidents (`/gpu history`): one zset per machine id, scored by creation time. */
export function targetIndexKey(prefix: string, machineId: string): string {
  return [prefix, 'incidents', 'target', machineId].join(':');
}
/** When the per-machine index began (ms, set once): older incidents are in the global index only. */
export function targetIndexSinceKey(prefix: string): string {
  return [prefix, 'incidents', 'target-index-since'].join(':');
}

/**
 * The durable incident log: a Redis stream per incident plus an index. Workers and the bot
 * append; the bot's outbox renders. Requires Redis persistence (appendonly) in production.
 */
export class IncidentLog {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {
    if ((redis as unknown as WithOpenIncident)[OPEN_INCIDENT_COMMAND] === undefined)
      redis.defineCommand(OPEN_INCIDENT_COMMAND, { lua: OPEN_INCIDENT });
  }

  private k(...parts: string[]): string {
    return [this.prefix, ...parts].join(':');
  }

  /**
   * Writes the meta, the global index and, in the same MULTI, the per-machine index (one zset per
   * target, for `/gpu history`) and the time that index began (kept from the first incident on).
   */
  async create(meta: IncidentMeta, request?: Envelope): Promise<void> {
    const m = this.redis.multi();
    this.writeOpen(m, meta, null, request);
    await m.exec();
  }

  /**
   * Queues into the caller's MULTI what `create(meta, request)` and then `append(meta.id, first)`
   * write, so that a command opens its incident, logs its first event and queues its job in one
   * round trip, all or nothing (the dispatcher's `enqueueAll`). Sends nothing itself.
   */
  openIn(m: ChainableCommander, meta: IncidentMeta, first: AnyEvent, request?: Envelope): void {
    this.writeOpen(m, meta, first, request);
  }

  /** One OPEN_INCIDENT call queued on `m` (a MULTI of this connection, or one the dispatcher built with its scripts). */
  private writeOpen(m: ChainableCommander, meta: IncidentMeta, first: AnyEvent | null, request?: Envelope): void {
    const open = (m as unknown as WithOpenIncident)[OPEN_INCIDENT_COMMAND];
    if (open === undefined) throw new Error(`${OPEN_INCIDENT_COMMAND} is not defined on this transaction`);
    const targets = [...new Set(meta.targets)].map((t) => targetIndexKey(this.prefix, t));
    open.call(
      m,
      6 + targets.length,
      this.k('inc', meta.id, 'meta'),
      // The bot's signature of the request (src/auth/signed-jobs.ts): what a worker acts on, beside the meta.
      this.k('inc', meta.id, 'request'),
      this.k('incidents'),
      targetIndexSinceKey(this.prefix),
      this.k('inc', meta.id, 'events'),
      this.k('dirty'),
      ...targets,
      JSON.stringify(meta),
      request ? JSON.stringify(request) : '',
      String(Date.parse(meta.createdAt)),
      meta.id,
      first ? JSON.stringify(first) : '',
    );
  }

  private writeAppend(m: ChainableCommander, id: string, event: AnyEvent): void {
    m.xadd(this.k('inc', id, 'events'), '*', 'e', JSON.stringify(event)).sadd(this.k('dirty'), id);
  }

  /** Newest first: incidents that named `target`, from the per-machine index, with when each was opened (ms). */
  async recentFor(target: string, limit: number): Promise<Array<{ id: string; at: number }>> {
    return pairs(await this.redis.zrevrange(targetIndexKey(this.prefix, target), 0, limit - 1, 'WITHSCORES'));
  }

  /** When the per-machine index began (ms); null while no incident was indexed. Older incidents are in the global index only. */
  async targetIndexSince(): Promise<number | null> {
    const raw = await this.redis.get(targetIndexSinceKey(this.prefix));
    const n = raw === null ? NaN : Number(raw);
    return Number.isFinite(n) ? n : null;
  }

  /** Newest first from the global index: incidents opened strictly before `beforeMs` (null: any), at most `limit`. */
  async recentBefore(beforeMs: number | null, limit: number): Promise<Array<{ id: string; at: number }>> {
    const max = beforeMs === null ? '+inf' : `(${beforeMs}`;
    return pairs(await this.redis.zrevrangebyscore(this.k('incidents'), max, '-inf', 'WITHSCORES', 'LIMIT', 0, limit));
  }

  /** Several metas in one round trip (null where missing or unreadable). */
  async metas(ids: readonly string[]): Promise<Array<IncidentMeta | null>> {
    if (ids.length === 0) return [];
    const raws = await this.redis.mget(...ids.map((id) => this.k('inc', id, 'meta')));
    return raws.map((raw) => {
      if (raw === null) return null;
      try {
        const parsed = IncidentMetaSchema.safeParse(JSON.parse(raw));
        return parsed.success ? parsed.data : null;
      } catch {
        return null;
      }
    });
  }

  /** The bot's signed request of an incident (null when none, or unreadable): the worker verifies it. */
  async request(id: string): Promise<Envelope | null> {
    const raw = await this.redis.get(this.k('inc', id, 'request'));
    if (raw === null) return null;
    try {
      const e = EnvelopeSchema.safeParse(JSON.parse(raw));
      return e.success ? e.data : null;
    } catch {
      return null;
    }
  }

  async meta(id: string): Promise<IncidentMeta | null> {
    const raw = await this.redis.get(this.k('inc', id, 'meta'));
    if (raw === null) return null;
    const parsed = IncidentMetaSchema.safeParse(JSON.parse(raw));
    return parsed.success ? parsed.data : null;
  }

  /** Appends an event and marks the incident for rendering, atomically. Returns the event id. */
  async append(id: string, event: AnyEvent): Promise<string> {
    const m = this.redis.multi();
    this.writeAppend(m, id, event);
    const res = await m.exec();
    const first = res?.[0];
    if (!first || first[0]) throw first?.[0] ?? new Error('append failed');
    return String(first[1]);
  }

  async events(id: string): Promise<AnyLoggedEvent[]> {
    const rows = await this.redis.xrange(this.k('inc', id, 'events'), '-', '+');
    const out: AnyLoggedEvent[] = [];
    for (const [eid, fields] of rows) {
      const i = fields.indexOf('e');
      const json = i >= 0 ? fields[i + 1] : undefined;
      const ev = json === undefined ? null : decodeEvent<AnyEvent>(eid, json);
      if (ev) out.push(ev);
    }
    return out;
  }

  /** The newest `count` events of an incident, oldest first (a cheap look at a long log's end). */
  async lastEvents(id: string, count: number): Promise<AnyLoggedEvent[]> {
    const rows = await this.redis.xrevrange(this.k('inc', id, 'events'), '+', '-', 'COUNT', count);
    const out: AnyLoggedEvent[] = [];
    for (const [eid, fields] of rows.reverse()) {
      const i = fields.indexOf('e');
      const json = i >= 0 ? fields[i + 1] : undefined;
      const ev = json === undefined ? null : decodeEvent<AnyEvent>(eid, json);
      if (ev) out.push(ev);
    }
    return out;
  }

  /** The stream id of each incident's newest event ('' when it has none), in one round trip. */
  async lastEventIds(ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const p = this.redis.pipeline();
    for (const id of ids) p.xrevrange(this.k('inc', id, 'events'), '+', '-', 'COUNT', 1);
    const res = (await p.exec()) ?? [];
    return res.map(([err, rows]) =>
      err || !Array.isArray(rows) || rows.length === 0 ? '' : String((rows[0] as [string, string[]])[0]),
    );
  }

  async dirty(): Promise<string[]> {
    return this.redis.smembers(this.k('dirty'));
  }

  /** True when nothing newer than `cursor` exists (the incident left the dirty set). */
  async markRendered(id: string, cursor: string): Promise<boolean> {
    const r = await this.redis.eval(
      MARK_RENDERED,
      3,
      this.k('inc', id, 'events'),
      this.k('inc', id, 'rendered'),
      this.k('dirty'),
      cursor,
      id,
    );
    return r === 1;
  }

  /** Slack message refs of an incident: view key → { ts, hash } of what was last posted. */
  async slackRefs(id: string): Promise<Map<string, { ts: string; hash: string }>> {
    const raw = await this.redis.hgetall(this.k('inc', id, 'slack'));
    const out = new Map<string, { ts: string; hash: string }>();
    for (const [key, v] of Object.entries(raw)) {
      try {
        const o = JSON.parse(v) as { ts?: unknown; hash?: unknown };
        if (typeof o.ts === 'string' && typeof o.hash === 'string') out.set(key, { ts: o.ts, hash: o.hash });
      } catch {
        /* a damaged ref is re-posted rather than trusted */
      }
    }
    return out;
  }

  /** Records the ref and, atomically, that the view is no longer being posted. */
  async setSlackRef(id: string, key: string, ref: { ts: string; hash: string }): Promise<void> {
    await this.redis
      .multi()
      .hset(this.k('inc', id, 'slack'), key, JSON.stringify(ref))
      .hdel(this.k('inc', id, 'posting'), key)
      .exec();
  }

  /**
   * Notes that a post of this view is about to go out (before chat.postMessage): if the process dies
   * before `setSlackRef`, the next sync knows the message may already be in Slack and looks for it.
   */
  async markPosting(id: string, key: string): Promise<void> {
    await this.redis.hset(this.k('inc', id, 'posting'), key, '1');
  }

  /** Views whose post went out (or was about to) with no ts recorded since. */
  async posting(id: string): Promise<Set<string>> {
    return new Set(await this.redis.hkeys(this.k('inc', id, 'posting')));
  }

  async recent(limit: number): Promise<string[]> {
    return this.redis.zrevrange(this.k('incidents'), 0, limit - 1);
  }
}

/** `[member, score, member, score, …]` → `{ id, at }` pairs. */
function pairs(flat: string[]): Array<{ id: string; at: number }> {
  const out: Array<{ id: string; at: number }> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push({ id: flat[i] ?? '', at: Number(flat[i + 1]) });
  return out;
}
