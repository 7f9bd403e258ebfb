/**
 * On-disk state of a simulated machine, shared by the fleet (test process) and the fake tools
 * (bundled, run by `node` over SSH). Node built-ins only: this file is bundled into the tools.
 *
 * Layout under the fleet dir:
 *   m/<id>/machine.json       MachineInfo (both kinds)
 *   m/<id>/bin/               fake tools first on that machine's PATH
 *   m/<id>/tools.log          JSON lines: every fake-tool invocation (ToolLogEntry)
 *   m/<id>/hang               present = nvidia-smi hangs on this machine (a host's flag hangs its containers too)
 *   m/<host>/drop             present = each nvidia-smi call on this host first drops its SSH connections (tool server)
 *   m/<host>/state.json       HostState (GPUs, leaks, errors, RAM)
 *   m/<host>/holders/*.json   HolderRecord, one per GPU holder ever spawned on that host
 *   m/<host>/dev/             device files (nvidia0..N, nvidiactl, nvidia-uvm, nvidia-uvm-tools)
 *   m/<host>/containers/<vmid>.json  ContainerRecord (for the fake pct)
 *   m/<host>/kmsg.jsonl       JSON lines: the host's kernel log (KernelLogLine), for the fake journalctl and dmesg
 */
import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  renameSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';

export interface GpuState {
  index: number;
  name: string;
  uuid: string;
  /** `00000000:18:00.0` form. */
  busId: string;
  memoryTotalMiB: number;
  /** Memory held with no process (only a host-level reset frees it). */
  leakMiB: number;
  persistence: boolean;
  /** Last successful `nvidia-smi -r` (ms): frees what dead holders were still releasing. */
  resetAt: number | null;
  /** Per-GPU failure; nvidia-smi reports it for this GPU. */
  error: 'gpu_lost' | null;
  /** `gpu_recovery_action` (`None`, `GPU Reset`, `Node Reboot`, ...); absent: `None`. */
  recoveryAction?: string;
  /** Fell off the bus and was removed: nvidia-smi no longer lists it (the others are numbered without it). */
  gone?: boolean;
}

export interface HostState {
  driverVersion: string;
  cudaVersion: string;
  gpus: GpuState[];
  /** Driver-wide failure: every nvidia-smi call fails with it. */
  error: 'nvml_version_mismatch' | null;
  ram: { totalBytes: number; usedBytes: number };
  /** false: the driver predates `gpu_recovery_action` (a query naming it is refused, exit 2). Absent: supported. */
  recoveryActionField?: boolean;
}

export interface MachineInfo {
  id: string;
  kind: 'host' | 'container';
  /** The host machine's id (itself for a host). */
  hostId: string;
  /** Absolute dir of the host machine (holds state.json, holders/, dev/). */
  hostDir: string;
  vmid: number | null;
  /** Where this machine's tools read the host's /proc (liveness of holders by host PID). */
  hostProc: string;
  /** A container's cgroup (path under the v2 hierarchy containing `/lxc/<vmid>/`); null when none. */
  cgroup: string | null;
  /** A container's GPUs: host indices passed to it (absent: all of the host's). */
  gpus?: number[];
  /** A host whose containers are real LXC: their lxcpath (its lxc-info is the real one, given `-P`). */
  lxcPath?: string;
}

export interface HolderRecord {
  id: string;
  /** Machine the process runs on (a host or one of its containers). */
  machine: string;
  hostPid: number;
  containerPid: number | null;
  /** /proc/<pid>/stat field 22 (clock ticks since boot), read in the host's PID namespace. */
  startTime: number;
  cmdline: string;
  user: string;
  gpus: Array<{ index: number; mib: number }>;
  /** After the process dies its memory stays allocated this long (driver teardown). */
  dieDelayMs: number;
  registeredAt: number;
  /** Set by the fleet when it sees the process exit. */
  exitedAt: number | null;
  /** A stuck holder (holder.c FLEET_STUCK): `Z` still holds while it is a zombie; `D` sleeps uninterruptibly. */
  stuck?: 'Z' | 'D';
}

export interface ContainerRecord {
  id: string;
  vmid: number;
  dir: string;
  /** A real LXC container: the lxcpath it lives under (pct and lxc-info pass it as `-P`); absent: a namespace container. */
  lxcPath?: string;
  /** ...and the first component of its cgroups (lxc-container.ts). */
  cgroupTag?: string;
}

/** `m/<container>/spoof.json`: container GPU index → identity its nvidia-smi reports instead. */
export type GpuSpoof = Record<string, { uuid: string; busId: string }>;

/**
 * The GPUs a machine's nvidia-smi shows, with the index it shows them under: a host all of its
 * own; a container the ones passed to it, in bus-id order, renumbered from 0 (NVML's order).
 */
export function visibleGpus(
  state: HostState,
  info: Pick<MachineInfo, 'kind' | 'gpus'>,
): Array<{ gpu: GpuState; index: number }> {
  const present = state.gpus.filter((g) => g.gone !== true);
  // A GPU that left the bus is not enumerated: NVML numbers the rest without it.
  if (info.kind === 'host' || info.gpus === undefined)
    return present.map((gpu, i) => ({ gpu, index: present.length === state.gpus.length ? gpu.index : i }));
  const passed = new Set(info.gpus);
  return present
    .filter((g) => passed.has(g.index))
    .sort((a, b) => (a.busId < b.busId ? -1 : a.busId > b.busId ? 1 : 0))
    .map((gpu, index) => ({ gpu, index }));
}

