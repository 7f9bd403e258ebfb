/**
 * The fleet's simulated workloads: GPU holders and bystanders, each a real process (holder.c).
 *
 * - A holder "allocates" memory by being registered in its host's holders/ dir (host PID, start
 *   time, gpu→MiB); the fake nvidia-smi counts it while that PID still has that start time.
 *   It also opens and maps the device files it uses, so real `fuser` sees it.
 * - In a container, the process is started through nsenter into the container's namespaces:
 *   it has a container PID and a host PID (NSpid), and its parent is outside the container
 *   (PPID 0 inside, as for anything started by `pct exec`).
 * - Signals: the process logs every catchable signal it receives (with the sender's PID) to
 *   <fleet>/signals.log; an uncatchable SIGKILL is seen as its death by that signal.
 * - dieDelayMs: when the fleet sees the process exit it stamps exitedAt; the memory stays in use
 *   until exitedAt + dieDelayMs (and also between the death and the stamp).
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { FleetTools } from './build-tools.ts';
import { nsenterArgs } from './container.ts';
import { cgroupPids, lxcAttachArgs, lxcCgroupDirs } from './lxc-container.ts';
import { nsPids, pidNsOf } from './proc-ns.ts';
import { recordPid } from './registry.ts';
import { type HolderRecord, procStartTime, procStat, readJson, writeJsonAtomic } from './state.ts';
import { spawnReady } from './spawn-ready.ts';
import type { AtPid, FleetProcess, HolderOptions, SignalRecord, SpawnOptions } from './types.ts';

const execFileP = promisify(execFile);

export interface ProcessTarget {
  machineId: string;
  hostDir: string;
  kind: 'host' | 'container';
  /** The container's PID 1 (host PID); null on a host. */
  initHostPid: number | null;
  /** The host's /proc as seen where the process runs. */
  hostProc: string;
  machineDir: string;
  /** The container's cgroup, joined by the process; null on a host or in a real LXC container (lxc-attach moves it). */
  cgroup: string | null;
  /** A real LXC container: processes start through lxc-attach, and its cgroup names their host PIDs. */
  lxc?: { lxcPath: string; vmid: number; cgroupTag: string; unprivileged: boolean };
}

interface Entry {
  proc: FleetProcess;
  kind: 'holder' | 'bystander';
  recordPath: string | null;
  /** A stuck holder (`HolderOptions.stuck`). */
  stuck?: 'Z' | 'D';
  /** Released by the fleet (releaseStuck): its death then is no signal to report. */
  released?: boolean;
}

const DEFAULT_HOLDER_TITLE = 'python3 -m sglang.launch_server --tp-size 8';
const SIGNAL_NAMES = new Map<number, string>(Object.entries(constants.signals).map(([name, num]) => [num, name]));

/** The non-root login the fleet offers on every machine (a container user who can't kill root's processes). */
export const FLEET_USER = 'fleetuser';

/**
 * The user's ids, creating the user when missing. Test files start fleets concurrently and useradd
 * refuses while another holds the passwd lock, so a failed useradd is retried until the user shows up.
 */
export async function ensureUser(user: string): Promise<{ uid: number; gid: number }> {
  if (!/^[a-z_][a-z0-9_-]{0,31}$/.test(user)) throw new Error(`bad user name ${user}`);
  const lookup = async () => {
    try {
      const { stdout } = await execFileP('getent', ['passwd', user]);
      const f = stdout.trim().split(':');
      return { uid: Number(f[2]), gid: Number(f[3]) };
    } catch {
      return null;
    }
  };
  let lastError = '';
  for (let attempt = 0; attempt < 50; attempt++) {
    const found = await lookup();
    if (found !== null) return found;
    try {
      // A login shell and a home: tests may also SSH in as this user.
      // Password '*': no password login, but not 'locked' (sshd refuses locked accounts even with a key).
      await execFileP('useradd', ['--create-home', '--shell', '/bin/sh', '--password', '*', user]);
    } catch (e) {
      lastError = e instanceof Error ? e.message : String(e);
      await new Promise((r) => setTimeout(r, 100)); // another process may hold the lock or be creating it
    }
  }
  throw new Error(`could not create user ${user}: ${lastError}`);
}

function readCmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      .split('\0')
      .filter((s) => s !== '')
      .join(' ');
  } catch {
    return '';
  }
}

export class ProcessTable {
  private readonly entries = new Map<string, Entry>();
  private readonly kills: SignalRecord[] = [];
  private seq = 0;
  /** Machines being stopped by the fleet: their processes' deaths are not signals to report. */
  private readonly quiet = new Set<string>();
  private stopping = false;

  constructor(
    private readonly fleetDir: string,
    private readonly tools: FleetTools,
  ) {}

  get signalLogPath(): string {
    return join(this.fleetDir, 'signals.log');
  }

