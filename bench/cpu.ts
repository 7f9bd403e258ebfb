/**
 * CPU time per unit of work (what a read or an ack costs), which a 2-core machine that also runs the
 * simulated fleet can judge where wall times cannot: a process's user + system time from /proc/<pid>/stat,
 * and the OpenSSH client's cost per session over an already open multiplexed connection
 * (ControlMaster/ControlPath: no handshake per session, as gpu-medic's pool has none).
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';

/** USER_HZ is 100 on Linux: one clock tick is 10 ms. */
const TICK_MS = 10;

/** A process's CPU time so far (user + system, ms), from /proc/<pid>/stat. */
export function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which is in parentheses and may hold spaces): state is field 3.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

/** Resident memory split, KiB (/proc/<pid>/status): anonymous (V8 heap, malloc) and file-backed (node's code, libraries). */
export function rssSplitKiB(pid: number): { anon: number; file: number } {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { anon: field('RssAnon'), file: field('RssFile') + field('RssShmem') };
}

/** Who the sessions log in as: the on-call engineer's key for `root@` and the fleet's pinned host keys. */
interface Login {
  keyPath: string;
  knownHostsPath: string;
}

function sshBase(login: Login, port: number, ctl: string): string[] {
  return [
    '-F',
    '/dev/null',
    '-T',
    '-p',
    String(port),
    '-i',
    login.keyPath,
    '-o',
    'IdentitiesOnly=yes',
    '-o',
    'BatchMode=yes',
    '-o',
    'StrictHostKeyChecking=yes',
    '-o',
    `UserKnownHostsFile=${login.knownHostsPath}`,
    '-o',
    'GlobalKnownHostsFile=/dev/null',
    '-o',
    'LogLevel=ERROR',
    '-S',
    ctl,
  ];
}