export interface ToolLogEntry {
  ts: number;
  tool: string;
  argv: string[];
}

export function machineDir(fleetDir: string, id: string): string {
  return join(fleetDir, 'm', id);
}

export function readJson<T>(path: string): T {
  return JSON.parse(readFileSync(path, 'utf8')) as T;
}

/** Atomic replace (write temp + rename), so a concurrent nvidia-smi never reads half a file. */
export function writeJsonAtomic(path: string, value: unknown): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
  const fd = openSync(tmp, 'w', 0o644);
  try {
    writeSync(fd, `${JSON.stringify(value, null, 2)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

export function readHolders(hostDir: string): HolderRecord[] {
  const dir = join(hostDir, 'holders');
  if (!existsSync(dir)) return [];
  const out: HolderRecord[] = [];
  for (const name of readdirSync(dir)) {
    if (!name.endsWith('.json')) continue;
    try {
      out.push(readJson<HolderRecord>(join(dir, name)));
    } catch {
      // a record being replaced right now: the rename makes the next read whole
    }
  }
  return out;
}

/** Start time (field 22 of /proc/<pid>/stat) or null when the process is gone or a zombie. */
export function procStartTime(procRoot: string, pid: number): number | null {
  let stat: string;
  try {
    stat = readFileSync(join(procRoot, String(pid), 'stat'), 'utf8');
  } catch {
    return null;
  }
  const close = stat.lastIndexOf(')');
  if (close < 0) return null;
  // fields after the comm: [0]=state (field 3) ... [19]=starttime (field 22)
  const rest = stat.slice(close + 2).split(' ');
  if (rest[0] === 'Z' || rest[0] === 'X') return null;
  const start = Number(rest[19]);
  return Number.isFinite(start) ? start : null;
}

/** State letter (field 3 of /proc/<pid>/stat) and start time, or null when there is no such process. */
export function procStat(procRoot: string, pid: number): { state: string; startTime: number } | null {
  let stat: string;
  try {
    stat = readFileSync(join(procRoot, String(pid), 'stat'), 'utf8');
  } catch {
    return null;
  }
  const close = stat.lastIndexOf(')');
  if (close < 0) return null;
  const rest = stat.slice(close + 2).split(' ');
  const start = Number(rest[19]);
  return Number.isFinite(start) ? { state: rest[0] ?? '?', startTime: start } : null;
}

/** Still holding: the same process (PID + start time), alive, or a zombie holder made to hold (`stuck: 'Z'`). */
function holderAlive(procRoot: string, h: HolderRecord): boolean {
  if (h.stuck === 'Z') {
    const st = procStat(procRoot, h.hostPid);
    return st !== null && st.startTime === h.startTime && st.state !== 'X';
  }
  return procStartTime(procRoot, h.hostPid) === h.startTime;
}

/** Memory a holder still pins: while alive, and for dieDelayMs after it died. */
function holderPinsMemory(procRoot: string, h: HolderRecord, now: number): boolean {
  if (holderAlive(procRoot, h)) return true;
  if (h.dieDelayMs <= 0) return false;
  // Died but the fleet has not noticed yet: still releasing.
  if (h.exitedAt === null) return true;
  return now < h.exitedAt + h.dieDelayMs;
}

export interface GpuUsage {
  gpu: GpuState;
  usedMiB: number;
  /** Live holders on this GPU (host PIDs), with their MiB on it. */
  processes: Array<{ holder: HolderRecord; mib: number }>;
}

/** What the driver would report now: per GPU, memory in use (holders + releasing + leak) and live processes. */
export function gpuUsage(state: HostState, holders: HolderRecord[], procRoot: string, now: number): GpuUsage[] {
  return state.gpus.map((gpu) => {
    let used = gpu.leakMiB;
    const processes: GpuUsage['processes'] = [];
    for (const h of holders) {
      for (const g of h.gpus) {
        if (g.index !== gpu.index) continue;
        const alive = holderAlive(procRoot, h);
        if (alive) processes.push({ holder: h, mib: g.mib });
        // A reset is refused while the holder lives, so a reset after it registered came after its death.
        const resetSince = gpu.resetAt !== null && gpu.resetAt >= h.registeredAt;
        if (alive || (!resetSince && holderPinsMemory(procRoot, h, now))) used += g.mib;
      }
    }
    return { gpu, usedMiB: Math.min(used, gpu.memoryTotalMiB), processes };
  });
}

export function appendToolLog(machineDirPath: string, tool: string, argv: string[]): void {
  const fd = openSync(join(machineDirPath, 'tools.log'), 'a', 0o666);
  try {
    writeSync(fd, `${JSON.stringify({ ts: Date.now(), tool, argv } satisfies ToolLogEntry)}\n`);
  } finally {
    closeSync(fd);
  }
}

/** One line of a simulated host's kernel log. */
export interface KernelLogLine {
  /** When it was logged (ms since the epoch). */
  ts: number;
  text: string;
}

export function readKernelLog(hostDir: string): KernelLogLine[] {
  const path = join(hostDir, 'kmsg.jsonl');
  if (!existsSync(path)) return [];
  const out: KernelLogLine[] = [];
  for (const l of readFileSync(path, 'utf8').split('\n')) {
    if (l === '') continue;
    try {
      out.push(JSON.parse(l) as KernelLogLine);
    } catch {
      // a line being appended right now
    }
  }
  return out;
}