  quietMachine(machineId: string): void {
    this.quiet.add(machineId);
  }

  unquietMachine(machineId: string): void {
    this.quiet.delete(machineId);
  }

  stopAll(): void {
    this.stopping = true;
  }

  list(): FleetProcess[] {
    return [...this.entries.values()].map((e) => e.proc);
  }

  /** Environment of a fleet process (holder.c): title, devices, signal log, id, user. */
  private async envFor(
    target: ProcessTarget,
    id: string,
    kind: 'holder' | 'bystander',
    o: SpawnOptions & Partial<HolderOptions>,
  ): Promise<NodeJS.ProcessEnv> {
    const title = o.title ?? (kind === 'holder' ? DEFAULT_HOLDER_TITLE : 'python3');
    const argv = title.split(' ').filter((s) => s !== '');
    const gpus = kind === 'holder' ? (o.gpus ?? []) : [];
    // As CUDA does: the GPUs it uses plus the control and UVM devices.
    const devNames: string[] =
      gpus.length === 0 ? [] : [...gpus.map((g) => `nvidia${g.index}`), 'nvidiactl', 'nvidia-uvm'];
    const devDir = target.kind === 'host' ? join(target.hostDir, 'dev') : '/dev';
    const env: NodeJS.ProcessEnv = {
      PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      FLEET_ARGV: argv.join('\x1f'),
      FLEET_DEVS: devNames.map((n) => join(devDir, n)).join(':'),
      FLEET_SIGLOG: this.signalLogPath,
      FLEET_HOLDER_ID: id,
      // In an LXC container the host's /proc is not there: the fleet finds its host PID (hostPidInCgroup).
      ...(target.lxc === undefined ? { FLEET_HOSTPROC: target.hostProc } : {}),
      FLEET_MACHINE: target.machineId,
    };
    if (target.cgroup !== null) env.FLEET_CGROUP = target.cgroup;
    if (o.parentTitle !== undefined)
      env.FLEET_PARENT_ARGV = o.parentTitle
        .split(' ')
        .filter((w) => w !== '')
        .join('\x1f');
    if (o.ignoreTerm === true) env.FLEET_IGNORE_TERM = '1';
    if (o.comm !== undefined) {
      if (o.comm.length === 0 || o.comm.length > 15 || o.comm.includes(0))
        throw new Error(`${id}: comm must be 1 to 15 bytes without NUL`);
      env.FLEET_COMM_HEX = o.comm.toString('hex');
    }
    if (kind === 'holder' && o.stuck !== undefined) {
      env.FLEET_STUCK = o.stuck;
      env.FLEET_STUCK_GO = join(target.machineDir, `stuck-go-${id}`);
    }
    const user = o.user ?? 'root';
    if (user !== 'root') {
      const ids = await ensureUser(user);
      env.FLEET_UID = String(ids.uid);
      env.FLEET_GID = String(ids.gid);
    }
    return env;
  }

  private nextId(kind: 'holder' | 'bystander'): string {
    return `${kind === 'holder' ? 'h' : 'b'}${++this.seq}`;
  }

  /**
   * The environment for a container's PID 1 that holds GPUs (the container's setup script execs
   * holder.c in init mode with it), and the id it will be registered under by `adoptInit`.
   */
  async initEnv(
    target: Omit<ProcessTarget, 'initHostPid'>,
    o: HolderOptions,
  ): Promise<{ id: string; env: Record<string, string> }> {
    const id = this.nextId('holder');
    const env = await this.envFor({ ...target, initHostPid: null }, id, 'holder', o);
    const out: Record<string, string> = {};
    for (const k of ['FLEET_ARGV', 'FLEET_DEVS', 'FLEET_SIGLOG', 'FLEET_HOLDER_ID', 'FLEET_IGNORE_TERM']) {
      const v = env[k];
      if (v !== undefined && v !== '') out[k] = v;
    }
    return { id, env: out };
  }

  /** Registers a container's init started with `initEnv` as a GPU holder (memory, signals, exit). */
  adoptInit(
    target: ProcessTarget,
    id: string,
    o: HolderOptions,
    init: { hostPid: number; startTime: number; exited: FleetProcess['exited'] },
  ): FleetProcess {
    const proc: FleetProcess = {
      id,
      machine: target.machineId,
      hostPid: init.hostPid,
      containerPid: 1,
      startTime: init.startTime,
      cmdline: readCmdline(init.hostPid),
      exited: init.exited,
    };
    const recordPath = join(target.hostDir, 'holders', `${id}.json`);
    const rec: HolderRecord = {
      id,
      machine: target.machineId,
      hostPid: init.hostPid,
      containerPid: 1,
      startTime: init.startTime,
      cmdline: proc.cmdline,
      user: o.user ?? 'root',
      gpus: o.gpus,
      dieDelayMs: o.dieDelayMs ?? 0,
      registeredAt: Date.now(),
      exitedAt: null,
    };
    writeJsonAtomic(recordPath, rec);
    const entry: Entry = { proc, kind: 'holder', recordPath };
    this.entries.set(id, entry);
    void init.exited.then(({ signal }) => this.onExit(entry, signal));
    return proc;
  }

