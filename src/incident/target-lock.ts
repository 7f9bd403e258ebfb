import type { Redis } from 'ioredis';
import { z } from 'zod';

const Holder = z.object({ incidentId: z.string(), requester: z.string(), since: z.string() });
export type LockHolder = z.infer<typeof Holder>;

const RELEASE = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, h = pcall(cjson.decode, raw)
if ok and type(h) == 'table' and h['incidentId'] == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0
`;

/**
 * One mutating operation per target at a time. The lock names its holder so Slack can say who
 * holds it and since when; it expires on its own so a lost worker cannot hold a GPU hostage.
 */
export class TargetLock {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private key(machineId: string): string {
    return `${this.prefix}:lock:${machineId}`;
  }

  async acquire(
    machineId: string,
    holder: LockHolder,
    ttlMs: number,
  ): Promise<{ ok: true } | { ok: false; holder: LockHolder | null }> {
    const res = await this.redis.set(this.key(machineId), JSON.stringify(holder), 'PX', ttlMs, 'NX');
    if (res === 'OK') return { ok: true };
    return { ok: false, holder: await this.holder(machineId) };
  }

  async holder(machineId: string): Promise<LockHolder | null> {
    const raw = await this.redis.get(this.key(machineId));
    if (raw === null) return null;
    try {
      const h = Holder.safeParse(JSON.parse(raw));
      return h.success ? h.data : null;
    } catch {
      return null;
    }
  }

  /** Releases only the lock this incident holds. */
  async release(machineId: string, incidentId: string): Promise<boolean> {
    return (await this.redis.eval(RELEASE, 1, this.key(machineId), incidentId)) === 1;
  }
}
