import type { Redis } from 'ioredis';

/**
 * The blast-radius budget: at most `limit` host-level destructive steps (kills, resets, container
 * stops) per host in any `windowMs` (an hour). Past it, only an admin's approval lifts it for one
 * step. A circuit breaker like NVIDIA's own remediation service has. Counted in Redis, one sorted
 * set per host (member: incident + step, score: when it ran), checked and taken atomically.
 */
export interface BudgetOptions {
  limit: number;
  windowMs?: number;
}

export type ConsumeResult = 'ok' | 'already' | 'exhausted';

/** KEYS[1] the host's set. ARGV: now, window, limit, member, lift ('1' = an admin lifts the budget). */
const CONSUME = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then return 'already' end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) and ARGV[5] ~= '1' then return 'exhausted' end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 'ok'
`;

export class BlastBudget {
  readonly limit: number;
  readonly windowMs: number;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    o: BudgetOptions,
  ) {
    this.limit = o.limit;
    this.windowMs = o.windowMs ?? 3600_000;
  }

  private key(hostId: string): string {
    return `${this.prefix}:budget:${hostId}`;
  }

  /** Host-level destructive steps on `hostId` in the window ending `now`. */
  async used(hostId: string, now: number): Promise<number> {
    return this.redis.zcount(this.key(hostId), String(now - this.windowMs + 1), '+inf');
  }

  /** Takes one unit for this step (once per step, however often asked), unless the budget is spent and no admin lifts it. */
  async consume(
    hostId: string,
    step: { incidentId: string; stepId: string },
    now: number,
    lift: boolean,
  ): Promise<ConsumeResult> {
    const r = String(
      await this.redis.eval(
        CONSUME,
        1,
        this.key(hostId),
        String(now),
        String(this.windowMs),
        String(this.limit),
        `${step.incidentId}:${step.stepId}`,
        lift ? '1' : '0',
      ),
    );
    return r === 'ok' || r === 'already' ? r : 'exhausted';
  }
}