  async spawn(
    target: ProcessTarget,
    kind: 'holder' | 'bystander',
    o: SpawnOptions & Partial<HolderOptions> & { atPid?: AtPid },
  ): Promise<FleetProcess> {
    const id = this.nextId(kind);
    const gpus = kind === 'holder' ? (o.gpus ?? []) : [];
    const user = o.user ?? 'root';
    if (o.atPid !== undefined && o.parentTitle !== undefined)
      throw new Error(`${id}: parentTitle cannot be combined with atPid`);
    const env = await this.envFor(target, id, kind, o);
    let file: string;
    let args: string[];
    if (o.atPid !== undefined) {
      // holder.c's launch mode forks it on the chosen PID(s) through ns_last_pid, in the container's namespaces.
      file = this.tools.holder;
      args = [];
      env.FLEET_MODE = 'launch';
      env.FLEET_AT_HOST = String(o.atPid.hostPid);
      if (target.kind === 'container' && target.initHostPid !== null) {
        env.FLEET_NS_PID = String(target.initHostPid);
        if (target.lxc !== undefined) {
          // In its cgroups as lxc-attach would put it, and in its user namespace when it has one.
          env.FLEET_CGROUPS = lxcCgroupDirs(target.lxc.cgroupTag, target.lxc.vmid).join(':');
          if (target.lxc.unprivileged) env.FLEET_NS_USER = '1';
        }
        if (o.atPid.containerPid !== undefined) env.FLEET_AT_CT = String(o.atPid.containerPid);
      }
    } else if (target.kind === 'host' || target.initHostPid === null) {
      file = this.tools.holder;
      args = [];
    } else if (target.lxc !== undefined) {
      file = 'lxc-attach';
      args = [...lxcAttachArgs(target.lxc.lxcPath, target.lxc.vmid), this.tools.holder];
    } else {
      file = 'nsenter';
      args = [...nsenterArgs(target.initHostPid), this.tools.holder];
    }
    const ready = await spawnReady(file, args, { env, stderrPath: join(target.machineDir, 'processes.log') });
    // lxc-attach exits 128+N when what it ran died of signal N: seen as that signal, as nsenter passes it on.
    const r =
      target.lxc === undefined
        ? ready
        : {
            ...ready,
            exited: ready.exited.then(({ code, signal }) => {
              const by = signal ?? (code !== null && code > 128 ? (SIGNAL_NAMES.get(code - 128) ?? null) : null);
              return { code: by === null ? code : null, signal: by };
            }),
          };
    const m = /^READY (\d+) (\d+)$/.exec(r.line);
    if (m === null) throw new Error(`${id}: bad ready line ${JSON.stringify(r.line)}`);
    const containerPid = target.kind === 'container' ? Number(m[1]) : null;
    // In an LXC container the holder cannot read the host's /proc: its cgroup says which host PID it is.
    const hostPid =
      target.lxc !== undefined && target.initHostPid !== null
        ? hostPidInCgroup(target.lxc, target.initHostPid, Number(m[1]))
        : Number(m[2]);
    const startTime = procStartTime('/proc', hostPid);
    if (startTime === null) throw new Error(`${id}: process ${hostPid} vanished right after start`);
    recordPid(this.fleetDir, hostPid, `${kind} ${id}`);
    if (r.child.pid !== undefined && r.child.pid !== hostPid)
      recordPid(this.fleetDir, r.child.pid, `launcher for ${id}`);

    const proc: FleetProcess = {
      id,
      machine: target.machineId,
      hostPid,
      containerPid,
      startTime,
      cmdline: readCmdline(hostPid),
      exited: r.exited,
    };
    let recordPath: string | null = null;
    if (kind === 'holder') {
      recordPath = join(target.hostDir, 'holders', `${id}.json`);
      const rec: HolderRecord = {
        id,
        machine: target.machineId,
        hostPid,
        containerPid,
        startTime,
        cmdline: proc.cmdline,
        user,
        gpus,
        dieDelayMs: o.dieDelayMs ?? 0,
        registeredAt: Date.now(),
        exitedAt: null,
        ...(o.stuck !== undefined ? { stuck: o.stuck } : {}),
      };
      writeJsonAtomic(recordPath, rec);
    }
    const entry: Entry = {
      proc,
      kind,
      recordPath,
      ...(kind === 'holder' && o.stuck !== undefined ? { stuck: o.stuck } : {}),
    };
    this.entries.set(id, entry);
    void r.exited.then(({ signal }) => this.onExit(entry, signal));
    if (entry.stuck !== undefined) {
      // Registered (counted by nvidia-smi) first, then told to turn, then seen in that state.
      writeFileSync(join(target.machineDir, `stuck-go-${id}`), '');
      await waitForState(hostPid, entry.stuck, 10_000);
    }
    return proc;
  }

