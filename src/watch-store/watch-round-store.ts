/**
 * The watchdog's commit point, so that an alert is raised once and never repeated or lost: one machine's
 * judged reading written in ONE atomic Redis step (a Lua script), or not at all:
 *   - a compare-and-set on the machine's stored WatchState (`watchKeys.state`): the step only runs
 *     if the state is still the one the judgement started from; else nothing is written and the
 *     caller judges again against what is stored now (two workers judging the same reading post
 *     nothing twice: the second one's judgement finds the alerts already raised);
 *   - each alert incident's meta (SET NX: kind `alert`, requester `watchdog`, the alerts channel,
 *     targets [machineId], text = the alert key) and its index entries (the global one and its
 *     machine's, with the per-machine index's start), as IncidentLog.create does;
 *   - its alert_raised / alert_updated / alert_cleared event (XADD + SADD dirty, as IncidentLog.append);
 *   - `open` (raised → ZADD, cleared → ZREM), `last` (the machine's glance) and INCR `version`.
 * A worker killed before the step leaves everything as it was (the next round judges again and
 * raises then); killed after it, everything is there. So no alert is lost or posted twice.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import type { IncidentMeta } from '../incident/events.ts';
import { targetIndexKey, targetIndexSinceKey } from '../incident/log.ts';
import type { AlertEvent } from '../watchdog/alert-events.ts';
import { WATCHDOG_REQUESTER } from '../watchdog/alert-events.ts';
import { alertIncidentId } from '../watchdog/alert-id.ts';
import { conditionKey } from '../watchdog/condition.ts';
import { type AlertChange, CONDITION_KINDS, EMPTY_WATCH_STATE, type WatchState } from '../watchdog/judge.ts';
import type { MachineGlance } from '../watchdog/watch-glance.ts';
import { watchKeys } from './watch-keys.ts';

const AlertSchema = z.object({
  key: z.string().max(300),
  kind: z.enum([...CONDITION_KINDS, 'external']),
  machineId: z.string(),
  gpu: z.number().int().nullable(),
  gpuUuid: z.string().max(80).nullable().optional(),
  since: z.number(),
  raisedAt: z.number().nullable(),
  sentence: z.string().max(2000),
  lastSeenAt: z.number(),
});

const CursorSchema = z.discriminatedUnion('source', [
  z.object({ source: z.literal('journal'), lastUs: z.number().min(0), readAtSec: z.number().min(0) }),
  z.object({ source: z.literal('dmesg'), bootId: z.string().regex(/^[0-9a-f-]{1,64}$/), lastSec: z.number().min(0) }),
]);

const WatchStateSchema = z.object({
  alerts: z.record(z.string(), AlertSchema),
  gpuCount: z.record(z.string(), z.number().int().min(0)),
  lastReadingAt: z.number().optional(),
  kernelLog: CursorSchema.optional(),
});

export interface StoredWatchState {
  /** The stored JSON as it is (the compare-and-set compares it); null: nothing stored yet. */
  raw: string | null;
  state: WatchState;
  /** The stored value could not be read as a WatchState (it is replaced by the next commit). */
  damaged: boolean;
}

/**
 * KEYS: 1 state, 2 open, 3 last, 4 version, 5 incidents, 6 dirty, 7 index-since, 8 conditions,
 * 9 members, then per change 4 keys (meta, events, target index, condition members).
 * ARGV: 1 has-expected, 2 expected, 3 next, 4 machine, 5 glance, 6 n, then per change 8 args (id,
 * kind, meta, event, score, condition, member, expected owner of condition and member as
 * `<condition owner>|<member's incident>`, '' for none). An owner that moved since the caller read
 * it fails the step as a moved state does (the caller reads and judges again).
 */
const COMMIT = `
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then return 0 end
elseif cur ~= ARGV[2] then
  return 0
end
local n = tonumber(ARGV[6])
for i = 0, n - 1 do
  local a = 7 + i * 8
  local seen = (redis.call('HGET', KEYS[8], ARGV[a + 5]) or '') .. '|' .. (redis.call('HGET', KEYS[9], ARGV[a + 6]) or '')
  if seen ~= ARGV[a + 7] then return 0 end
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
for i = 0, n - 1 do
  local a = 7 + i * 8
  local id, kind, meta, ev, score = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local cond, member = ARGV[a + 5], ARGV[a + 6]
  local metaKey, eventsKey, targetKey, condKey = KEYS[10 + i * 4], KEYS[11 + i * 4], KEYS[12 + i * 4], KEYS[13 + i * 4]
  if redis.call('SET', metaKey, meta, 'NX') then
    redis.call('ZADD', KEYS[5], 'NX', score, id)
    redis.call('ZADD', targetKey, 'NX', score, id)
    redis.call('SET', KEYS[7], score, 'NX')
  end
  redis.call('XADD', eventsKey, '*', 'e', ev)
  redis.call('SADD', KEYS[6], id)
  if kind == 'raise' then
    redis.call('ZADD', KEYS[2], score, id)
    if not redis.call('HGET', KEYS[8], cond) then redis.call('HSET', KEYS[8], cond, id) end
    redis.call('HSET', KEYS[9], member, id)
    redis.call('SADD', condKey, member)
  end
  if kind == 'clear' then
    redis.call('HDEL', KEYS[9], member)
    redis.call('SREM', condKey, member)
    if redis.call('SCARD', condKey) == 0 then
      if redis.call('HGET', KEYS[8], cond) == id then redis.call('HDEL', KEYS[8], cond) end
      redis.call('ZREM', KEYS[2], id)
    end
  end
end
redis.call('INCR', KEYS[4])
return 1
`;

