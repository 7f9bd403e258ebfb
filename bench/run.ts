/**
 * `npm run bench [-- --quick | --watch]`: the three latencies on-call feels, measured on this machine
 * against the real stack (Redis, bot and worker processes, a real-sshd fleet, fake Slack), each
 * next to a baseline measured in the same run, interleaved, so a ratio holds on a noisy machine.
 * Prints one JSON object on stdout; progress goes to stderr. See bench/README.md.
 */
import { removePrefix } from '../test/harness/redis-prefix.ts';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { InventoryInput } from '../src/config/inventory.ts';
import {
  fuserDevices,
  hostMemory,
  queryComputeApps,
  queryGpus,
} from '../src/agent-grammar/templates/snapshot-commands.ts';
import { machineRead } from '../src/agent-grammar/templates/machine-read.ts';
import { shellJoin } from '../src/text/shell-quote.ts';
import type { CommandSpec } from '../src/agent-grammar/command-spec.ts';
import { startFleet } from '../test/harness/fleet/index.ts';
import type { Fleet, FleetProcess } from '../test/harness/fleet/index.ts';
import { startFakeSlack, type FakeSlack, type StoredMessage } from '../test/harness/slack/fake-slack-api.ts';
import { sendAck } from './send-ack.ts';
import { muxSessionCpu, processCpuMs, rssSplitKiB, scrapeMemory } from './cpu.ts';
import { freePort, startRole, type RoleProcess } from './procs.ts';
import { percentile, ratio, round, summarize, type Summary } from './stats.ts';

const HERE = resolve(fileURLToPath(new URL('.', import.meta.url)));
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const QUICK = process.argv.includes('--quick');

const CFG = QUICK
  ? {
      hosts: 50,
      firstTableRuns: 3,
      fanoutRuns: 1,
      ackRuns: 2,
      ackSerial: 5,
      ackSettleMs: 500,
      unstickRuns: 1,
      unstickWarmup: false,
    }
  : {
      hosts: 200,
      firstTableRuns: 9,
      fanoutRuns: 3,
      // 5 runs a level let the same build's ratio swing 1.3-2.1 between runs of one morning (a shared machine's noise):
      // 15 interleaved pairs make a 1.2x target tell from that noise.
      ackRuns: 15,
      // At 1 at a time a run's p99 of 20 commands was its slowest one: 100 give it a tail to rank.
      ackSerial: 100,
      ackSettleMs: 1500,
      unstickRuns: 3,
      unstickWarmup: true,
    };
const FANOUT = QUICK ? [1, 50] : [1, 50, 200];
/** `status all` over the most machines also runs with two worker processes on the same site queue. */
const TWO_WORKERS = `status${CFG.hosts}x2`;
const ACK_LEVELS = [1, 50, 200];
const ACK_LIMIT_MS = 3000;
const GRACE_SEC = 1;
const STATUS_TARGET = 'kpro1';
const UNSTICK_HOST = 'kpro5';
const UNSTICK_CT = 'ct129';

const started = performance.now();
function progress(msg: string): void {
  process.stderr.write(`[bench ${((performance.now() - started) / 1000).toFixed(1)}s] ${msg}\n`);
}

// ---------------------------------------------------------------------------------------------
// The system under test: one fleet, several bot/worker process pairs (each its own inventory
// and Redis prefix), one fake Slack.

interface Pair {
  name: string;
  prefix: string;
  secret: string;
  eventsUrl: string;
  bot: RoleProcess;
  worker: RoleProcess | null;
}

let channelSeq = 0;
/** A fresh channel per measurement: the fake's lookups stay small and nothing is mixed up. */
function newChannel(): string {
  channelSeq += 1;
  return `C0BENCH${String(channelSeq).padStart(5, '0')}`;
}

interface SlashResult {
  ms: number;
  status: number;
  ackText: string;
  incidentId: string | null;
}

