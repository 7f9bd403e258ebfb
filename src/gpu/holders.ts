import { inContainerCgroup } from './container-cgroup.ts';
import type { GpuPassing } from './gpu-map.ts';
import { containerUidOf, type UidMap } from './id-map.ts';
import type { ProcStat } from './parse/index.ts';
import type { ProcessIdentity } from './process-ref.ts';
import type { Gpu, GpuProcess, Holder } from './types.ts';

/**
 * One PID's readings as the reading template prints them (see `parseProcReadings` in
 * src/agent-grammar/templates/unstick-commands.ts). A null field could not be read: the process exited
 * between reads, or we may not look.
 */
export interface ProcReading {
  /** PID in the namespace where the reading ran (host PID on the host, container PID inside). */
  pid: number;
  stat: ProcStat | null;
  /** `NSpid:` values, outermost namespace first. */
  nsPids: number[] | null;
  /** Real uid (`Uid:`) as the namespace the reading ran in sees it (on the host: the shifted host uid). */
  uid: number | null;
  pidNs: string | null;
  cmdline: string | null;
  /** `/proc/<pid>/cgroup` text (one `<id>:<controllers>:<path>` line per hierarchy); absent: not read. */
  cgroup?: string;
  /**
   * Its parents, nearest first, below PID 1 and below a container's init: PIDs in the same
   * namespace as `pid`, and their command lines (the launcher above a TP rank). Absent: none read.
   */
  parents?: Array<{ pid: number; cmdline: string }>;
}

/** What the host tells: its GPUs, compute apps (host PIDs), /proc of those PIDs, and the container's PID namespace. */
export interface HostReadings {
  gpus: readonly Gpu[];
  apps: readonly GpuProcess[];
  procs: readonly ProcReading[];
  /** `readlink /proc/<init host pid>/ns/pid` of the target container's init (`lxc-info -n <vmid> -p`). */
  targetPidNs: string;
  /**
   * Which GPUs the host passed to the container (`pct config`) and each GPU's device minor
   * (`nvidia-smi -q -x`): the host's own view that container GPUs are matched by. Absent = not read.
   */
  passing?: GpuPassing;
  /**
   * The target container's uid map from its `pct config` (src/gpu/id-map.ts): host uids are shown
   * as the container's users through it, never through an assumed shift. Null: the config could
   * not be read or its map is malformed; absent: not read (container uids stay unknown).
   */
  uidMap?: UidMap | null;
  /**
   * The target's vmid: a host process is the container's only when its cgroup is `lxc/<vmid>`
   * as well as its PID namespace the init's (src/gpu/container-cgroup.ts). The unstick and status
   * reads always set it; absent (hand-made readings) leaves membership to the PID namespace.
   */
  targetVmid?: number;
}

/** What the container tells: `fuser -v /dev/nvidia*` holders (container PIDs) and their /proc readings. */
export interface ContainerReadings {
  holders: readonly Holder[];
  procs: readonly ProcReading[];
}

/** A process holding GPU memory, as host nvidia-smi lists it, placed relative to the target container. */
export interface GpuHolder {
  /** Host GPU index (host nvidia-smi numbering; a container may number its GPUs differently). */
  gpuIndex: number | null;
  gpuUuid: string | null;
  usedMiB: number | null;
  process: ProcessIdentity;
  /** Same PID namespace as the target container's init. */
  inTarget: boolean;
  /** PID 1 of the target container: ignores signals sent from inside its own namespace. */
  isContainerInit: boolean;
  /** The container's own `fuser` listed this container PID on a device node. */
  seenInContainer: boolean;
  /**
   * A zombie (state Z) only: its parent, whose reaping frees the memory (no signal to the zombie
   * can). Host PID and command line from the host's reading (null: not read, e.g. the parent is
   * the container's init or PID 1, where the reading's walk stops).
   */
  zombieParent?: { hostPid: number | null; cmdline: string | null };
}

/** A compute app whose host PID could not be identified (exited while we read, or /proc unreadable). */
export interface UnresolvedHolder {
  gpuIndex: number | null;
  gpuUuid: string | null;
  usedMiB: number | null;
  hostPid: number;
  reason: 'gone' | 'unreadable';
}

