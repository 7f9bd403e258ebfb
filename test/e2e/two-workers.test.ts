/**
 * Scale story (one Redis, many workers): workers on several machines serve the same site queue, with BullMQ
 * on one Redis as the only distributed engine. Two real worker processes (`dist/src/main.js worker`, as
 * deployed) share one site's jobs; every job runs exactly once, and an unstick signals its holder once.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { stringify } from 'yaml';
import { runHealthCommand } from '../../src/cli/health-command.ts';
import { sitesOf } from '../../src/config/machines.ts';
import { queueName } from '../../src/queue/jobs.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { ROOT, spawnMain } from '../harness/dist.ts';
import { REDIS_URL, startStack, type Stack } from '../harness/stack.ts';

const HOSTS = ['kpro1', 'kpro2', 'kpro3', 'kpro4', 'kpro5', 'kpro6'];

interface WorkerProc {
  child: ChildProcess;
  output: () => string;
  gone: Promise<void>;
}

async function startWorker(env: Record<string, string>): Promise<WorkerProc> {
  const chunks: string[] = [];
  const child = await spawnMain(['worker'], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      LOG_LEVEL: 'warn',
      GPU_MEDIC_SSH_ACCESS: 'root-shell',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (c: Buffer) => chunks.push(c.toString()));
  child.stderr?.on('data', (c: Buffer) => chunks.push(c.toString()));
  const gone = new Promise<void>((r) => child.once('exit', () => r()));
  return { child, output: () => chunks.join(''), gone };
}

describe('two worker processes on one site queue', () => {
  let s: Stack;
  let dir: string;
  const procs: WorkerProc[] = [];
  let log: IncidentLog;

  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: HOSTS.map((id) => ({ id, gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 })),
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      noWorkers: true,
      env: { GPU_MEDIC_TERM_GRACE_SEC: '1', GPU_MEDIC_POLL_MS: '200' },
    });
    dir = mkdtempSync(join(tmpdir(), 'gpu-medic-two-workers-'));
    const inventoryPath = join(dir, 'inventory.yaml');
    const inventory = s.fleet.inventory();
    // A hung machine's read ends at this bound: long enough to hold a worker's slots, short for the test.
    inventory.defaults = { ...inventory.defaults, commandTimeoutSec: 4 };
    writeFileSync(inventoryPath, stringify(inventory));
    const env = {
      REDIS_URL: process.env.REDIS_URL ?? REDIS_URL,
      GPU_MEDIC_PREFIX: s.prefix,
      GPU_MEDIC_INVENTORY: inventoryPath,
      GPU_MEDIC_TERM_GRACE_SEC: '1',
      GPU_MEDIC_POLL_MS: '200',
      // The worker's signing key and the bot's public key, as a deployed worker has them (it acts only on
      // signed jobs).
      ...s.workerKeyEnv,
    };
    procs.push(
      ...(await Promise.all([
        startWorker({ ...env, GPU_MEDIC_HEALTH_FILE: join(dir, 'w1.json') }),
        startWorker({ ...env, GPU_MEDIC_HEALTH_FILE: join(dir, 'w2.json') }),
      ])),
    );
    log = new IncidentLog(s.redis, s.prefix);
    // Both processes serve the queue before any job exists (a late starter would find no work).
    for (const f of ['w1.json', 'w2.json']) {
      const until = Date.now() + 60_000;
      while (
        (await runHealthCommand(
          ['worker'],
          { GPU_MEDIC_HEALTH_FILE: join(dir, f) },
          new Writable({ write: (_c, _e, cb) => cb() }),
        )) !== 0
      ) {
        if (Date.now() > until)
          throw new Error(`worker ${f} never became healthy:\n${procs.map((p) => p.output()).join('\n')}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  });

  afterAll(async () => {
    for (const p of procs) p.child.kill('SIGTERM');
    await Promise.all(procs.map((p) => p.gone));
    await s?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('share the jobs: more jobs run at once than one process takes (8), and 24 status commands each run once, by one of the two', async () => {
    const pids = procs.map((p) => p.child.pid);
    const site = sitesOf(s.inventory)[0] ?? '';
    const queue = new Queue(queueName(site), { connection: s.redis, prefix: s.prefix });
    let mostActive = 0;
    let ids: (string | null)[] = [];
    try {
      // Every machine's nvidia-smi hangs, so each read holds its worker slot until the 4 s bound.
      for (const h of HOSTS) await s.fleet.setHang(h, true);
      const acks = await Promise.all(
        Array.from({ length: 24 }, (_, i) => s.slash(`status ${HOSTS[i % HOSTS.length]}`)),
      );
      ids = acks.map((a) => a.incidentId);
      expect(
        ids.every((id) => id !== null),
        acks.map((a) => a.ackText).join('\n'),
      ).toBe(true);
      const until = Date.now() + 30_000;
      while (mostActive <= 8 && Date.now() < until) {
        mostActive = Math.max(mostActive, (await queue.getJobCounts('active')).active ?? 0);
        await new Promise((r) => setTimeout(r, 50));
      }
    } finally {
      for (const h of HOSTS) await s.fleet.setHang(h, false);
      await queue.close();
    }
    // One worker process runs at most 8 jobs at a time: more than 8 active means both hold jobs.
    expect(mostActive).toBeGreaterThan(8);
    for (const id of ids)
      await s.threadOf(id as string, {
        timeoutMs: 60_000,
        done: (t) => /done|partial|failed|could not/i.test(t[0]?.text ?? ''),
      });

    const byWorker = new Map<string, number>();
    for (const id of ids) {
      const events: AnyLoggedEvent[] = await log.events(id as string);
      const started = events.filter((e) => e.type === 'started');
      const finished = events.filter((e) => e.type === 'finished');
      expect(started, `incident ${id}`).toHaveLength(1);
      expect(finished, `incident ${id}`).toHaveLength(1);
      const worker = started[0]?.type === 'started' ? started[0].worker : '';
      const pid = Number(worker.split(':')[1]);
      expect(pids).toContain(pid);
      byWorker.set(String(pid), (byWorker.get(String(pid)) ?? 0) + 1);
    }
    expect([...byWorker.values()].reduce((a, b) => a + b, 0)).toBe(24);
    // Each worker blocks on the queue while idle; with 24 jobs at once, both get work.
    expect(byWorker.size, JSON.stringify([...byWorker])).toBe(2);
    // Each machine was read exactly as many times as it was asked for: 4 status commands each,
    // one `--query-gpu` per read (no job ran twice on another worker).
    for (const h of HOSTS) {
      const reads = s.fleet.commandLog(h).filter((c) => c.via === 'tool' && /^nvidia-smi .*--query-gpu=/.test(c.cmd));
      expect(reads, h).toHaveLength(4);
    }
  });

  it('an unstick with both processes running signals its holder once, and ends recovered', async () => {
    const h = await s.fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 30_000 }], title: 'python3 train.py' });
    const r = await s.slash('unstick ct129 hung trainer');
    expect(r.incidentId, r.ackText).not.toBeNull();
    const thread = await s.threadOf(r.incidentId as string, {
      timeoutMs: 60_000,
      done: (t) => /Recovered|stuck/i.test(t[0]?.text ?? ''),
    });
    expect(thread[0]?.text).toMatch(/Recovered/);
    const mine = s.fleet.signals().filter((x) => x.hostPid === h.hostPid);
    expect(mine.filter((x) => x.signal === 'SIGTERM')).toHaveLength(1);
    const events = await log.events(r.incidentId as string);
    expect(events.filter((e) => e.type === 'started')).toHaveLength(1);
  });
});
