import type { Redis } from 'ioredis';

/**
 * Single use of a signed request or decision (no replay of a click). A nonce is taken once, in Redis (SET NX,
 * kept past its envelope's expiry) and in this worker's memory. The same job taking it again
 * (BullMQ re-runs a job whose worker died; the step guard keeps its destructive steps once-only)
 * is `again`; anyone else, or the same job after this process saw it through, is `replayed`.
 * Memory is what holds when Redis was emptied or rewound: a captured job replayed to this process
 * within the expiry window still ends in no signal. What memory cannot cover (another or a
 * restarted worker process, with Redis rewound, inside the window) is stated in docs/security.md.
 */
export type Take = 'fresh' | 'again' | 'replayed';

/** The memory of one worker process: nonce → who took it, until when, and whether that job ended here. */
export class NonceMemory {
  private readonly m = new Map<string, { owner: string; until: number; done: boolean }>();

  get(nonce: string, now: number): { owner: string; done: boolean } | null {
    for (const [k, v] of this.m) if (v.until < now) this.m.delete(k);
    return this.m.get(nonce) ?? null;
  }

  put(nonce: string, owner: string, until: number): void {
    const had = this.m.get(nonce);
    this.m.set(nonce, { owner, until: Math.max(until, had?.until ?? 0), done: had?.done ?? false });
  }

  done(nonce: string): void {
    const had = this.m.get(nonce);
    if (had) had.done = true;
  }
}

/** How long past its envelope's expiry a nonce is remembered (clock skew between bot and worker). */
const KEEP_PAST_EXPIRY_MS = 10 * 60 * 1000;

export class NonceLedger {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly memory: NonceMemory,
  ) {}

  private key(nonce: string): string {
    return `${this.prefix}:nonce:${nonce}`;
  }

  /** `owner` names what the nonce authorises (incident, job kind, approval): only it may take it again. */
  async take(nonce: string, owner: string, expiresAt: number, now: number): Promise<Take> {
    const seen = this.memory.get(nonce, now);
    if (seen && (seen.owner !== owner || seen.done)) return 'replayed';
    const until = expiresAt + KEEP_PAST_EXPIRY_MS;
    // A TTL relative to this worker's clock (PX), never an absolute time on the Redis server's (PXAT):
    // a Redis clock ahead of the worker's would otherwise drop the record early and let a replay in.
    const ttl = Math.max(1000, until - now);
    const set = await this.redis.set(this.key(nonce), owner, 'PX', ttl, 'NX');
    if (set === 'OK') {
      this.memory.put(nonce, owner, until);
      return seen ? 'again' : 'fresh';
    }
    const holder = await this.redis.get(this.key(nonce));
    if (holder !== owner) return 'replayed';
    this.memory.put(nonce, owner, until);
    return 'again';
  }

  /** The job this nonce authorised has run to its end in this process: a later use here is a replay. */
  done(nonce: string): void {
    this.memory.done(nonce);
  }
}
