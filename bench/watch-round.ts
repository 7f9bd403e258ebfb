/**
 * `npm run bench -- --watch [--rounds N]`: the cost of ONE watchdog round (one every few minutes) over 50 and
 * over 200 fleet machines, measured side by side in one run (rounds interleaved 50, 200, 50, 200, …):
 *
 * - Redis commands per round: `INFO commandstats` before and after, on a private redis-server this
 *   script starts (no other client talks to it, so the delta is the round's alone; INFO excluded);
 * - SSH per round: exec sessions (one line per command in the fleet machines' command logs, which
 *   sshd's ForceCommand wrapper writes) and new SSH connections (ESTABLISHED client sockets to the
 *   fleet's sshd ports in /proc/net/tcp; the executor keeps connections open between rounds);
 * - wall time of the round (runWatchJob, the very job a worker runs).
 *
 * The round is the worker's (workers/watchdog.ts runWatchJob with the real SSH executor, the real
 * WatchRoundStore and SnoozeStore), against the real fleet (sshd per host, fake nvidia-smi, kernel
 * log). Every 10th host has one GPU holder, so the holder-state part of the read has work to do.
 * Cold: one round per size as a just-started worker does it (empty watch state, its own executor
 * with no connection yet). Steady: every connection pooled (opened 20 at a time), the state stored
 * by one uncounted round per size, then N rounds per size, interleaved. Prints one JSON object on
 * stdout; progress on stderr. See bench/README.md.
 *
 * `--cpu-prof [DIR]`: V8's CPU profiler (node:inspector, in this process, where the round runs) on
 * during each counted steady round only, with the logger at `info` as the worker's (to /dev/null);
 * the profiles are written to DIR and their self time summarised by category in the JSON (`cpuProfile`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';
import pino from 'pino';
import { Redis } from 'ioredis';
import { validateInventory } from '../src/config/load-inventory.ts';
import type { Inventory } from '../src/config/inventory.ts';
import { routeFor } from '../src/config/machines.ts';
import { queryGpus } from '../src/agent-grammar/templates/snapshot-commands.ts';
import { createSshExecutor } from '../src/ssh/executor.ts';
import type { Executor } from '../src/ssh/types.ts';
import { SnoozeStore } from '../src/watch-store/snooze-store.ts';
import { WatchRoundStore } from '../src/watch-store/watch-round-store.ts';
import { DEFAULT_WATCH_SETTINGS } from '../src/watchdog/judge.ts';
import { runWatchJob, type WatchdogDeps } from '../workers/watchdog.ts';
import { createLogger } from '../src/logger.ts';
import { captureLogger } from '../test/harness/capture-logger.ts';
import { startFleet } from '../test/harness/fleet/index.ts';
import type { Fleet } from '../test/harness/fleet/types.ts';
import { type CpuProfile, summarizeCpuProfiles } from './cpu.ts';
import { freePort } from './procs.ts';
import { round as r1, summarize, type Summary } from './stats.ts';

/** `--sizes 2,6` for a quick try; default 50 and 200. */
const SIZES: readonly number[] = process.argv.includes('--sizes')
  ? (process.argv[process.argv.indexOf('--sizes') + 1] ?? '')
      .split(',')
      .map(Number)
      .filter((n) => n > 0)
  : [50, 200];
const ROUNDS = Math.max(2, Number(process.argv[process.argv.indexOf('--rounds') + 1]) || 4);
const ALERTS_CHANNEL = 'C0ALERTS01';
const PROF_AT = process.argv.indexOf('--cpu-prof');
/** Where `--cpu-prof` writes its profiles, or null: no profiling. */
const PROF_DIR =
  PROF_AT < 0
    ? null
    : ((process.argv[PROF_AT + 1]?.startsWith('/') ? process.argv[PROF_AT + 1] : undefined) ??
      `/tmp/gpu-medic-watch-prof-${Date.now()}`);

const t0 = performance.now();
const progress = (msg: string): void =>
  void process.stderr.write(`[watch-bench ${((performance.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function startPrivateRedis(): Promise<{ url: string; proc: ChildProcess }> {
  const port = await freePort();
  const proc = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  const url = `redis://127.0.0.1:${port}`;
  const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  probe.on('error', () => undefined);
  for (let i = 0; i < 100; i++) {
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      return { url, proc };
    } catch {
      probe.disconnect();
      await sleep(100);
    }
  }
  proc.kill('SIGKILL');
  throw new Error('private redis-server did not start');
}

/** Calls per command from INFO commandstats. */
async function commandStats(redis: Redis): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of (await redis.info('commandstats')).split('\n')) {
    const m = /^cmdstat_([a-z|_-]+):calls=(\d+)/.exec(line.trim());
    if (m?.[1] && m[2]) out.set(m[1], Number(m[2]));
  }
  return out;
}

