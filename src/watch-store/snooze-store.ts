import type { Redis } from 'ioredis';
import type { Snoozes } from '../watchdog/judge.ts';
import { watchKeys } from './watch-keys.ts';

const SCOPE = /^[a-z0-9][a-z0-9._-]{0,62}(\/\d{1,2})?$/;

/** Snoozes of alerts by machine or machine/GPU: written by the bot's Snooze buttons, read by the watchdog. */
export class SnoozeStore {
  private readonly keys;
  constructor(
    private readonly redis: Redis,
    prefix: string,
  ) {
    this.keys = watchKeys(prefix);
  }

  static isScope(scope: string): boolean {
    return SCOPE.test(scope);
  }

  /** Snoozes `scope` until `untilMs`; a later snooze of the same scope never shortens an earlier one. */
  async snooze(scope: string, untilMs: number): Promise<number> {
    if (!SnoozeStore.isScope(scope)) throw new Error('not a snooze scope');
    const r = await this.redis.eval(
      `local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
       local u = tonumber(ARGV[2])
       if u > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]); redis.call('INCR', KEYS[2]); return u end
       return cur`,
      2,
      this.keys.snoozes,
      this.keys.version,
      scope,
      String(Math.floor(untilMs)),
    );
    return Number(r);
  }

  /** Every snooze still running at `nowMs` (ended ones are left out; a damaged entry is ignored). */
  async active(nowMs: number): Promise<Snoozes> {
    const raw = await this.redis.hgetall(this.keys.snoozes);
    const out: Record<string, number> = {};
    for (const [scope, v] of Object.entries(raw)) {
      const until = Number(v);
      if (SnoozeStore.isScope(scope) && Number.isFinite(until) && until > nowMs) out[scope] = until;
    }
    return out;
  }
}
