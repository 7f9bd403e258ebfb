/**
 * Who holds each GPU of a status snapshot, in the snapshot's own GPU numbering: the Processes
 * column of `/gpu status`. Pure.
 *
 * - Host view: host nvidia-smi's compute apps (host PIDs, MiB), each named from its command line.
 * - Container view: nvidia-smi inside a container lists no process (it cannot see host PIDs), so
 *   the holders are the container's own `fuser` rows on `/dev/nvidia<minor>`, placed on a GPU by
 *   the host's GPU map (which minor is which UUID, host `nvidia-smi -q -x`; which GPUs the host
 *   passed, `pct config`), never by the container's word alone; the host's compute apps in the
 *   container's PID namespace add the host PID and the MiB.
 *
 * A command is named from its command line, not from the kernel's 15-character comm, and only
 * its program (and a Python module or script): arguments may hold tokens and are never kept.
 */
import { inContainerCgroup } from './container-cgroup.ts';
import { type GpuPassing, matchContainerGpus } from './gpu-map.ts';
import type { HostReadings, ProcReading } from './holders.ts';
import type { Gpu, GpuProcess, Holder } from './types.ts';

/** One process on one GPU, as the status table shows it. */
export interface GpuHolderRow {
  /** The snapshot's own GPU index (the container's numbering in the container view). */
  gpuIndex: number;
  /** PID inside the container; null on the host view for a host process. */
  containerPid: number | null;
  /** Host PID; null when the host was not read. */
  hostPid: number | null;
  /** A readable program name from the command line (see `readableCommand`), else the comm. */
  command: string | null;
  usedMiB: number | null;
}

/** The rows, and why some could not be placed on a GPU (null when every holder was placed). */
export interface GpuHolderRows {
  rows: GpuHolderRow[];
  note: string | null;
}

const READABLE_MAX = 40;
const PYTHON = /^python[0-9.]*$/;

/**
 * A program's readable name from its command line: the first word's base name; for Python, with
 * its `-m module` or its script's base name. A process that set its title (`sglang::scheduler_TP0`)
 * shows the title. Nothing after that is kept (arguments may hold secrets). Null when empty.
 */
export function readableCommand(cmdline: string | null): string | null {
  if (cmdline === null) return null;
  const words = cmdline.trim().split(/\s+/).filter(Boolean);
  const first = words[0];
  if (first === undefined) return null;
  const base = first.includes('/') && !first.endsWith('/') ? (first.split('/').pop() ?? first) : first;
  let name = base;
  if (PYTHON.test(base)) {
    const next = words[1];
    if (next === '-m' && words[2] !== undefined) name = `${base} -m ${words[2]}`;
    else if (next !== undefined && !next.startsWith('-')) name = `${base} ${next.split('/').pop() ?? next}`;
  }
  return name.length > READABLE_MAX ? `${name.slice(0, READABLE_MAX - 1)}…` : name;
}

/** `/dev/nvidia<minor>` → minor; the control, UVM and caps nodes are no GPU. */
function deviceMinor(device: string): number | null {
  const m = /^\/dev\/nvidia(\d{1,3})$/.exec(device);
  return m?.[1] !== undefined ? Number(m[1]) : null;
}

function commandOf(readings: ReadonlyMap<number, ProcReading>, pid: number, fallback: string | null): string | null {
  const r = readings.get(pid);
  return readableCommand(r?.cmdline ?? null) ?? (r?.stat?.comm ? `[${r.stat.comm}]` : null) ?? fallback;
}

/** Host view: host nvidia-smi's compute apps, each named from its /proc reading (host PIDs). */
export function hostHolderRows(
  gpus: readonly Gpu[],
  apps: readonly GpuProcess[],
  procs: readonly ProcReading[],
): GpuHolderRows {
  const readings = new Map(procs.map((r) => [r.pid, r]));
  const rows: GpuHolderRow[] = [];
  for (const p of apps) {
    const g = gpus.find(
      (x) => (p.gpuIndex !== null && x.index === p.gpuIndex) || (p.gpuUuid !== null && x.uuid === p.gpuUuid),
    );
    if (g?.index === null || g?.index === undefined) continue;
    const ns = readings.get(p.pid)?.nsPids ?? null;
    const inner = ns !== null && ns.length > 1 ? (ns[ns.length - 1] ?? null) : null;
    rows.push({
      gpuIndex: g.index,
      containerPid: inner,
      hostPid: p.pid,
      command: commandOf(readings, p.pid, p.name),
      usedMiB: p.usedMiB,
    });
  }
  return { rows, note: null };
}

/** What the host says about the container, for the container view. */
export interface HostSide {
  hostId: string;
  gpus: readonly Gpu[];
  passing: GpuPassing;
  readings: Pick<HostReadings, 'apps' | 'procs' | 'targetPidNs' | 'targetVmid'>;
}

/**
 * Container view: the container's fuser holders on GPU device nodes, placed by the host's GPU
 * map, with host PID and MiB from the host's compute apps in the container's PID namespace and
 * cgroup `lxc/<vmid>` (and
 * those apps fuser did not list, too). `host` null: the host could not be read (`hostProblem`),
 * so no holder is placed and the note says which processes hold which device.
 */