/**
 * A container process with a `/dev/nvidia*` node open that holds no GPU memory per host
 * nvidia-smi: monitoring tools (NVML, nvidia-smi loops) look like this. Never a target.
 */
export interface DeviceOnlyHolder {
  containerPid: number;
  devices: string[];
  user: string | null;
  command: string | null;
}

export interface HolderReport {
  holders: GpuHolder[];
  unresolved: UnresolvedHolder[];
  deviceOnly: DeviceOnlyHolder[];
}

const PID_NS = /^pid:\[\d+\]$/;

/** `pid:[4026532845]` or null: anything else is not a PID-namespace link. */
export function parsePidNsLink(text: string): string | null {
  const t = text.trim();
  return PID_NS.test(t) ? t : null;
}

/** A host-side reading made into an identity, or null when any identifying field is missing. */
export function identityOf(r: ProcReading): ProcessIdentity | null {
  if (r.stat === null || r.nsPids === null || r.nsPids.length === 0 || r.pidNs === null) return null;
  const containerPid = r.nsPids[r.nsPids.length - 1];
  if (containerPid === undefined || r.nsPids[0] !== r.pid) return null;
  const cmdline = r.cmdline !== null && r.cmdline.trim() !== '' ? r.cmdline : `[${r.stat.comm}]`;
  return {
    hostPid: r.pid,
    containerPid,
    startTimeTicks: r.stat.startTimeTicks,
    cmdline,
    pidNs: r.pidNs,
    state: r.stat.state,
  };
}

/**
 * The target container's process: in its init's PID namespace and, when the vmid is known, in its
 * cgroup `lxc/<vmid>` (on a shared host the same /proc shows every container's processes, and a
 * host root `nsenter`ed into the namespace is not the container's).
 */
function inTargetContainer(r: ProcReading, id: ProcessIdentity, host: HostReadings): boolean {
  if (id.pidNs !== host.targetPidNs) return false;
  if (host.targetVmid === undefined) return true;
  return r.cgroup !== undefined && inContainerCgroup(r.cgroup, host.targetVmid);
}

/** A host uid as the target container's uid, by the map its config says; null when either is unknown. */
function mappedUid(hostUid: number | null, map: UidMap | null | undefined): number | null {
  if (hostUid === null || map === null || map === undefined) return null;
  return containerUidOf(map, hostUid);
}

/**
 * GPU holders from both points of view. Host nvidia-smi decides *what holds memory* (it is the
 * only view with every PID); the container's readings add what it can see (fuser) and the uid
 * as the container knows it. A container process with a device open but no memory in use
 * (a monitor) is reported apart and never becomes a holder.
 */
