/**
 * A private redis-server for the restart tests (the shared one on :6379 is never touched):
 * own port, own dir, append-only persistence with the same settings as docker-compose.yml.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { freePort } from '../../harness/sshd.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

export interface PrivateRedis {
  url: string;
  port: number;
  dir: string;
  /** True while the server process runs. */
  running(): boolean;
  /** `how: 'kill'` is SIGKILL (no final fsync: at most ~1 s of writes lost by design); 'term' is a clean SIGTERM. */
  stop(how?: 'term' | 'kill'): Promise<void>;
  /** Starts again on the same port and dir, reloading the append-only file. */
  start(): Promise<void>;
  /** Stops for good and removes the dir. */
  destroy(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `port`: a given one (a test that points a process at it before it runs); `args`: extra redis-server options; `probePassword`: the one the readiness probe logs in with. */
export async function startPrivateRedis(
  o: { port?: number; args?: readonly string[]; probePassword?: string } = {},
): Promise<PrivateRedis> {
  const dir = await mkdtemp(join(tmpdir(), 'gpu-medic-redis-'));
  const port = o.port ?? (await freePort());
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();

  const start = async (): Promise<void> => {
    if (child) return;
    const c = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--appendonly',
        'yes',
        '--appendfsync',
        'everysec',
        '--maxmemory-policy',
        'noeviction',
        '--save',
        '',
        '--protected-mode',
        'yes',
        ...(o.args ?? []),
      ],
      { stdio: 'ignore' },
    );
    child = c;
    exited = new Promise((r) => c.once('exit', () => r()));
    void exited.then(() => {
      if (child === c) child = null;
    });
    // Ready when it answers PING (bounded: 10 s).
    const until = Date.now() + 10_000;
    for (;;) {
      const probe = new Redis(url, {
        lazyConnect: true,
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
        ...(o.probePassword ? { password: o.probePassword } : {}),
      });
      probe.on('error', () => undefined);
      try {
        await probe.connect();
        if ((await probe.ping()) === 'PONG') {
          probe.disconnect();
          return;
        }
      } catch {
        // not up yet
      }
      probe.disconnect();
      if (Date.now() > until) throw new Error(`redis-server on ${port} did not start`);
      await sleep(50);
    }
  };

  const stop = async (how: 'term' | 'kill' = 'term'): Promise<void> => {
    const c = child;
    if (!c || c.pid === undefined) return;
    c.kill(how === 'kill' ? 'SIGKILL' : 'SIGTERM');
    await Promise.race([exited, sleep(10_000)]);
    child = null;
  };

  await start();
  return {
    url,
    port,
    dir,
    running: () => child !== null,
    stop,
    start,
    async destroy() {
      await stop('kill');
      await rm(dir, { recursive: true, force: true });
    },
  };
}