export function containerHolderRows(
  containerGpus: readonly Gpu[],
  holders: readonly Holder[],
  procs: readonly ProcReading[],
  host: HostSide | null,
  hostProblem: string | null,
): GpuHolderRows {
  const readings = new Map(procs.map((r) => [r.pid, r]));
  const onGpus = holders.filter((h) => deviceMinor(h.device) !== null);
  if (host === null) {
    if (onGpus.length === 0) return { rows: [], note: null };
    return {
      rows: [],
      note: `which GPU each device file is could not be told: ${hostProblem ?? 'the host was not read'}`,
    };
  }
  const matches = matchContainerGpus(containerGpus, host.gpus, host.passing, host.hostId);
  /** Container GPU index by host device minor and by host UUID, from the host's records only. */
  const byMinor = new Map<number, number>();
  const byUuid = new Map<string, number>();
  matches.forEach((m, i) => {
    const cg = containerGpus[i];
    if (m.host === null || cg?.index === null || cg?.index === undefined) return;
    const hg = m.host;
    if (hg.uuid !== null) byUuid.set(hg.uuid, cg.index);
    const rec = host.passing.hostMinors.find((x) => x.uuid !== null && x.uuid === hg.uuid);
    if (rec?.minor !== null && rec?.minor !== undefined) byMinor.set(rec.minor, cg.index);
  });
  const hostGpuUuid = (p: GpuProcess): string | null =>
    p.gpuUuid ?? host.gpus.find((g) => g.index !== null && g.index === p.gpuIndex)?.uuid ?? null;
  /** Host compute apps in the container, keyed by container PID (start time checked when both sides read it). */
  const hostApps = new Map<number, Array<{ app: GpuProcess; gpuIndex: number | null }>>();
  for (const app of host.readings.apps) {
    const r = host.readings.procs.find((x) => x.pid === app.pid);
    if (!r || r.pidNs !== host.readings.targetPidNs || !r.nsPids || r.nsPids.length === 0) continue;
    // The container's only in its cgroup too (another container's process shows in the same host /proc).
    const vmid = host.readings.targetVmid;
    if (vmid !== undefined && (r.cgroup === undefined || !inContainerCgroup(r.cgroup, vmid))) continue;
    const cpid = r.nsPids[r.nsPids.length - 1];
    if (cpid === undefined) continue;
    const ct = readings.get(cpid);
    if (ct?.stat && r.stat && ct.stat.startTimeTicks !== r.stat.startTimeTicks) continue;
    const uuid = hostGpuUuid(app);
    const list = hostApps.get(cpid) ?? [];
    list.push({ app, gpuIndex: uuid !== null ? (byUuid.get(uuid) ?? null) : null });
    hostApps.set(cpid, list);
  }
  const rows: GpuHolderRow[] = [];
  const unplaced: string[] = [];
  const seen = new Set<string>();
  const add = (row: GpuHolderRow): void => {
    const k = `${row.gpuIndex}:${row.containerPid}`;
    if (!seen.has(k)) {
      seen.add(k);
      rows.push(row);
    }
  };
  // A fuser row places a container PID on a GPU by its device file; host nvidia-smi says whether
  // it holds memory there. One with the device open and no memory (a monitor) is no holder: it is
  // left to the details, as buildHolders leaves it out of the targets.
  for (const h of onGpus) {
    const minor = deviceMinor(h.device);
    const gpuIndex = minor !== null ? byMinor.get(minor) : undefined;
    if (gpuIndex === undefined) {
      unplaced.push(`${h.device} (PID ${h.pid})`);
      continue;
    }
    const app = (hostApps.get(h.pid) ?? []).find((a) => a.gpuIndex === gpuIndex)?.app;
    if (app === undefined) continue;
    add({
      gpuIndex,
      containerPid: h.pid,
      hostPid: app.pid,
      command: commandOf(readings, h.pid, h.command),
      usedMiB: app.usedMiB,
    });
  }
  // Memory holders fuser did not list (it ran as a user who may not see them): by the host's word.
  const hostReadings = new Map(host.readings.procs.map((r) => [r.pid, r]));
  for (const [cpid, list] of hostApps)
    for (const { app, gpuIndex } of list)
      if (gpuIndex !== null)
        add({
          gpuIndex,
          containerPid: cpid,
          hostPid: app.pid,
          command: commandOf(readings, cpid, null) ?? commandOf(hostReadings, app.pid, app.name),
          usedMiB: app.usedMiB,
        });
  rows.sort((a, b) => a.gpuIndex - b.gpuIndex || (a.containerPid ?? 0) - (b.containerPid ?? 0));
  return {
    rows,
    note:
      unplaced.length > 0
        ? `not placed on a GPU by ${host.hostId}'s GPU map: ${unplaced.join(', ')}${host.passing.problem ? ` (${host.passing.problem})` : ''}`
        : null,
  };
}
