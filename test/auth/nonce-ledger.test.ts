/**
 * A nonce's record in Redis lives for a time measured on the worker's own clock, never until an
 * absolute time read by the Redis server's clock: with the worker's clock a day behind Redis's, a
 * nonce taken now is still held (and its replay refused) for its envelope's life and the margin.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { NonceLedger, NonceMemory } from '../../src/auth/nonce-ledger.ts';

describe('nonce records use relative TTLs', () => {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const prefix = `t${randomBytes(4).toString('hex')}`;
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  it("a worker clock a day behind Redis's: the record lives its 15 minutes, and another worker's replay is refused", async () => {
    const now = Date.now() - 86_400_000;
    const first = new NonceLedger(redis, prefix, new NonceMemory());
    expect(await first.take('n-behind', 'inc_a:request', now + 300_000, now)).toBe('fresh');
    const ttl = await redis.pttl(`${prefix}:nonce:n-behind`);
    expect(ttl).toBeGreaterThan(14 * 60_000);
    expect(ttl).toBeLessThanOrEqual(15 * 60_000);
    // Another worker process (its own memory): only Redis can tell it the nonce was used.
    const other = new NonceLedger(redis, prefix, new NonceMemory());
    expect(await other.take('n-behind', 'inc_b:request', now + 300_000, now + 1000)).toBe('replayed');
  });

  it("the worker's and Redis's clocks agree: the same 15 minutes", async () => {
    const now = Date.now();
    const ledger = new NonceLedger(redis, prefix, new NonceMemory());
    expect(await ledger.take('n-same', 'inc_c:request', now + 300_000, now)).toBe('fresh');
    const ttl = await redis.pttl(`${prefix}:nonce:n-same`);
    expect(ttl).toBeGreaterThan(14 * 60_000);
    expect(ttl).toBeLessThanOrEqual(15 * 60_000);
  });
});