/** ESTABLISHED TCP sockets whose remote port is one of `ports` (the client side of SSH connections to the fleet). */
function sshClientSockets(ports: ReadonlySet<number>): number {
  let n = 0;
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      const rem = cols[2];
      if (cols[3] !== '01' || rem === undefined) continue;
      const port = parseInt(rem.slice(rem.lastIndexOf(':') + 1), 16);
      if (ports.has(port)) n++;
    }
  }
  return n;
}

interface RoundFigures {
  size: number;
  cold: boolean;
  wallMs: number;
  redisCommands: number;
  redisByCommand: Record<string, number>;
  sshSessions: number;
  sshNewConnections: number;
  machines: number;
  /** This process's CPU (user + system) during the round per machine read, ms: the round runs here, the fleet in processes of its own. */
  cpuMsPerMachine: number;
  /** Alerts the round raised, by kind (an idle fleet raises none once read). */
  raised: Record<string, number>;
}

/** Runs the watchdog-round bench and prints its JSON (bench/run.ts calls it for `--watch`). */
export async function watchBench(): Promise<void> {
  progress('starting a private redis-server');
  const redisServer = await startPrivateRedis();
  const hosts = Math.max(...SIZES);
  progress(`starting a fleet of ${hosts} hosts (one sshd each)`);
  let fleet: Fleet | null = null;
  const redis = new Redis(redisServer.url);
  try {
    fleet = await startFleet({
      hosts: Array.from({ length: hosts }, (_, i) => ({
        id: `kpro${i + 1}`,
        gpus: 8,
        ramTotalGiB: 449,
        ramUsedGiB: 40,
      })),
    });
    for (let i = 0; i < hosts; i += 10)
      await fleet.spawnHolder(`kpro${i + 1}`, { gpus: [{ index: 0, mib: 40_000 }], title: 'python3 train.py' });
    const v = validateInventory(fleet.inventory());
    if (!v.inventory) throw new Error(`fleet inventory invalid: ${JSON.stringify(v.problems)}`);
    const base = v.inventory;
    const ports = new Set(base.hosts.map((h) => h.port));
    // Profiling: the worker's log lines are part of its CPU, so they are written (to /dev/null) at its level.
    const logger =
      PROF_DIR === null
        ? captureLogger('watch-bench', 'silent').logger
        : createLogger({
            name: 'worker',
            level: 'info',
            destination: pino.destination({ dest: '/dev/null', sync: true }),
          });
    const profiler = PROF_DIR === null ? null : new Session();
    const profiles: CpuProfile[] = [];
    if (profiler !== null) {
      profiler.connect();
      await profiler.post('Profiler.enable');
      await profiler.post('Profiler.setSamplingInterval', { interval: 200 });
    }
    // One inventory (and Redis prefix) per size: the first N hosts on one site, the round's.
    const inventoryOf = (n: number): Inventory => {
      const inv: Inventory = structuredClone(base);
      inv.hosts = inv.hosts.map((h, i) => ({ ...h, site: i < n ? `w${n}` : 'idle' }));
      return inv;
    };
    const newExecutor = () =>
      createSshExecutor({ access: 'root-shell', connectTimeoutMs: base.defaults.connectTimeoutSec * 1000 });
    const depsOf = (n: number, executor: Executor): WatchdogDeps => {
      const prefix = `bw${n}`;
      return {
        inventory: inventoryOf(n),
        executor,
        store: new WatchRoundStore(redis, prefix, ALERTS_CHANNEL),
        snoozes: new SnoozeStore(redis, prefix),
        settings: { ...DEFAULT_WATCH_SETTINGS },
        now: () => new Date(),
        commandTimeoutMs: base.defaults.commandTimeoutSec * 1000,
        logger,
      };
    };
    const machines = [...Array(hosts).keys()].map((i) => `kpro${i + 1}`);
    const sessions = (): number =>
      machines.reduce((a, m) => a + (fleet?.commandLog(m).filter((c) => c.via === 'ssh').length ?? 0), 0);
    const figures: RoundFigures[] = [];
    const measure = async (n: number, executor: Executor, cold: boolean, record = true): Promise<void> => {
      const profile = profiler !== null && record && !cold;
      const d = depsOf(n, executor);
      const before = await commandStats(redis);
      const s0 = sessions();
      const c0 = sshClientSockets(ports);
      const start = performance.now();
      if (profile) await profiler.post('Profiler.start');
      const cpu0 = process.cpuUsage();
      const results = await runWatchJob({ kind: 'watch', site: `w${n}` }, d);
      const cpu = process.cpuUsage(cpu0);
      if (profile) profiles.push(((await profiler.post('Profiler.stop')) as { profile: CpuProfile }).profile);
      const wallMs = performance.now() - start;
      const c1 = sshClientSockets(ports);
      const s1 = sessions();
      const after = await commandStats(redis);
      const byCommand: Record<string, number> = {};
      for (const [cmd, calls] of after) {
        const delta = calls - (before.get(cmd) ?? 0) - (cmd === 'info' ? 1 : 0);
        if (delta > 0) byCommand[cmd] = delta;
      }
      const f: RoundFigures = {
        size: n,
        cold,
        wallMs: r1(wallMs),
        redisCommands: Object.values(byCommand).reduce((a, b) => a + b, 0),
        redisByCommand: byCommand,
        sshSessions: s1 - s0,
        sshNewConnections: Math.max(0, c1 - c0),
        machines: results.length,
        cpuMsPerMachine: r1((cpu.user + cpu.system) / 1000 / Math.max(1, results.length)),
        raised: results
          .flatMap((x) => x.changes.filter((c) => c.type === 'raise').map((c) => c.alert.kind))
          .reduce<Record<string, number>>((a, k) => {
            a[k] = (a[k] ?? 0) + 1;
            return a;
          }, {}),
      };
      if (record) figures.push(f);
      const firstRaise = results.flatMap((x) => x.changes).find((c) => c.type === 'raise');
      progress(
        `${record ? '' : '(not counted) '}${cold ? 'cold' : 'steady'} round over ${n}: ${f.wallMs} ms, ${f.redisCommands} Redis commands, ${f.sshSessions} SSH sessions, ${f.sshNewConnections} new SSH connections, ${f.cpuMsPerMachine} ms CPU a machine, raised ${JSON.stringify(f.raised)}${firstRaise ? ` (e.g. ${firstRaise.alert.machineId}: ${firstRaise.alert.sentence})` : ''}`,
      );
    };
    // Cold: a worker just started (empty watch state, no pooled connection): each size on its own executor.
    for (const n of SIZES) {
      const ex = newExecutor();
      await measure(n, ex, true);
      await ex.close();
      await redis.eval(
        `for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end return 1`,
        0,
        `bw${n}:*`,
      );
    }
    // Steady: connections pooled (opened 20 at a time first), state stored by one uncounted round.
    const executor = newExecutor();
    for (let i = 0; i < base.hosts.length; i += 20)
      await Promise.all(
        base.hosts.slice(i, i + 20).map(async (h) => {
          const route = routeFor(base, h.id);
          // A command the agent runs (a bare `true` is refused before any connection is opened).
          if (route) await executor.exec(route, queryGpus({ timeoutMs: 10_000 })).catch(() => undefined);
        }),
      );
    for (const n of SIZES) await measure(n, executor, false, false);
    for (let k = 0; k < ROUNDS; k++) for (const n of SIZES) await measure(n, executor, false);
    const per = (n: number, cold: boolean) => figures.filter((f) => f.size === n && f.cold === cold);
    const summary = (xs: number[]): Summary => summarize(xs);
    const out = {
      bench: 'watchdog round',
      at: new Date().toISOString(),
      machine: {
        cores: (await import('node:os')).cpus().length,
        load: (await import('node:os')).loadavg().map((x) => r1(x)),
      },
      rounds: ROUNDS,
      hostsWithHolder: Math.ceil(hosts / 10),
      sizes: Object.fromEntries(
        SIZES.map((n) => {
          const cold = per(n, true)[0];
          const steady = per(n, false);
          return [
            n,
            {
              cold: cold ?? null,
              steady: {
                wallMs: summary(steady.map((f) => f.wallMs)),
                redisCommands: summary(steady.map((f) => f.redisCommands)),
                redisCommandsPerMachine: r1(
                  steady.reduce((a, f) => a + f.redisCommands, 0) / Math.max(1, steady.length) / n,
                ),
                sshSessions: summary(steady.map((f) => f.sshSessions)),
                sshSessionsPerMachine: r1(
                  steady.reduce((a, f) => a + f.sshSessions, 0) / Math.max(1, steady.length) / n,
                ),
                sshNewConnections: summary(steady.map((f) => f.sshNewConnections)),
                cpuMsPerMachine: summary(steady.map((f) => f.cpuMsPerMachine)),
                // One core, the default interval (180 s): how many machines' steady rounds it has CPU for.
                machinesPerCoreAt180s: Math.floor(
                  180_000 / Math.max(0.001, summary(steady.map((f) => f.cpuMsPerMachine)).median),
                ),
                redisByCommand: steady[steady.length - 1]?.redisByCommand ?? {},
              },
            },
          ];
        }),
      ),
      ...(PROF_DIR === null ? {} : { cpuProfile: writeProfiles(PROF_DIR, profiles) }),
      figures,
    };
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
    await executor.close();
    profiler?.disconnect();
  } finally {
    redis.disconnect();
    await fleet?.stop();
    redisServer.proc.kill('SIGKILL');
  }
}

/** Writes each steady round's profile to `dir` (open them in Chrome DevTools) and summarises them all. */
function writeProfiles(dir: string, profiles: readonly CpuProfile[]): object {
  mkdirSync(dir, { recursive: true });
  profiles.forEach((p, i) => writeFileSync(join(dir, `steady-round-${i + 1}.cpuprofile`), JSON.stringify(p)));
  return { dir, rounds: profiles.length, ...summarizeCpuProfiles(profiles) };
}