async function slash(slack: FakeSlack, p: Pair, text: string, channel: string): Promise<SlashResult> {
  const r = await sendAck(p.eventsUrl, p.secret, {
    text,
    user_id: 'U0BENCH001',
    channel_id: channel,
    response_url: slack.newResponseUrl(),
  });
  const ackText =
    typeof r.json === 'object' && r.json !== null && 'text' in r.json ? String((r.json as { text: unknown }).text) : '';
  const m = /incident `(inc_[a-z0-9_]+)`/.exec(ackText);
  return { ms: r.elapsedMs, status: r.status, ackText, incidentId: m?.[1] ?? null };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function poll<T>(what: string, f: () => T | null, timeoutMs: number, everyMs = 5): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = f();
    if (v !== null) return v;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

function hasTable(m: StoredMessage): boolean {
  return (m.blocks ?? []).some(
    (b) => typeof b === 'object' && b !== null && (b as { type?: unknown }).type === 'table',
  );
}

/** The thread of an incident in a channel, once its parent is posted. */
function threadIn(slack: FakeSlack, channel: string, incidentId: string): StoredMessage[] | null {
  const parent = slack
    .messages(channel)
    .find((m) => JSON.stringify(m.blocks ?? []).includes(incidentId) || m.text.includes(incidentId));
  return parent ? slack.thread(channel, parent.ts) : null;
}

/** Slash command → first reply in its thread that carries a table block. */
async function commandToFirstTable(slack: FakeSlack, p: Pair, text: string, timeoutMs: number): Promise<number> {
  const channel = newChannel();
  const t0 = performance.now();
  const r = await slash(slack, p, text, channel);
  if (r.status !== 200 || r.incidentId === null)
    throw new Error(`${p.name}: "${text}" was not queued: ${r.status} ${r.ackText}`);
  const id = r.incidentId;
  await poll(
    `a table for ${text} on ${p.name}`,
    () => threadIn(slack, channel, id)?.slice(1).find(hasTable) ?? null,
    timeoutMs,
  );
  return performance.now() - t0;
}

function runScript(script: string, args: string[]): Promise<number> {
  const t0 = performance.now();
  return new Promise((res, rej) => {
    execFile('bash', [join(HERE, script), ...args], { timeout: 120_000 }, (err, _out, stderr) => {
      if (err) rej(new Error(`${script} failed: ${err.message} ${stderr.slice(0, 500)}`));
      else res(performance.now() - t0);
    });
  });
}

const remote = (spec: CommandSpec): string => shellJoin(spec.argv);

/** The on-call engineer's own key for `root@` (the fleet's operatorLogin): every baseline logs in with it. */
function operatorKey(fleet: Fleet): string {
  if (fleet.operatorKeyPath === null) throw new Error('the bench fleet has no operator login');
  return fleet.operatorKeyPath;
}

// ---------------------------------------------------------------------------------------------
// Figures

interface Failure {
  error: string;
}

function failure(e: unknown): Failure {
  return { error: e instanceof Error ? e.message.slice(0, 500) : String(e) };
}

async function benchFirstTable(slack: FakeSlack, fleet: Fleet, p: Pair): Promise<object> {
  const port = fleet.machine(STATUS_TARGET).sshPort;
  if (port === null) throw new Error(`${STATUS_TARGET} has no ssh port`);
  const t = { timeoutMs: 20_000 };
  // A host: the worker runs these three in parallel over one pooled connection.
  const cmds = [remote(queryGpus(t)), remote(queryComputeApps(t)), remote(hostMemory(t))];
  const baseline = (): Promise<number> =>
    runScript('baseline-ssh.sh', [operatorKey(fleet), fleet.knownHostsPath, String(port), ...cmds]);
  const ours = (): Promise<number> => commandToFirstTable(slack, p, `status ${STATUS_TARGET}`, 120_000);
  progress(`statusFirstTable: warm-up (cold pool) then ${CFG.firstTableRuns} interleaved runs`);
  const coldOurs = await ours();
  const coldBaseline = await baseline();
  const o: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < CFG.firstTableRuns; i++) {
    if (i % 2 === 0) {
      o.push(await ours());
      b.push(await baseline());
    } else {
      b.push(await baseline());
      o.push(await ours());
    }
  }
  return {
    target: STATUS_TARGET,
    oursMs: summarize(o),
    baselineMs: summarize(b),
    ratio: ratio(o, b),
    coldPoolOursMs: round(coldOurs),
    firstBaselineMs: round(coldBaseline),
    baseline: `bench/baseline-ssh.sh: ${cmds.length} sequential \`ssh\` runs (new connection each) of the worker's own queries`,
  };
}

/** Busy CPU time of the whole machine so far, ms (all cores, from /proc/stat). */
function machineBusyMs(): number {
  const f = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
  return ((total - idle) * 1000) / 100; // USER_HZ is 100 on Linux
}

/**
 * The fleet's own floor for a fan-out: one OpenSSH `ssh … true` to each of the first `n` hosts, all
 * at once, each a new connection with the pinned known_hosts. What n machines cost this machine
 * before any query runs: the handshakes, sshd sessions and login shells.
 */