export function buildHolders(host: HostReadings, container: ContainerReadings): HolderReport {
  const hostProcs = new Map(host.procs.map((r) => [r.pid, r]));
  const ctProcs = new Map(container.procs.map((r) => [r.pid, r]));
  const fuserPids = new Set(container.holders.map((h) => h.pid));
  const uuidToIndex = new Map(host.gpus.filter((g) => g.uuid !== null).map((g) => [g.uuid, g.index]));

  const holders: GpuHolder[] = [];
  const unresolved: UnresolvedHolder[] = [];
  for (const app of host.apps) {
    const gpuIndex = app.gpuIndex ?? (app.gpuUuid !== null ? (uuidToIndex.get(app.gpuUuid) ?? null) : null);
    const where = { gpuIndex, gpuUuid: app.gpuUuid, usedMiB: app.usedMiB };
    const reading = hostProcs.get(app.pid);
    if (reading === undefined || reading.stat === null) {
      unresolved.push({ ...where, hostPid: app.pid, reason: 'gone' });
      continue;
    }
    const id = identityOf(reading);
    if (id === null) {
      unresolved.push({ ...where, hostPid: app.pid, reason: 'unreadable' });
      continue;
    }
    const inTarget = inTargetContainer(reading, id, host);
    // The container's own reading counts only if it is the same process (PID + start time):
    // a container PID reused between the two reads must not lend its uid or visibility.
    const ct = inTarget ? ctProcs.get(id.containerPid) : undefined;
    const ctSame =
      ct !== undefined &&
      ct.stat !== null &&
      ct.stat.startTimeTicks === id.startTimeTicks &&
      (ct.pidNs === null || ct.pidNs === id.pidNs);
    const uid = ctSame && ct.uid !== null ? ct.uid : inTarget ? mappedUid(reading.uid, host.uidMap) : null;
    const process: ProcessIdentity = {
      ...id,
      ...(uid !== null ? { uid } : {}),
      ...(reading.uid !== null ? { hostUid: reading.uid } : {}),
    };
    const parent = reading.parents?.[0];
    holders.push({
      ...where,
      process,
      inTarget,
      isContainerInit: inTarget && id.containerPid === 1,
      seenInContainer: inTarget && fuserPids.has(id.containerPid) && (ct === undefined || ctSame),
      ...(id.state === 'Z'
        ? { zombieParent: { hostPid: parent?.pid ?? null, cmdline: parent ? parent.cmdline : null } }
        : {}),
    });
  }

  const memoryPids = new Set(holders.filter((h) => h.inTarget).map((h) => h.process.containerPid));
  const deviceOnly = new Map<number, DeviceOnlyHolder>();
  for (const h of container.holders) {
    if (memoryPids.has(h.pid)) continue;
    const seen = deviceOnly.get(h.pid);
    if (seen) {
      if (!seen.devices.includes(h.device)) seen.devices.push(h.device);
    } else {
      deviceOnly.set(h.pid, { containerPid: h.pid, devices: [h.device], user: h.user, command: h.command });
    }
  }
  return { holders, unresolved, deviceOnly: [...deviceOnly.values()] };
}

/** Why a planned target may no longer be signalled; null = still the same process, still a target. */
export type StaleReason = 'gone' | 'pid_reused' | 'left_namespace' | 'left_cgroup' | 'no_gpu_memory' | 'unreadable';

export interface RecheckInput {
  /** Fresh reading of the PID in the namespace the signal will be sent from. */
  reading: ProcReading | undefined;
  /** Which PID the reading is keyed by: host PID (host-side kill) or container PID (container-side). */
  view: 'host' | 'container';
  targetPidNs: string;
  /** Host PIDs host nvidia-smi lists right now; null when the step does not require it (tier-1 SIGKILL of survivors). */
  gpuHostPids: ReadonlySet<number> | null;
  /** Host view: the target's vmid, so the process must still be in its cgroup `lxc/<vmid>`. */
  vmid?: number;
}

/**
 * Re-check one planned target just before signalling it: same PID and start time, still in the
 * target's PID namespace, and (when asked) still holding GPU memory. Pure.
 */
export function recheckTarget(planned: ProcessIdentity, x: RecheckInput): StaleReason | null {
  const r = x.reading;
  if (r === undefined || r.stat === null) return 'gone';
  const expectedPid = x.view === 'host' ? planned.hostPid : planned.containerPid;
  if (r.pid !== expectedPid) return 'unreadable';
  if (r.stat.startTimeTicks !== planned.startTimeTicks) return 'pid_reused';
  if (r.pidNs === null) return 'unreadable';
  if (r.pidNs !== x.targetPidNs) return 'left_namespace';
  if (x.view === 'host') {
    const last = r.nsPids?.[r.nsPids.length - 1];
    if (last !== planned.containerPid) return 'left_namespace';
    if (x.vmid !== undefined && (r.cgroup === undefined || !inContainerCgroup(r.cgroup, x.vmid))) return 'left_cgroup';
  }
  if (x.gpuHostPids !== null && !x.gpuHostPids.has(planned.hostPid)) return 'no_gpu_memory';
  return null;
}

/** Plain words for a stale reason, for the thread. */
export function staleReasonText(r: StaleReason): string {
  switch (r) {
    case 'gone':
      return 'already exited';
    case 'pid_reused':
      return 'its PID now belongs to a different process (start time changed)';
    case 'left_namespace':
      return 'no longer in the container’s PID namespace';
    case 'left_cgroup':
      return 'not in the container’s cgroup, so not the container’s process';
    case 'no_gpu_memory':
      return 'no longer holds GPU memory';
    case 'unreadable':
      return 'its /proc entry could not be read';
  }
}