/** KEYS: 1 last-good hash. ARGV: 1 machine, 2 at (ms). Sets it only forward. */
const MARK_GOOD = `
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
`;

function eventOf(c: AlertChange, at: string): AlertEvent {
  if (c.type === 'clear') return { type: 'alert_cleared', at: new Date(c.at).toISOString(), alert: c.alert };
  return { type: c.type === 'raise' ? 'alert_raised' : 'alert_updated', at, alert: c.alert };
}

export class WatchRoundStore {
  private readonly keys;
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    /** GPU_MEDIC_ALERTS_CHANNEL: where the bot posts the alert incidents. */
    private readonly alertsChannel: string,
  ) {
    this.keys = watchKeys(prefix);
  }

  private k(...parts: string[]): string {
    return [this.prefix, ...parts].join(':');
  }

  /** Records a good reading of `machineId` taken at `at` (ms), unless a later one is recorded. */
  async markGoodRead(machineId: string, at: number): Promise<void> {
    await this.redis.eval(MARK_GOOD, 1, this.keys.lastGood, machineId, String(at));
  }

  /** When each of `machineIds` was last read well (ms); a machine never read well, or a damaged value, is absent. */
  async lastGoodReads(machineIds: readonly string[]): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    if (machineIds.length === 0) return out;
    const raws = await this.redis.hmget(this.keys.lastGood, ...machineIds);
    machineIds.forEach((id, i) => {
      const at = Number(raws[i] ?? Number.NaN);
      if (Number.isFinite(at) && at > 0) out.set(id, at);
    });
    return out;
  }

  async load(machineId: string): Promise<StoredWatchState> {
    const raw = await this.redis.get(this.keys.state(machineId));
    if (raw === null) return { raw, state: EMPTY_WATCH_STATE, damaged: false };
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch {
      return { raw, state: EMPTY_WATCH_STATE, damaged: true };
    }
    const p = WatchStateSchema.safeParse(json);
    return p.success ? { raw, state: p.data, damaged: false } : { raw, state: EMPTY_WATCH_STATE, damaged: true };
  }

  /**
   * Writes `next`, the changes' incidents and events, `open`, the glance and `version` at once, if
   * the stored state is still `expectedRaw`. False: it moved (nothing was written; judge again).
   * `at`: when the reading was taken (the events' time, the same on a re-judgement).
   */
  async commit(
    machineId: string,
    expectedRaw: string | null,
    next: WatchState,
    changes: readonly AlertChange[],
    glance: MachineGlance,
    at: number,
  ): Promise<boolean> {
    const keys = [
      this.keys.state(machineId),
      this.keys.open,
      this.keys.last,
      this.keys.version,
      this.k('incidents'),
      this.k('dirty'),
      targetIndexSinceKey(this.prefix),
      this.keys.conditions,
      this.keys.members,
    ];
    // Which incident each change belongs to: the one its member joined, else (a raise) the one its
    // condition's other source opened, else its own. Checked again inside the step.
    const conds = changes.map((c) => conditionKey(c.alert));
    const owners =
      changes.length === 0
        ? []
        : await Promise.all([
            this.redis.hmget(this.keys.conditions, ...conds),
            this.redis.hmget(this.keys.members, ...changes.map((c) => c.alert.key)),
          ]);
    const [condOwners = [], memberOwners = []] = owners;
    const args: string[] = [
      expectedRaw === null ? '0' : '1',
      expectedRaw ?? '',
      JSON.stringify(next),
      machineId,
      JSON.stringify(glance),
      String(changes.length),
    ];
    const iso = new Date(at).toISOString();
    changes.forEach((c, i) => {
      const cond = conds[i] ?? '';
      const condOwner = condOwners[i] ?? null;
      const memberOwner = memberOwners[i] ?? null;
      const id = memberOwner ?? (c.type === 'raise' ? condOwner : null) ?? alertIncidentId(c.alert);
      const createdAt = new Date(c.alert.raisedAt ?? at).toISOString();
      const meta: IncidentMeta = {
        id,
        kind: 'alert',
        requester: WATCHDOG_REQUESTER,
        channel: this.alertsChannel,
        targets: [c.alert.machineId],
        text: c.alert.key,
        reason: null,
        createdAt,
      };
      keys.push(
        this.k('inc', id, 'meta'),
        this.k('inc', id, 'events'),
        targetIndexKey(this.prefix, c.alert.machineId),
        this.keys.conditionMembers(cond),
      );
      const score = c.type === 'clear' ? c.at : (c.alert.raisedAt ?? at);
      args.push(
        id,
        c.type,
        JSON.stringify(meta),
        JSON.stringify(eventOf(c, iso)),
        String(score),
        cond,
        c.alert.key,
        `${condOwner ?? ''}|${memberOwner ?? ''}`,
      );
    });
    const r = await this.redis.eval(COMMIT, keys.length, ...keys, ...args);
    return r === 1;
  }
}