function sshFloor(fleet: Fleet, n: number): Promise<number> {
  const ports = Array.from({ length: n }, (_, i) => fleet.machine(`kpro${i + 1}`).sshPort);
  const t0 = performance.now();
  return Promise.all(
    ports.map(
      (port) =>
        new Promise<void>((res, rej) => {
          if (port === null) return rej(new Error('a fan-out host has no ssh port'));
          const args = [
            '-T',
            '-p',
            String(port),
            '-i',
            operatorKey(fleet),
            '-o',
            'IdentitiesOnly=yes',
            '-o',
            'BatchMode=yes',
            '-o',
            'StrictHostKeyChecking=yes',
          ];
          args.push(
            '-o',
            `UserKnownHostsFile=${fleet.knownHostsPath}`,
            '-o',
            'GlobalKnownHostsFile=/dev/null',
            '-o',
            'LogLevel=ERROR',
            'root@127.0.0.1',
            'true',
          );
          execFile('ssh', args, { timeout: 120_000 }, (err, _o, stderr) =>
            err ? rej(new Error(`ssh floor: ${err.message} ${stderr.slice(0, 200)}`)) : res(),
          );
        }),
    ),
  ).then(() => performance.now() - t0);
}

async function benchFanout(
  slack: FakeSlack,
  fleet: Fleet,
  pairs: Map<number, Pair>,
  two: Pair | null,
): Promise<object> {
  const byN = new Map<number, number[]>();
  const floorByN = new Map<number, number[]>();
  const twoWorkers: number[] = [];
  const cpuByN = new Map<number, number[]>();
  const workerCpuByN = new Map<number, number[]>();
  const cold = new Map<number, number>();
  progress(`statusFanout: warm-up then ${CFG.fanoutRuns} interleaved runs over ${FANOUT.join('/')} machines`);
  const one = async (n: number): Promise<number> => {
    const p = pairs.get(n);
    if (!p) throw new Error(`no pair for ${n}`);
    return commandToFirstTable(slack, p, 'status all', 180_000);
  };
  for (const n of FANOUT) cold.set(n, await one(n));
  if (two) await commandToFirstTable(slack, two, 'status all', 180_000);
  for (let i = 0; i < CFG.fanoutRuns; i++) {
    // Rotate the order so no size always runs right after the heavy one.
    const order = FANOUT.map((_, k) => FANOUT[(k + i) % FANOUT.length] as number);
    for (const n of order) {
      // Ours and the bare-ssh floor over the same machines, alternating which goes first.
      if (i % 2 === 1) floorByN.set(n, [...(floorByN.get(n) ?? []), await sshFloor(fleet, n)]);
      const c0 = machineBusyMs();
      const worker = pairs.get(n)?.worker ?? null;
      const w0 = worker ? processCpuMs(worker.pid) : 0;
      const ms = await one(n);
      if (worker) workerCpuByN.set(n, [...(workerCpuByN.get(n) ?? []), (processCpuMs(worker.pid) - w0) / n]);
      byN.set(n, [...(byN.get(n) ?? []), ms]);
      cpuByN.set(n, [...(cpuByN.get(n) ?? []), machineBusyMs() - c0]);
      if (i % 2 === 0) floorByN.set(n, [...(floorByN.get(n) ?? []), await sshFloor(fleet, n)]);
    }
    if (two) twoWorkers.push(await commandToFirstTable(slack, two, 'status all', 180_000));
  }
  const max = FANOUT[FANOUT.length - 1] as number;
  const machines: Record<string, Summary> = {};
  const floor: Record<string, Summary> = {};
  const toFloor: Record<string, number | null> = {};
  for (const n of FANOUT) {
    machines[String(n)] = summarize(byN.get(n) ?? []);
    floor[String(n)] = summarize(floorByN.get(n) ?? []);
    toFloor[String(n)] = ratio(byN.get(n) ?? [], floorByN.get(n) ?? []);
  }
  const ratios = Object.fromEntries(
    FANOUT.filter((n) => n > 1).map((n) => [`ratio${n}to1`, ratio(byN.get(n) ?? [], byN.get(1) ?? [])]),
  );
  return {
    machines,
    ...ratios,
    serialWouldBe: max,
    bareSshFloorMs: floor,
    oursOverFloor: toFloor,
    ...(two
      ? {
          twoWorkerProcesses: {
            machines: max,
            oneWorkerMs: summarize(byN.get(max) ?? []),
            twoWorkersMs: summarize(twoWorkers),
            ratio: ratio(twoWorkers, byN.get(max) ?? []),
          },
        }
      : {}),
    // Machine-wide busy CPU time during each run (other processes included), divided by the
    // cores. Equal to the wall time: the cores were saturated throughout, so the run was bound by
    // this machine's CPU, where every simulated machine's sshd, shell and fake nvidia-smi share
    // the same 2 cores (real machines each bring their own).
    machineBusyPerCoreMs: Object.fromEntries(
      FANOUT.map((n) => [String(n), summarize((cpuByN.get(n) ?? []).map((x) => x / cpus().length))]),
    ),
    coldPoolMs: Object.fromEntries(FANOUT.map((n) => [String(n), round(cold.get(n) ?? 0)])),
    // The worker process's own CPU (user + system, /proc/<pid>/stat) per machine read, pooled connections.
    workerCpuMsPerMachineRead: Object.fromEntries(FANOUT.map((n) => [String(n), summarize(workerCpuByN.get(n) ?? [])])),
  };
}

