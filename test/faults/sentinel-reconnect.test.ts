/**
 * The cause of the failover test's flake (the bot answered "queue unavailable" for the 30 s after
 * the sentinels had switched): ioredis kept a closed connection's failover detector subscribed to
 * the sentinels' `+switch-master`. When it fired while the client, reconnecting, was still asking
 * a sentinel for the primary, it aborted that attempt and the client ended for good (status `end`,
 * "Connection is closed.", no more retries). On a loaded machine that question takes long enough
 * for the message to land inside it. Here it lands there every time: the first sentinel the client
 * asks sits behind a TCP forwarder that holds new connections until the failover is over.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { connectRedis } from '../../src/redis/connection.ts';
import { pollUntil } from './lib/figures.ts';
import { startSentinelSet, type SentinelSet } from './lib/redis-sentinel.ts';

/** Forwards to 127.0.0.1:`port`; while holding, new connections are accepted and left unanswered (a slow sentinel). */
async function holdingForwarder(port: number) {
  let holding = false;
  const held: Socket[] = [];
  const all = new Set<Socket>();
  const forward = (c: Socket): void => {
    const up = createConnection({ host: '127.0.0.1', port });
    all.add(up);
    const end = (): void => {
      c.destroy();
      up.destroy();
    };
    for (const s of [c, up]) {
      s.on('error', end);
      s.on('close', end);
    }
    c.pipe(up);
    up.pipe(c);
  };
  const server: Server = createServer((c) => {
    all.add(c);
    if (holding) held.push(c);
    else forward(c);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const address = server.address();
  return {
    port: typeof address === 'object' && address !== null ? address.port : 0,
    hold: () => {
      holding = true;
    },
    held: () => held.length,
    release: () => {
      holding = false;
      for (const c of held.splice(0)) forward(c);
    },
    async close() {
      for (const s of all) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** A subscriber to one sentinel's `+switch-master`; `seen()` once it has arrived. */
async function switchWatch(port: number) {
  const r = new Redis({ port, host: '127.0.0.1', retryStrategy: () => null, connectionName: 'probe' });
  r.on('error', () => undefined);
  let seen = false;
  r.on('message', (channel: string) => {
    if (channel === '+switch-master') seen = true;
  });
  await r.subscribe('+switch-master');
  return { seen: () => seen, close: () => r.disconnect() };
}

/** Subscribed clients on a sentinel other than our probe: the client's failover detector. */
async function detectorSubscribed(port: number): Promise<boolean> {
  const r = new Redis({ port, host: '127.0.0.1', retryStrategy: () => null, lazyConnect: true });
  r.on('error', () => undefined);
  try {
    await r.connect();
    const list = String(await r.call('CLIENT', 'LIST'));
    return list.split('\n').some((l) => / sub=1 /.test(l) && !/ name=probe /.test(l));
  } catch {
    return false;
  } finally {
    r.disconnect();
  }
}

describe('Redis client through Sentinel while the primary fails over', () => {
  let set: SentinelSet | null = null;
  const cleanups: Array<() => unknown> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    await set?.destroy();
    set = null;
  });

  it('a +switch-master that arrives while it is asking a sentinel for the primary does not end it: it reaches the new primary', async () => {
    set = await startSentinelSet();
    const [first, ...others] = set.sentinels.split(',').map((s) => Number(s.split(':')[1]));
    if (first === undefined || others.length < 2) throw new Error(`sentinels: ${set.sentinels}`);
    const slow = await holdingForwarder(first);
    cleanups.push(() => slow.close());
    const watches = await Promise.all(others.map((p) => switchWatch(p)));
    for (const w of watches) cleanups.push(() => w.close());
    // The bot's command connection (no offline queue, one retry), asking the slow sentinel first.
    const client = connectRedis(
      {
        REDIS_URL: 'redis://127.0.0.1:6379/0',
        REDIS_SENTINELS: [`127.0.0.1:${slow.port}`, ...others.map((p) => `127.0.0.1:${p}`)],
        REDIS_SENTINEL_NAME: set.name,
      },
      { enableOfflineQueue: false, maxRetriesPerRequest: 1 },
    );
    cleanups.push(() => client.disconnect());
    const statuses: string[] = [];
    client.on('error', () => undefined);
    client.on('end', () => statuses.push('end'));
    const primary = await set.primaryPort();
    expect(await pollUntil(async () => (await client.ping().catch(() => '')) === 'PONG', 20_000, 100)).toBe(true);
    expect(String(((await client.config('GET', 'port')) as string[])[1])).toBe(String(primary));
    // Its failover detector listens on the other sentinels.
    for (const p of others) expect(await pollUntil(() => detectorSubscribed(p), 10_000, 100)).toBe(true);

    slow.hold();
    const oldPort = await set.killPrimary();
    // The client reconnects: its question to the first sentinel hangs in the forwarder.
    expect(await pollUntil(() => slow.held() > 0, 10_000, 20)).toBe(true);
    await set.waitForFailover(oldPort, 30_000);
    // Every other sentinel has announced the switch: the client's detector had it too.
    expect(await pollUntil(() => watches.every((w) => w.seen()), 30_000, 50)).toBe(true);
    slow.release();

    const newPrimary = await set.primaryPort();
    expect(newPrimary).not.toBe(oldPort);
    const back = await pollUntil(async () => (await client.ping().catch(() => '')) === 'PONG', 20_000, 100);
    expect({ back, statuses, status: client.status }).toEqual({ back: true, statuses: [], status: 'ready' });
    expect(String(((await client.config('GET', 'port')) as string[])[1])).toBe(String(newPrimary));
  }, 120_000);
});
