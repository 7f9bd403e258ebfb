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
  /**
   * This worker process's own count of the steps it took (Redis can be rewound): a budget key deleted or
   * rewound in Redis does not give back what this process spent. Absent: Redis alone.
   */
  memory?: BudgetMemory;
}

/** What one worker process spent, per host: member → when. Never shrinks but by the window. */
export class BudgetMemory {
  private readonly spent = new Map<string, Map<string, number>>();

  count(hostId: string, now: number, windowMs: number, except: string): number {
    const m = this.spent.get(hostId);
    if (!m) return 0;
    for (const [k, at] of m) if (at <= now - windowMs) m.delete(k);
    return [...m.keys()].filter((k) => k !== except).length;
  }

  has(hostId: string, member: string): boolean {
    return this.spent.get(hostId)?.has(member) ?? false;
  }

  add(hostId: string, member: string, now: number): void {
    const m = this.spent.get(hostId) ?? new Map<string, number>();
    if (!m.has(member)) m.set(member, now);
    this.spent.set(hostId, m);
  }
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
  private readonly memory: BudgetMemory | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    o: BudgetOptions,
  ) {
    this.limit = o.limit;
    this.windowMs = o.windowMs ?? 3600_000;
    this.memory = o.memory;
  }

  private key(hostId: string): string {
    return `${this.prefix}:budget:${hostId}`;
  }

  /** Host-level destructive steps on `hostId` in the window ending `now`. */
  async used(hostId: string, now: number): Promise<number> {
    const counted = await this.redis.zcount(this.key(hostId), String(now - this.windowMs + 1), '+inf');
    return Math.max(counted, this.memory?.count(hostId, now, this.windowMs, '') ?? 0);
  }

  /** Takes one unit for this step (once per step, however often asked), unless the budget is spent and no admin lifts it. */
  async consume(
    hostId: string,
    step: { incidentId: string; stepId: string },
    now: number,
    lift: boolean,
  ): Promise<ConsumeResult> {
    const member = `${step.incidentId}:${step.stepId}`;
    // What this process spent counts even when Redis has forgotten it (a deleted or rewound key).
    if (
      this.memory &&
      !lift &&
      !this.memory.has(hostId, member) &&
      this.memory.count(hostId, now, this.windowMs, member) >= this.limit
    )
      return 'exhausted';
    const r = String(
      await this.redis.eval(
        CONSUME,
        1,
        this.key(hostId),
        String(now),
        String(this.windowMs),
        String(this.limit),
        member,
        lift ? '1' : '0',
      ),
    );
    if (r !== 'ok' && r !== 'already') return 'exhausted';
    this.memory?.add(hostId, member, now);
    return r;
  }
}