/** Hosts and sessions per host of the multiplexed OpenSSH baseline (`--quick`: fewer). */
// Few hosts, many sessions each: a master's CPU over its sessions must span many 10 ms ticks to be read at all.
const MUX = QUICK ? { hosts: 5, sessions: 20 } : { hosts: 10, sessions: 20 };
/** The watchdog's default interval: how many machines one core can read once per interval. */
const WATCH_INTERVAL_MS = 180_000;

/**
 * CPU per machine read (what a fleet-wide read costs the worker): the worker's own CPU per read in `status
 * all` over the most machines (statusFanout's workerCpuMsPerMachineRead) against OpenSSH's per session over
 * an open multiplexed connection, running the same read script (the worker's, from
 * src/agent-grammar/templates/machine-read.ts).
 */
async function benchCpuPerRead(fleet: Fleet, fanout: unknown): Promise<object> {
  const t = { timeoutMs: 20_000 };
  const script = remote(machineRead([queryGpus(t), queryComputeApps(t), hostMemory(t)]));
  const ports = Array.from({ length: MUX.hosts }, (_, i) => fleet.machine(`kpro${i + 1}`).sshPort).filter(
    (p): p is number => p !== null,
  );
  progress(`cpuPerRead: OpenSSH ControlMaster to ${ports.length} hosts, ${MUX.sessions} sessions each, 3 runs`);
  const runs = [];
  for (let i = 0; i < 3; i++)
    runs.push(
      await muxSessionCpu(
        { keyPath: operatorKey(fleet), knownHostsPath: fleet.knownHostsPath },
        ports,
        script,
        MUX.sessions,
      ),
    );
  const max = String(FANOUT[FANOUT.length - 1]);
  const perRead = (fanout as { workerCpuMsPerMachineRead?: Record<string, Summary> }).workerCpuMsPerMachineRead?.[max];
  const mux = summarize(runs.map((r) => r.cpuMsPerSession));
  const ours = perRead?.median ?? null;
  return {
    workerMsPerRead: perRead ?? null,
    readsOf: `status all over ${max} machines (pooled connections)`,
    openSshMuxMsPerSession: mux,
    openSshMasterMsPerSession: summarize(runs.map((r) => r.masterMsPerSession)),
    openSshClientMsPerSession: summarize(runs.map((r) => r.clientMsPerSession)),
    sessionsPerRun: runs[0]?.sessions ?? 0,
    workerOverOpenSsh: ours === null ? null : round(ours / mux.median, 2),
    machinesPerCoreAt180s: ours === null || ours <= 0 ? null : Math.floor(WATCH_INTERVAL_MS / ours),
    how: 'user+system CPU from /proc/<pid>/stat (10 ms ticks): the worker process over a run, divided by its machines; OpenSSH: the ControlMaster process during the sessions plus the ssh client processes (the children time of the shell that ran them), divided by the sessions; masters opened before and not counted',
  };
}

/** The ack bot's resident memory right after each burst (max, KiB), split anonymous / file-backed. */
const afterBurst = { anon: 0, file: 0 };
/** The ack bot's V8 heap right after each burst (max of each, bytes), from its metrics endpoint. */
const afterBurstHeap = { used: 0, total: 0, external: 0 };
/** The ack bot's `GET /metrics` (it runs with GPU_MEDIC_METRICS_PORT). */
let ackMetricsUrl = '';