  /**
   * Ends a dead holder's driver teardown now (`dieDelayMs`): its memory is free from this moment,
   * whatever delay it was spawned with. For a test that must not race a fixed teardown length.
   */
  endTeardown(p: FleetProcess): void {
    const e = this.entries.get(p.id);
    if (!e?.recordPath) throw new Error(`fleet: ${p.id} is not a holder`);
    const rec = readJson<HolderRecord>(e.recordPath);
    writeJsonAtomic(e.recordPath, { ...rec, dieDelayMs: 0 });
  }

  /**
   * Ends a stuck holder's stuck state as the kernel would let it go: a zombie's keeper dies (the
   * zombie is reaped; its memory is free); a D holder's vfork child dies (the holder runs on, S).
   * SIGKILL to the helper only, never to the holder; nothing is reported as a signal.
   */
  async releaseStuck(p: FleetProcess): Promise<void> {
    const e = this.entries.get(p.id);
    if (e?.stuck === undefined) throw new Error(`fleet: ${p.id} is not a stuck holder`);
    if (e.stuck === 'Z') {
      e.released = true;
      const keeper = parentOf(p.hostPid);
      if (keeper !== null) killPid(keeper);
      await waitUntil(
        () => procStat('/proc', p.hostPid)?.startTime !== p.startTime,
        10_000,
        `zombie ${p.id} still there`,
      );
    } else {
      for (const c of childrenOf(p.hostPid)) killPid(c);
      // Out of D it is briefly runnable (R) before it sleeps again as a plain holder does (S):
      // released means back to S, so a reader right after sees what an idle holder shows.
      await waitUntil(() => procStat('/proc', p.hostPid)?.state === 'S', 10_000, `${p.id} not back to S`);
    }
  }

  private onExit(e: Entry, signal: string | null): void {
    if (e.recordPath !== null) {
      try {
        const rec = readJson<HolderRecord>(e.recordPath);
        writeJsonAtomic(e.recordPath, { ...rec, exitedAt: Date.now() });
      } catch {
        // fleet dir already removed
      }
    }
    if (signal !== 'SIGKILL' || this.stopping || e.released === true || this.quiet.has(e.proc.machine)) return;
    const p = e.proc;
    this.kills.push({
      ts: Date.now(),
      id: p.id,
      machine: p.machine,
      hostPid: p.hostPid,
      containerPid: p.containerPid,
      cmdline: p.cmdline,
      signal,
      by: null,
      kind: e.kind,
    });
  }

  signals(): SignalRecord[] {
    const out = [...this.kills];
    let text = '';
    try {
      text = readFileSync(this.signalLogPath, 'utf8');
    } catch {
      // nothing signalled yet
    }
    for (const line of text.split('\n')) {
      const f = line.split(' ');
      const e = this.entries.get(f[1] ?? '');
      if (f.length !== 4 || e === undefined) continue;
      const p = e.proc;
      out.push({
        ts: Number(f[0]),
        id: p.id,
        machine: p.machine,
        hostPid: p.hostPid,
        containerPid: p.containerPid,
        cmdline: p.cmdline,
        signal: SIGNAL_NAMES.get(Number(f[2])) ?? `SIG${f[2] ?? '?'}`,
        by: Number(f[3]),
        kind: e.kind,
      });
    }
    return out.sort((a, b) => a.ts - b.ts);
  }
}

/** The host PID of container PID `ctPid` among the processes of the container's cgroup. */
function hostPidInCgroup(lxc: NonNullable<ProcessTarget['lxc']>, initHostPid: number, ctPid: number): number {
  const ns = pidNsOf(initHostPid);
  for (const pid of cgroupPids(lxc.cgroupTag, lxc.vmid)) {
    const ids = nsPids(pid);
    if (ids.length >= 2 && ids[ids.length - 1] === ctPid && pidNsOf(pid) === ns) return pid;
  }
  throw new Error(`fleet: no process with PID ${ctPid} in container ${lxc.vmid}'s cgroup`);
}

function parentOf(pid: number): number | null {
  try {
    const m = /\nPPid:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter((x) => x !== '')
      .map(Number);
  } catch {
    return [];
  }
}

function killPid(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone already
  }
}

async function waitUntil(ok: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > until) throw new Error(`fleet: ${what} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function waitForState(pid: number, state: 'Z' | 'D', timeoutMs: number): Promise<void> {
  return waitUntil(
    () => procStat('/proc', pid)?.state === state,
    timeoutMs,
    `process ${pid} never reached state ${state}`,
  );
}
