/**
 * A private Redis Sentinel set for the failover test (the shared Redis on :6379 is never touched):
 * a primary and a replica (`redis-server --port … --replicaof …`, append-only everysec as in
 * docker-compose.yml) and three sentinels (`redis-server <conf> --sentinel`, quorum 2), every one on
 * a port from freePort, each with its own dir. `killPrimary` SIGKILLs whichever node the sentinels
 * currently name primary; `waitForFailover` waits (bounded) until they name another.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../../harness/sshd.ts';
import { pollUntil } from './figures.ts';

const SENTINEL_NAME = 'gpumedic-test';

interface Node {
  port: number;
  child: ChildProcess;
  exited: Promise<void>;
  alive: boolean;
}

export interface SentinelSet {
  /** `127.0.0.1:port,…` for REDIS_SENTINELS. */
  sentinels: string;
  name: string;
  /** Port of the node the sentinels name primary now. */
  primaryPort(): Promise<number>;
  /** SIGKILLs the current primary (no final fsync: what everysec and async replication may lose, lost). Returns its port. */
  killPrimary(): Promise<number>;
  /** Waits until the sentinels name a primary other than `oldPort` that answers as master. Returns the ms it took. */
  waitForFailover(oldPort: number, timeoutMs: number): Promise<number>;
  destroy(): Promise<void>;
}

async function answers(port: number, timeoutMs = 10_000): Promise<void> {
  const ok = await pollUntil(
    async () => {
      const r = new Redis({
        port,
        host: '127.0.0.1',
        lazyConnect: true,
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
      });
      r.on('error', () => undefined);
      try {
        await r.connect();
        return (await r.ping()) === 'PONG';
      } catch {
        return false;
      } finally {
        r.disconnect();
      }
    },
    timeoutMs,
    50,
  );
  if (!ok) throw new Error(`redis on ${port} did not answer`);
}

async function ask<T>(port: number, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  r.on('error', () => undefined);
  try {
    await r.connect();
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

export async function startSentinelSet(): Promise<SentinelSet> {
  const dir = await mkdtemp(join(tmpdir(), 'gpu-medic-sentinel-'));
  const nodes: Node[] = [];
  const start = (args: string[]): Node => {
    const child = spawn('redis-server', args, { stdio: 'ignore' });
    const node: Node = { port: 0, child, exited: new Promise((r) => child.once('exit', () => r())), alive: true };
    void node.exited.then(() => {
      node.alive = false;
    });
    nodes.push(node);
    return node;
  };
  const dataNode = async (name: string, replicaOf?: number): Promise<Node> => {
    const port = await freePort();
    const d = join(dir, name);
    await mkdir(d, { recursive: true });
    const n = start([
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      d,
      '--appendonly',
      'yes',
      '--appendfsync',
      'everysec',
      '--maxmemory-policy',
      'noeviction',
      '--save',
      '',
      ...(replicaOf ? ['--replicaof', '127.0.0.1', String(replicaOf)] : []),
    ]);
    n.port = port;
    await answers(port);
    return n;
  };
  const primary = await dataNode('a');
  const replica = await dataNode('b', primary.port);
  // The replica has synced once before the sentinels start watching.
  const synced = await pollUntil(
    () => ask(replica.port, async (r) => /master_link_status:up/.test(await r.info('replication'))),
    15_000,
    100,
  );
  if (!synced) throw new Error('replica never synced');
  const sentinelPorts: number[] = [];
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const conf = join(dir, `sentinel-${i}.conf`);
    await writeFile(
      conf,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor ${SENTINEL_NAME} 127.0.0.1 ${primary.port} 2`,
        `sentinel down-after-milliseconds ${SENTINEL_NAME} 1000`,
        `sentinel failover-timeout ${SENTINEL_NAME} 5000`,
        `sentinel parallel-syncs ${SENTINEL_NAME} 1`,
        '',
      ].join('\n'),
    );
    const n = start([conf, '--sentinel']);
    n.port = port;
    sentinelPorts.push(port);
    await answers(port);
  }
  const primaryPort = async (): Promise<number> => {
    for (const p of sentinelPorts) {
      try {
        const addr = await ask(
          p,
          (r) => r.call('SENTINEL', 'get-master-addr-by-name', SENTINEL_NAME) as Promise<[string, string] | null>,
        );
        if (addr) return Number(addr[1]);
      } catch {
        /* ask the next one */
      }
    }
    throw new Error('no sentinel names a primary');
  };
  // Every sentinel knows the replica (and the others) before anything is killed.
  const ready = await pollUntil(
    async () => {
      for (const p of sentinelPorts) {
        const [replicas, sentinels] = await ask(p, async (r) => [
          (await r.call('SENTINEL', 'replicas', SENTINEL_NAME)) as unknown[],
          (await r.call('SENTINEL', 'sentinels', SENTINEL_NAME)) as unknown[],
        ]);
        if (replicas.length < 1 || sentinels.length < 2) return false;
      }
      return true;
    },
    20_000,
    200,
  );
  if (!ready) throw new Error('sentinels did not discover each other and the replica');
  return {
    sentinels: sentinelPorts.map((p) => `127.0.0.1:${p}`).join(','),
    name: SENTINEL_NAME,
    primaryPort,
    async killPrimary() {
      const port = await primaryPort();
      const n = nodes.find((x) => x.port === port && x.alive);
      if (!n) throw new Error(`primary on ${port} is not one of ours or already dead`);
      n.child.kill('SIGKILL');
      await n.exited;
      return port;
    },
    async waitForFailover(oldPort, timeoutMs) {
      const t0 = Date.now();
      const ok = await pollUntil(
        async () => {
          const p = await primaryPort().catch(() => oldPort);
          if (p === oldPort) return false;
          return ask(p, async (r) => /role:master/.test(await r.info('replication'))).catch(() => false);
        },
        timeoutMs,
        100,
      );
      if (!ok) throw new Error(`no failover from ${oldPort} within ${timeoutMs} ms`);
      return Date.now() - t0;
    },
    async destroy() {
      for (const n of nodes) if (n.alive) n.child.kill('SIGKILL');
      await Promise.all(nodes.map((n) => n.exited));
      await rm(dir, { recursive: true, force: true });
    },
  };
}