async function benchAck(slack: FakeSlack, p: Pair): Promise<object> {
  const hosts = CFG.hosts;
  // Each command's ack time, and the bot's own CPU (user + system, /proc) from the first command
  // to the last ack, before the memory reads below (their scrape costs the bot CPU too).
  const burst = async (c: number, text: (i: number) => string): Promise<{ ms: number[]; cpuMs: number }> => {
    const channel = newChannel();
    const cpu0 = processCpuMs(p.bot.pid);
    if (c === 1) {
      // One at a time: a sample of CFG.ackSerial sequential commands.
      const out: number[] = [];
      for (let i = 0; i < CFG.ackSerial; i++) {
        const r = await slash(slack, p, text(i), channel);
        if (r.status !== 200) throw new Error(`ack status ${r.status}`);
        out.push(r.ms);
      }
      return { ms: out, cpuMs: processCpuMs(p.bot.pid) - cpu0 };
    }
    const rs = await Promise.all(Array.from({ length: c }, (_, i) => slash(slack, p, text(i), channel)));
    const cpuMs = processCpuMs(p.bot.pid) - cpu0;
    const split = rssSplitKiB(p.bot.pid);
    afterBurst.anon = Math.max(afterBurst.anon, split.anon);
    afterBurst.file = Math.max(afterBurst.file, split.file);
    const heap = await scrapeMemory(ackMetricsUrl);
    afterBurstHeap.used = Math.max(afterBurstHeap.used, heap.heapUsed);
    afterBurstHeap.total = Math.max(afterBurstHeap.total, heap.heapTotal);
    afterBurstHeap.external = Math.max(afterBurstHeap.external, heap.external);
    const bad = rs.find((r) => r.status !== 200 || r.ackText === '');
    if (bad) throw new Error(`ack failed at ${c} concurrent: HTTP ${bad.status} "${bad.ackText.slice(0, 120)}"`);
    return { ms: rs.map((r) => r.ms), cpuMs };
  };
  const status = (i: number): string => `status kpro${(i % hosts) + 1}`;
  const help = (): string => 'help';
  const levels: Record<string, object> = {};
  for (const c of ACK_LEVELS) {
    progress(`ack: ${c} concurrent, warm-up then ${CFG.ackRuns} interleaved runs (status vs help)`);
    await burst(c, status);
    await burst(c, help);
    type Sample = { p50: number[]; p99: number[]; max: number; cpuMsPerAck: number[] };
    const s: Sample = { p50: [], p99: [], max: 0, cpuMsPerAck: [] };
    const h: Sample = { p50: [], p99: [], max: 0, cpuMsPerAck: [] };
    // The bot's own CPU over the burst, per command: what an ack costs it, which a shared machine's
    // load changes far less than it changes wall times.
    const add = async (into: Sample, text: (i: number) => string): Promise<void> => {
      const { ms: xs, cpuMs } = await burst(c, text);
      into.cpuMsPerAck.push(cpuMs / xs.length);
      into.p50.push(percentile(xs, 50));
      into.p99.push(percentile(xs, 99));
      into.max = Math.max(into.max, ...xs);
    };
    for (let i = 0; i < CFG.ackRuns; i++) {
      if (i % 2 === 0) {
        await add(s, status);
        await add(h, help);
      } else {
        await add(h, help);
        await add(s, status);
      }
      // Let the bot's outbox post this burst's thread parents before the next burst.
      await sleep(c >= 50 ? CFG.ackSettleMs : 200);
    }
    levels[String(c)] = {
      status: {
        p50: summarize(s.p50),
        p99: summarize(s.p99),
        worstMs: round(s.max),
        botCpuMsPerAck: summarize(s.cpuMsPerAck, 2),
      },
      help: {
        p50: summarize(h.p50),
        p99: summarize(h.p99),
        worstMs: round(h.max),
        botCpuMsPerAck: summarize(h.cpuMsPerAck, 2),
      },
      botCpuOverHelp: ratio(s.cpuMsPerAck, h.cpuMsPerAck),
      p99OverLimit: round(Math.max(...s.p99) / ACK_LIMIT_MS, 3),
      // Target: status within 1.2x of the help floor at 50 and 200 at once, so a fleet-wide read costs no
      // more than an ack.
      p99OverHelp: ratio(s.p99, h.p99),
    };
  }
  return {
    limitMs: ACK_LIMIT_MS,
    levels,
    sample: `${CFG.ackRuns} runs, each: ${CFG.ackSerial} sequential commands at 1, one burst of c commands at 50 and 200; botCpuMsPerAck: the bot's user+system CPU over a burst (10 ms ticks) / its commands`,
  };
}