function run(cmd: string, args: string[]): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) =>
    execFile(cmd, args, { timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${cmd}: ${err.message} ${stderr.slice(0, 200)}`)) : resolve({ stdout, stderr }),
    ),
  );
}

/**
 * OpenSSH's CPU per session over an open multiplexed connection: one ControlMaster per port
 * (opened first, not counted), then `sessionsPerHost` sessions of `remoteCommand` through each,
 * one after the other. Counted: the master's CPU during the sessions (it does the crypto of every
 * multiplexed session) plus the `ssh` client processes' own (start, control socket, relaying),
 * read as the children's time of the shell that ran them.
 */
export async function muxSessionCpu(
  login: Login,
  ports: readonly number[],
  remoteCommand: string,
  sessionsPerHost: number,
): Promise<{ sessions: number; cpuMsPerSession: number; masterMsPerSession: number; clientMsPerSession: number }> {
  const dir = mkdtempSync('/tmp/gm-mux-');
  const masters: Array<{ port: number; ctl: string; pid: number }> = [];
  try {
    for (const port of ports) {
      const ctl = join(dir, String(port));
      await run('ssh', [...sshBase(login, port, ctl), '-M', '-N', '-f', '-o', 'ControlPersist=yes', 'root@127.0.0.1']);
      const check = await run('ssh', [...sshBase(login, port, ctl), '-O', 'check', 'root@127.0.0.1']);
      const pid = Number(/pid=(\d+)/.exec(check.stderr + check.stdout)?.[1]);
      if (!Number.isFinite(pid)) throw new Error(`no ControlMaster pid for port ${port}`);
      masters.push({ port, ctl, pid });
    }
    let masterMs = 0;
    let clientMs = 0;
    for (const m of masters) {
      const before = processCpuMs(m.pid);
      const args = [...sshBase(login, m.port, m.ctl), '-o', 'ControlMaster=no', 'root@127.0.0.1', remoteCommand];
      // The shell waits for each ssh; its own /proc stat then holds their time (cutime, cstime).
      const script = `for i in $(seq ${sessionsPerHost}); do "$@" >/dev/null || exit 1; done; read -r -a s </proc/$$/stat; echo "\${s[15]} \${s[16]}"`;
      const out = await new Promise<string>((resolve, reject) => {
        const child = spawn('bash', ['-c', script, 'mux', 'ssh', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
        let text = '';
        child.stdout.on('data', (d: Buffer) => {
          text += d.toString();
        });
        child.once('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`mux sessions exited ${code}`))));
      });
      const [cu, cs] = out.trim().split(' ').map(Number);
      clientMs += ((cu ?? 0) + (cs ?? 0)) * TICK_MS;
      masterMs += processCpuMs(m.pid) - before;
    }
    const sessions = masters.length * sessionsPerHost;
    return {
      sessions,
      cpuMsPerSession: (masterMs + clientMs) / sessions,
      masterMsPerSession: masterMs / sessions,
      clientMsPerSession: clientMs / sessions,
    };
  } finally {
    for (const m of masters)
      await run('ssh', [...sshBase(login, m.port, m.ctl), '-O', 'exit', 'root@127.0.0.1']).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The parts of a V8 CPU profile (`Profiler.stop`, or a `.cpuprofile` file) the summary reads. */
export interface CpuProfile {
  nodes: Array<{
    id: number;
    callFrame: { functionName: string; url: string };
    hitCount?: number;
    children?: number[];
  }>;
  startTime: number;
  endTime: number;
}

/**
 * Where a frame's self time goes, to find what to make cheaper. Native frames (no URL) and node's own
 * (`node:`) count for their nearest caller that is neither (a socket write for ioredis or ssh2, whichever
 * wrote); those with no such caller (the event loop's reads and timers) are node's.
 */
function category(fn: string, url: string): string | null {
  if (fn === '(idle)') return 'idle';
  if (fn === '(garbage collector)') return 'GC';
  if (fn === '(program)') return 'V8 and native, unattributed';
  if (url === '' || url.startsWith('node:')) return null;
  if (url.includes('/node_modules/ssh2/lib/protocol/crypto')) return 'ssh2 crypto';
  if (url.includes('/node_modules/ssh2/')) return 'ssh2 protocol';
  if (/\/node_modules\/(ioredis|@ioredis|redis-parser|redis-errors|cluster-key-slot|denque)\//.test(url))
    return 'ioredis';
  if (
    /\/node_modules\/(pino|pino-std-serializers|sonic-boom|fast-redact|thread-stream|quick-format-unescaped|safe-stable-stringify)\//.test(
      url,
    )
  )
    return 'pino logging';
  if (/\/src\/(gpu\/parse\/|readings\/|agent-grammar\/templates\/|text\/shell-quote\.)/.test(url))
    return 'gpu-medic: reads, built and parsed';
  if (/\/(src|workers)\//.test(url) && !url.includes('/node_modules/'))
    return 'gpu-medic: rest (watchdog, stores, executor)';
  const pkg = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1];
  return pkg === undefined ? 'other' : `other: ${pkg}`;
}

/** Self time by category and the heaviest functions, ms, summed over profiles (each scaled by its own sampling). */
export function summarizeCpuProfiles(profiles: readonly CpuProfile[]): {
  profiledMs: number;
  byCategoryMs: Record<string, number>;
  topSelfMs: Array<{ fn: string; where: string; ms: number }>;
} {
  const byCat = new Map<string, number>();
  const byFn = new Map<string, number>();
  let total = 0;
  for (const p of profiles) {
    const ms = (p.endTime - p.startTime) / 1000;
    const hits = p.nodes.reduce((a, n) => a + (n.hitCount ?? 0), 0);
    if (hits === 0) continue;
    total += ms;
    const byId = new Map(p.nodes.map((n) => [n.id, n]));
    const parent = new Map<number, number>();
    for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    for (const n of p.nodes) {
      const self = ((n.hitCount ?? 0) / hits) * ms;
      if (self === 0) continue;
      let cat: string | null = null;
      for (let at: number | undefined = n.id; cat === null && at !== undefined; at = parent.get(at)) {
        const f = byId.get(at)?.callFrame;
        cat = f === undefined ? null : category(f.functionName, f.url);
      }
      const c = cat ?? 'node internals (event loop, stream reads, timers)';
      byCat.set(c, (byCat.get(c) ?? 0) + self);
      const where = n.callFrame.url.replace(/^.*\/node_modules\//, '').replace(/^file:\/\/.*\/(src|workers)\//, '$1/');
      const key = `${n.callFrame.functionName || '(anonymous)'}\t${where}`;
      byFn.set(key, (byFn.get(key) ?? 0) + self);
    }
  }
  const r = (x: number): number => Math.round(x * 10) / 10;
  return {
    profiledMs: r(total),
    byCategoryMs: Object.fromEntries([...byCat].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, r(v)])),
    topSelfMs: [...byFn]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 20)
      .map(([k, v]) => {
        const [fn = '', where = ''] = k.split('\t');
        return { fn, where, ms: r(v) };
      }),
  };
}

/** What the bot's own metrics endpoint says of its memory, bytes, read at scrape time (src/metrics/peak-memory.ts, prom-client's defaults). */
export interface ScrapedMemory {
  heapUsed: number;
  heapTotal: number;
  external: number;
  rss: number;
  peakRss: number;
}

/** The V8 heap, which /proc cannot show, from the process's `GET /metrics` (GPU_MEDIC_METRICS_PORT). */
export async function scrapeMemory(metricsUrl: string): Promise<ScrapedMemory> {
  const text = await (await fetch(metricsUrl)).text();
  const v = (name: string): number => {
    const m = new RegExp(`^gpu_medic_${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text);
    if (!m?.[1]) throw new Error(`${metricsUrl}: no gpu_medic_${name}`);
    return Number(m[1]);
  };
  return {
    heapUsed: v('nodejs_heap_size_used_bytes'),
    heapTotal: v('nodejs_heap_size_total_bytes'),
    external: v('nodejs_external_memory_bytes'),
    rss: v('process_resident_memory_bytes'),
    peakRss: v('process_resident_memory_peak_bytes'),
  };
}
