import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { IncidentMeta } from '../incident/events.ts';
import { targetIndexKey, targetIndexSinceKey } from '../incident/log.ts';
import { ALERTMANAGER_REQUESTER, type AlertEvent } from '../watchdog/alert-events.ts';
import { watchKeys } from '../watch-store/watch-keys.ts';
import type { MappedAlert } from './map.ts';

/**
 * Where an Alertmanager alert becomes part of an alert message, in ONE atomic Redis step per alert
 * (as the watchdog's commit, src/watch-store/watch-round-store.ts, with which it shares the
 * condition registry): a firing alert not yet open joins its condition's open message (the
 * watchdog's, when the watchdog raised it first) or opens its own (meta, indexes, alert_raised); a
 * repeat that says something new appends alert_updated, one that says the same appends nothing; a
 * resolved one appends alert_cleared and leaves the condition. Redis is the durable queue: once
 * this returns, the outbox posts it, after any restart, exactly once.
 */
export type RecordOutcome = 'raised' | 'joined' | 'updated' | 'unchanged' | 'cleared' | 'not_open';

/**
 * KEYS: 1 conditions, 2 members, 3 seen, 4 condition members, 5 meta, 6 events, 7 incidents,
 * 8 dirty, 9 open, 10 target index, 11 index-since, 12 version.
 * ARGV: 1 status, 2 condition, 3 member, 4 expected `<condition owner>|<member's incident>`, 5 id,
 * 6 meta, 7 raised event, 8 updated event, 9 cleared event, 10 score, 11 content hash, 12 has target.
 */
const RECORD = `
local condOwner = redis.call('HGET', KEYS[1], ARGV[2]) or ''
local memberOwner = redis.call('HGET', KEYS[2], ARGV[3]) or ''
if condOwner .. '|' .. memberOwner ~= ARGV[4] then return 'moved' end
local id = ARGV[5]
if ARGV[1] == 'resolved' then
  if memberOwner == '' then return 'not_open' end
  redis.call('XADD', KEYS[6], '*', 'e', ARGV[9])
  redis.call('SADD', KEYS[8], id)
  redis.call('HDEL', KEYS[2], ARGV[3])
  redis.call('HDEL', KEYS[3], ARGV[3])
  redis.call('SREM', KEYS[4], ARGV[3])
  if redis.call('SCARD', KEYS[4]) == 0 then
    if condOwner == id then redis.call('HDEL', KEYS[1], ARGV[2]) end
    redis.call('ZREM', KEYS[9], id)
  end
  redis.call('INCR', KEYS[12])
  return 'cleared'
end
if memberOwner ~= '' then
  if redis.call('HGET', KEYS[3], ARGV[3]) == ARGV[11] then return 'unchanged' end
  redis.call('XADD', KEYS[6], '*', 'e', ARGV[8])
  redis.call('SADD', KEYS[8], id)
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[11])
  redis.call('INCR', KEYS[12])
  return 'updated'
end
local outcome = 'joined'
if redis.call('SET', KEYS[5], ARGV[6], 'NX') then
  outcome = 'raised'
  redis.call('ZADD', KEYS[7], 'NX', ARGV[10], id)
  if ARGV[12] == '1' then redis.call('ZADD', KEYS[10], 'NX', ARGV[10], id) end
  redis.call('SET', KEYS[11], ARGV[10], 'NX')
end
redis.call('XADD', KEYS[6], '*', 'e', ARGV[7])
redis.call('SADD', KEYS[8], id)
redis.call('ZADD', KEYS[9], ARGV[10], id)
if condOwner == '' then redis.call('HSET', KEYS[1], ARGV[2], id) end
redis.call('HSET', KEYS[2], ARGV[3], id)
redis.call('HSET', KEYS[3], ARGV[3], ARGV[11])
redis.call('SADD', KEYS[4], ARGV[3])
redis.call('INCR', KEYS[12])
return outcome
`;

/** The incident of one Alertmanager alert episode (fingerprint + startsAt): the same on every retry and restart. */
function alertmanagerIncidentId(a: Pick<MappedAlert, 'key'> & { alert: { since: number } }): string {
  const h = createHash('sha256').update(`alertmanager\n${a.key}\n${a.alert.since}`).digest('hex').slice(0, 20);
  return `inc_alert_${h}`;
}

const MAX_ATTEMPTS = 10;

export class AlertmanagerStore {
  private readonly keys;
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly alertsChannel: string,
  ) {
    this.keys = watchKeys(prefix);
  }

  private k(...parts: string[]): string {
    return [this.prefix, ...parts].join(':');
  }

  /** Records one alert of a notification; throws when Redis does not take it (the receiver answers 503). */
  async record(m: MappedAlert, nowMs: number): Promise<RecordOutcome> {
    // An alert that shares no condition (no machine, or a name of no kind) is a condition of its own.
    const condition = m.condition ?? `alertmanager|${m.external.fingerprint}`;
    const at = new Date(nowMs).toISOString();
    const content = createHash('sha256')
      .update(JSON.stringify([m.alert.kind, m.alert.machineId, m.alert.gpu, m.alert.sentence, m.external]))
      .digest('hex')
      .slice(0, 16);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const [condOwner, memberOwner] = await Promise.all([
        this.redis.hget(this.keys.conditions, condition),
        this.redis.hget(this.keys.members, m.key),
      ]);
      const id = memberOwner ?? condOwner ?? alertmanagerIncidentId(m);
      const meta: IncidentMeta = {
        id,
        kind: 'alert',
        requester: ALERTMANAGER_REQUESTER,
        channel: this.alertsChannel,
        targets: m.machineId === null ? [] : [m.machineId],
        text: `alertmanager ${m.external.alertname}`,
        reason: null,
        createdAt: new Date(m.alert.since).toISOString(),
      };
      const ev = (type: AlertEvent['type']): string =>
        JSON.stringify({ type, at, alert: m.alert, external: m.external });
      const r = await this.redis.eval(
        RECORD,
        12,
        this.keys.conditions,
        this.keys.members,
        this.k('watch', 'am-seen'),
        this.keys.conditionMembers(condition),
        this.k('inc', id, 'meta'),
        this.k('inc', id, 'events'),
        this.k('incidents'),
        this.k('dirty'),
        this.keys.open,
        targetIndexKey(this.prefix, m.machineId ?? '-'),
        targetIndexSinceKey(this.prefix),
        this.keys.version,
        m.status,
        condition,
        m.key,
        `${condOwner ?? ''}|${memberOwner ?? ''}`,
        id,
        JSON.stringify(meta),
        ev('alert_raised'),
        ev('alert_updated'),
        ev('alert_cleared'),
        String(m.alert.since),
        content,
        m.machineId === null ? '0' : '1',
      );
      if (r !== 'moved') return r as RecordOutcome;
    }
    throw new Error(`the condition of ${m.key} kept changing under ${MAX_ATTEMPTS} attempts`);
  }
}