async function benchUnstick(slack: FakeSlack, fleet: Fleet, p: Pair): Promise<object> {
  const port = fleet.machine(UNSTICK_CT).sshPort;
  if (port === null) throw new Error(`${UNSTICK_CT} has no ssh port`);
  const t = { timeoutMs: 20_000 };
  const snapshot = [remote(queryGpus(t)), remote(queryComputeApps(t)), remote(hostMemory(t)), remote(fuserDevices(t))];
  const spawnS2 = async (): Promise<FleetProcess[]> =>
    Promise.all([
      fleet.spawnHolder(UNSTICK_CT, {
        gpus: [{ index: 0, mib: 96413 }],
        title: 'sglang::scheduler_TP0',
        ignoreTerm: true,
      }),
      fleet.spawnHolder(UNSTICK_CT, {
        gpus: [{ index: 2, mib: 96417 }],
        title: 'sglang::scheduler_TP1',
        ignoreTerm: true,
      }),
    ]);
  const gone = async (hs: FleetProcess[]): Promise<void> => {
    await Promise.race([
      Promise.all(hs.map((h) => h.exited)),
      sleep(30_000).then(() => Promise.reject(new Error('S2 holders still alive after 30 s'))),
    ]);
  };
  const baseline = async (): Promise<number> => {
    const hs = await spawnS2();
    const pids = hs.map((h) => String(h.containerPid)).join(' ');
    const ms = await runScript('baseline-unstick.sh', [
      operatorKey(fleet),
      fleet.knownHostsPath,
      String(port),
      String(GRACE_SEC),
      '1024',
      pids,
      remote(queryGpus(t)),
      ...snapshot,
    ]);
    await gone(hs);
    return ms;
  };
  /** null: the bot answered that unstick is not available (nothing ran). */
  const ours = async (): Promise<number | null> => {
    const hs = await spawnS2();
    const channel = newChannel();
    const t0 = performance.now();
    const r = await slash(slack, p, `unstick ${UNSTICK_CT} hung TP ranks`, channel);
    const giveUp = async (why: string): Promise<null> => {
      pendingWhy = why;
      for (const h of hs) process.kill(h.hostPid, 'SIGKILL');
      await gone(hs);
      return null;
    };
    if (/not available yet/i.test(r.ackText)) return giveUp('unstick not available yet');
    if (r.incidentId === null) throw new Error(`unstick was not queued: ${r.status} ${r.ackText.slice(0, 200)}`);
    const id = r.incidentId;
    // Queued but nothing in the thread after 30 s: the worker does not handle unstick jobs yet.
    const verdict = await poll(
      'the S2 verdict',
      () => {
        const replies = threadIn(slack, channel, id)?.slice(1) ?? [];
        const v = replies.find((m) => /Recovered|Partially recovered|Still stuck/i.test(m.text));
        if (v) return 'verdict';
        if (replies.length === 0 && performance.now() - t0 > 30_000) return 'silent';
        return null;
      },
      120_000,
      10,
    );
    if (verdict === 'silent')
      return giveUp(
        'unstick not available yet: the bot queues it, but no worker step appeared in the thread within 30 s',
      );
    const ms = performance.now() - t0;
    await gone(hs);
    return ms;
  };
  let pendingWhy = '';
  progress('unstickS2: probing /gpu unstick');
  const probe = await ours();
  const b: number[] = [];
  if (probe === null) {
    progress(
      `unstickS2: not available yet; measuring the ssh baseline alone (${CFG.unstickRuns} runs after a warm-up)`,
    );
    if (CFG.unstickWarmup) await baseline();
    for (let i = 0; i < CFG.unstickRuns; i++) b.push(await baseline());
    return { pending: pendingWhy, baselineMs: summarize(b) };
  }
  progress(`unstickS2: warm-up then ${CFG.unstickRuns} interleaved runs`);
  if (CFG.unstickWarmup) await baseline();
  const o: number[] = [];
  for (let i = 0; i < CFG.unstickRuns; i++) {
    if (i % 2 === 0) {
      const x = await ours();
      if (x !== null) o.push(x);
      b.push(await baseline());
    } else {
      b.push(await baseline());
      const x = await ours();
      if (x !== null) o.push(x);
    }
  }
  return { oursMs: summarize(o), baselineMs: summarize(b), ratio: ratio(o, b), coldOursMs: round(probe) };
}

// ---------------------------------------------------------------------------------------------

const MiB = (kib: number): number => round(kib / 1024, 1);

async function main(): Promise<void> {
  const work = await mkdtemp('/tmp/gpu-medic-bench-');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const roles: RoleProcess[] = [];
  const prefixes: string[] = [];
  let fleet: Fleet | null = null;
  let slack: FakeSlack | null = null;
  let failed = false;
  const load0 = loadavg()[0] ?? 0;
  const out: Record<string, unknown> = {};
  try {
    await redis.ping();
    progress(`starting a fleet of ${CFG.hosts} hosts + ${UNSTICK_CT} (real sshd each)`);
    const f0 = performance.now();
    fleet = await startFleet(
      {
        hosts: Array.from({ length: CFG.hosts }, (_, i) => ({
          id: `kpro${i + 1}`,
          gpus: 8,
          ramTotalGiB: 449,
          ramUsedGiB: 40,
        })),
        containers: [{ id: UNSTICK_CT, vmid: 129, host: UNSTICK_HOST, ownAddress: true }],
      },
      // The baselines log in as root with the engineer's own key, as on-call does by hand.
      { operatorLogin: true },
    );
    const fleetStartMs = performance.now() - f0;
    slack = await startFakeSlack();
    // A holder on the status target, so the table has a process row as in real life.
    await fleet.spawnHolder(STATUS_TARGET, {
      gpus: [
        { index: 0, mib: 96413 },
        { index: 2, mib: 96417 },
      ],
      title: 'sglang::scheduler_TP0',
    });

    const inv: InventoryInput = fleet.inventory();
    const hostsOf = (n: number): InventoryInput['hosts'] => (inv.hosts ?? []).slice(0, n);
    const ackMetricsPort = await freePort();
    ackMetricsUrl = `http://127.0.0.1:${ackMetricsPort}/metrics`;
    const inventories: Array<{
      name: string;
      inventory: InventoryInput;
      worker: boolean;
      workers?: number;
      extraEnv?: Record<string, string>;
    }> = [
      ...FANOUT.map((n) => ({
        name: `status${n}`,
        inventory: { ...inv, hosts: hostsOf(n), containers: [] },
        worker: true,
      })),
      // The same machines as the largest fan-out, served by two worker processes on one queue.
      ...(QUICK
        ? []
        : [
            {
              name: TWO_WORKERS,
              inventory: { ...inv, hosts: hostsOf(CFG.hosts), containers: [] },
              worker: true,
              workers: 2,
            },
          ]),
      // Acks only: its queue has no consumer (see README), so the next burst is not slowed by 600 reads.
      // Its metrics endpoint gives its V8 heap after each burst (the memory figure).
      {
        name: 'ack',
        inventory: { ...inv, hosts: hostsOf(CFG.hosts), containers: [] },
        worker: false,
        extraEnv: { GPU_MEDIC_METRICS_PORT: String(ackMetricsPort) },
      },
      {
        name: 'unstick',
        inventory: {
          ...inv,
          hosts: (inv.hosts ?? []).filter((h) => h.id === UNSTICK_HOST),
          containers: (inv.containers ?? []).filter((c) => c.id === UNSTICK_CT),
        },
        worker: true,
        extraEnv: { GPU_MEDIC_TERM_GRACE_SEC: String(GRACE_SEC) },
      },
    ];
    progress(
      `starting ${inventories.length} bots and ${inventories.filter((x) => x.worker).length} workers as child processes`,
    );
    const p0 = performance.now();
    const pairs = new Map<string, Pair>();
    const fakeSlack = slack;
    await Promise.all(
      inventories.map(async (x) => {
        const invPath = join(work, `inventory-${x.name}.yaml`);
        await writeFile(invPath, JSON.stringify(x.inventory, null, 2));
        const prefix = `bench${randomBytes(4).toString('hex')}`;
        prefixes.push(prefix);
        const secret = randomBytes(16).toString('hex');
        const port = await freePort();
        const common = {
          REDIS_URL,
          GPU_MEDIC_PREFIX: prefix,
          GPU_MEDIC_INVENTORY: invPath,
          LOG_LEVEL: 'info',
          // One watchdog round at start only: a round over 200 machines during a figure would be
          // counted in it (the round is measured on its own by `--watch`).
          GPU_MEDIC_WATCH_INTERVAL_SEC: '86400',
          ...(x.extraEnv ?? {}),
        };
        // As deployed, the bot signs every request with its key and the worker acts on nothing else; the
        // fleet's agents trust the fleet's pair (as an installed agent trusts /etc/gpu-medic/), so every pair has it.
        const keys = (fleet as Fleet).keys;
        const [bot, worker] = await Promise.all([
          startRole(
            'bot',
            {
              ...common,
              ...keys.botEnv,
              GPU_MEDIC_MODE: 'http',
              SLACK_BOT_TOKEN: fakeSlack.botToken,
              SLACK_SIGNING_SECRET: secret,
              SLACK_API_URL: fakeSlack.apiUrl,
              PORT: String(port),
            },
            work,
            `${x.name}-bot`,
          ),
          x.worker
            ? startRole('worker', { ...common, ...keys.workerEnv }, work, `${x.name}-worker`)
            : Promise.resolve(null),
        ]);
        roles.push(bot);
        if (worker) roles.push(worker);
        for (let k = 1; k < (x.workers ?? 1); k++)
          roles.push(await startRole('worker', { ...common, ...keys.workerEnv }, work, `${x.name}-worker${k + 1}`));
        pairs.set(x.name, {
          name: x.name,
          prefix,
          secret,
          eventsUrl: `http://127.0.0.1:${port}/slack/events`,
          bot,
          worker,
        });
      }),
    );
    const processesStartMs = performance.now() - p0;
    const pair = (name: string): Pair => {
      const p = pairs.get(name);
      if (!p) throw new Error(`no pair ${name}`);
      return p;
    };
    const big = pair(`status${CFG.hosts}`);
    const ackPair = pair('ack');
    const idle = { bot: big.bot.rssKiB(), worker: big.worker?.rssKiB() ?? 0, ackBot: ackPair.bot.rssKiB() };
    const idleSplit = rssSplitKiB(ackPair.bot.pid);

    out.machine = {
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? 'unknown',
      node: process.version,
      loadavg1AtStart: round(load0, 2),
    };
    out.mode = QUICK ? 'quick' : 'full';
    out.setup = {
      fleetHosts: CFG.hosts,
      fleetStartMs: round(fleetStartMs),
      processesStartMs: round(processesStartMs),
      note: 'fleet and process start-up are excluded from every figure; times are wall-clock ms, each figure the median of its runs after a warm-up',
    };

    const attempt = async (name: string, f: () => Promise<object>, from: Pair): Promise<void> => {
      try {
        out[name] = await f();
      } catch (e) {
        failed = true;
        const logs = [...from.bot.problems(), ...(from.worker?.problems() ?? [])];
        progress(`${name} failed: ${failure(e).error}\n${logs.join('\n')}`);
        out[name] = { ...failure(e), logs };
      }
    };
    await attempt('statusFirstTable', () => benchFirstTable(fakeSlack, fleet as Fleet, big), big);
    await attempt(
      'statusFanout',
      () =>
        benchFanout(
          fakeSlack,
          fleet as Fleet,
          new Map(FANOUT.map((n) => [n, pair(`status${n}`)])),
          pairs.get(TWO_WORKERS) ?? null,
        ),
      big,
    );
    const workerAfterFanout = big.worker?.peakKiB() ?? 0;
    await attempt('cpuPerRead', () => benchCpuPerRead(fleet as Fleet, out.statusFanout), big);
    await attempt('ack', () => benchAck(fakeSlack, ackPair), ackPair);
    await attempt('unstickS2', () => benchUnstick(fakeSlack, fleet as Fleet, pair('unstick')), pair('unstick'));
    out.memory = {
      bot: {
        peakMiB: MiB(ackPair.bot.peakKiB()),
        idleMiB: MiB(idle.ackBot),
        afterBurstAnonMiB: MiB(afterBurst.anon),
        afterBurstFileMiB: MiB(afterBurst.file),
        idleAnonMiB: MiB(idleSplit.anon),
        idleFileMiB: MiB(idleSplit.file),
        // The V8 heap (the bot's own gauges, read at scrape time) against the anonymous RSS above.
        afterBurstHeapUsedMiB: MiB(afterBurstHeap.used / 1024),
        afterBurstHeapTotalMiB: MiB(afterBurstHeap.total / 1024),
        afterBurstExternalMiB: MiB(afterBurstHeap.external / 1024),
        during: `${ACK_LEVELS.join('/')} concurrent command bursts (the ack figure)`,
      },
      botServingStatus: {
        peakMiB: MiB(big.bot.peakKiB()),
        idleMiB: MiB(idle.bot),
        during: `status and status-all threads over ${CFG.hosts} machines`,
      },
      worker: {
        peakMiB: MiB(workerAfterFanout),
        idleMiB: MiB(idle.worker),
        during: `status all over ${CFG.hosts} machines (${CFG.fanoutRuns + 1} times) and single-machine status, one pooled connection per machine`,
      },
      how: "VmHWM (peak resident set) and VmRSS right after start (idle) from /proc/<pid>/status of separate `node dist/src/main.js bot|worker` processes (the compiled build); the bot's RssAnon (V8 heap and native allocations) and RssFile+RssShmem (node's own code and libraries, mapped) right after each burst and at idle, so a miss shows whether the heap or the binary is the cause; the V8 heap (used, total, external) right after each burst from the bot's own metrics endpoint (GPU_MEDIC_METRICS_PORT set for this bot only, which loads prom-client)",
    };
  } catch (e) {
    failed = true;
    throw e;
  } finally {
    progress('stopping');
    await Promise.all(roles.map((r) => r.stop().catch(() => undefined)));
    await slack?.close().catch(() => undefined);
    await fleet?.stop().catch((e: unknown) => progress(`fleet stop: ${failure(e).error}`));
    for (const prefix of prefixes) await removePrefix(redis, prefix);
    redis.disconnect();
    if (failed) progress(`a figure failed: logs kept in ${work}`);
    else await rm(work, { recursive: true, force: true });
  }
  out.loadavg1AtEnd = round(loadavg()[0] ?? 0, 2);
  out.durationS = round((performance.now() - started) / 1000, 1);
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
}

// Everything it started is stopped in `finally`; exit once the JSON is flushed rather than wait
// ~30 s for lingering keep-alive sockets and timers of the harness to time out.
// `--watch`: the watchdog round's Redis and SSH cost over 50 and 200 machines instead (bench/watch-round.ts).
const run = process.argv.includes('--watch') ? () => import('./watch-round.ts').then((m) => m.watchBench()) : main;
run().then(
  () => process.stdout.write('', () => process.exit(0)),
  (e: unknown) => {
    process.stderr.write(`bench failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`, () =>
      process.exit(1),
    );
  },
);
