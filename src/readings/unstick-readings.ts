import type { Machine } from '../config/machines.ts';
import { diagnose, type ContainerFailure, type Diagnosis } from '../gpu/diagnose.ts';
import { matchContainerGpus, type GpuPassing } from '../gpu/gpu-map.ts';
import { inContainerCgroup } from '../gpu/container-cgroup.ts';
import { buildHolders, type ContainerReadings, type HostReadings, type ProcReading } from '../gpu/holders.ts';
import { parsePctUidMap, type UidMap } from '../gpu/id-map.ts';
import { rootCauses } from '../gpu/root-cause.ts';
import { commandLinesOf, gpusSeen } from '../gpu/snapshot-causes.ts';
import { causeFields, type HolderProcs, type HostSideRead, rowFields } from '../gpu/snapshot-table.ts';
import type { MachineSnapshot } from '../gpu/snapshot.ts';
import { CodedError, ErrorCode, asCodedError } from '../errors.ts';
import type { CommandRecord } from '../incident/events.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { ExecResult, Route } from '../ssh/types.ts';
import { recordOf, takeSnapshot, type SnapshotDeps } from './snapshot.ts';
import {
  containerConfig,
  containerInitPid,
  hostGpuReport,
  parseLxcInitPid,
  parsePctConfigGpuMinors,
  parseProcReadings,
  parseXmlGpuMinors,
  readProcs,
} from '../agent-grammar/templates/unstick-commands.ts';

/**
 * The readings `/gpu unstick` decides from, gathered over the executor: each view's status
 * snapshot (reused as the before/after tables, with what `/gpu status` adds to its table: the
 * Processes column and the Why lines, from these same readings) plus what only unstick needs, the
 * /proc identity of every holder and the container's PID namespace as its host sees it.
 */

export type ReadingDeps = SnapshotDeps;

export type ReadOutcome<T> =
  /** `procs`: the holders' /proc read, null when no holder was there to read. */
  | { ok: true; snapshot: MachineSnapshot; readings: T; commands: CommandRecord[]; procs: HolderProcs | null }
  /** `snapshot`: the status snapshot, when it was read before a later read failed (still worth posting). */
  | {
      ok: false;
      machineId: string;
      code: ErrorCode;
      message: string;
      commands: CommandRecord[];
      snapshot: MachineSnapshot | null;
    };

export interface ProcsRead {
  readings: ProcReading[];
  /** False when the output was cut short: a missing field is then "not read", not "gone". */
  complete: boolean;
  result: ExecResult;
}

function timeoutError(spec: CommandSpec, r: ExecResult): CodedError {
  return new CodedError(
    ErrorCode.CommandTimeout,
    `\`${spec.argv[0]}\` did not answer within ${Math.round(spec.timeoutMs / 1000)} s and was ended`,
    {
      command: r.command,
    },
  );
}

/** The read-procs template for these PIDs in the namespace `route` lands in; none asked → nothing run. */
export async function readProcsOn(route: Route, pids: readonly number[], deps: ReadingDeps): Promise<ProcsRead | null> {
  const unique = [...new Set(pids)];
  if (unique.length === 0) return null;
  const spec = readProcs(unique, { timeoutMs: deps.commandTimeoutMs });
  const result = await deps.exec(route, spec);
  if (result.timedOut) throw timeoutError(spec, result);
  const parsed = parseProcReadings(result.stdout);
  return { readings: parsed.readings, complete: parsed.complete, result };
}

export interface InitRead {
  /** The container init's host PID, or null when it could not be found. */
  initHostPid: number | null;
  /** `readlink /proc/<init>/ns/pid` on the host, or null when it could not be read. */
  pidNs: string | null;
  /** When pidNs is null: which read failed and why, in plain words (missing tool, exit code, field). */
  problem: string | null;
  commands: CommandRecord[];
  results: ExecResult[];
}

const firstLine = (t: string): string => (t.trim().split('\n')[0] ?? '').trim().slice(0, 160);

/**
 * What went wrong with `lxc-info -n <vmid> -p`, or null when it named a PID. Exit 127/126 is the
 * tool missing or not runnable on that host (the shell's or `timeout`'s codes), not a stopped
 * container; a stopped container is exit 0 with no PID line. Pure.
 */
export function lxcInfoProblem(vmid: number, r: ExecResult): string | null {
  const said = firstLine(r.stderr) || firstLine(r.stdout);
  if (r.code === 127)
    return `\`lxc-info\` was not found on ${r.machineId} (exit 127: command not found); it is needed to find container ${vmid}'s init (Proxmox VE ships it in the lxc-pve package)`;
  if (r.code === 126) return `\`lxc-info\` on ${r.machineId} could not be run (exit 126${said ? `: ${said}` : ''})`;
  if (r.code !== 0)
    return `\`lxc-info -n ${vmid} -p\` failed on ${r.machineId} (exit ${r.code ?? r.signal ?? '?'}${said ? `: ${said}` : ''})`;
  if (parseLxcInitPid(r.stdout) === null)
    return `container ${vmid} is not running on ${r.machineId} (\`lxc-info -n ${vmid} -p\` printed no PID). Check \`pct status ${vmid}\``;
  return null;
}

/**
 * What is wrong with the host's /proc reading of the container's init, or null when it is PID 1
 * of its own namespace with a readable `ns/pid` link, in the container's cgroup `lxc/<vmid>`.
 * Names the field that failed. Pure.
 */
export function initReadingProblem(
  vmid: number,
  initHostPid: number,
  read: { readings: readonly ProcReading[]; complete: boolean } | null,
): string | null {
  const who = `host PID ${initHostPid} (container ${vmid}'s init per \`lxc-info\`)`;
  const r = read?.readings.find((x) => x.pid === initHostPid);
  if (read === null || !read.complete)
    return `the read of /proc/${initHostPid} was cut short (no end marker), so ${who} could not be checked`;
  if (r === undefined || r.stat === null)
    return `${who} is gone: it exited after \`lxc-info\` answered (is the container stopping or restarting?)`;
  if (r.nsPids === null)
    return `/proc/${initHostPid}/status has no NSpid line (Linux older than 4.1?), so ${who} cannot be placed in its PID namespace`;
  if (r.nsPids[r.nsPids.length - 1] !== 1)
    return `host PID ${initHostPid} is not PID 1 of its PID namespace (NSpid ${r.nsPids.join(' ')}): \`lxc-info\` named a process that is not container ${vmid}'s init`;
  if (r.pidNs === null)
    return `\`readlink /proc/${initHostPid}/ns/pid\` printed nothing: the host login may not read ${who}'s namespace link (log in as root)`;
  // Proxmox puts a container's processes, its init too, under lxc/<vmid>: anything else is not its init.
  if (r.cgroup === undefined)
    return `/proc/${initHostPid}/cgroup could not be read, so ${who} could not be placed in the container's cgroup`;
  if (!inContainerCgroup(r.cgroup, vmid))
    return `host PID ${initHostPid} is not in container ${vmid}'s cgroup (lxc/${vmid}): its cgroup is \`${(r.cgroup.trim().split('\n')[0] ?? '').slice(0, 120)}\``;
  return null;
}

/** `lxc-info -n <vmid> -p` on the host, then the init's /proc reading: the container's PID namespace now. */
export async function readContainerInit(hostRoute: Route, vmid: number, deps: ReadingDeps): Promise<InitRead> {
  const spec = containerInitPid(vmid, { timeoutMs: deps.commandTimeoutMs });
  const info = await deps.exec(hostRoute, spec);
  const results = [info];
  if (info.timedOut) throw timeoutError(spec, info);
  const lxcProblem = lxcInfoProblem(vmid, info);
  const initHostPid = lxcProblem === null ? parseLxcInitPid(info.stdout) : null;
  if (initHostPid === null)
    return {
      initHostPid: null,
      pidNs: null,
      problem: lxcProblem ?? `\`lxc-info -n ${vmid} -p\` printed no PID`,
      commands: results.map(recordOf),
      results,
    };
  const procs = await readProcsOn(hostRoute, [initHostPid], deps);
  if (procs) results.push(procs.result);
  // Only an init that is PID 1 of its own namespace names the container's namespace.
  const problem = initReadingProblem(vmid, initHostPid, procs);
  const pidNs = problem === null ? (procs?.readings.find((x) => x.pid === initHostPid)?.pidNs ?? null) : null;
  return { initHostPid, pidNs, problem, commands: results.map(recordOf), results };
}

/**
 * What the host says the container was given: `pct config <vmid>` (its `/dev/nvidiaM` devices,
 * and its uid map: `unprivileged`, `lxc.idmap`) and host `nvidia-smi -q -x` (each GPU's device
 * minor, by UUID). A failed read leaves `minors` null with the reason: its GPUs are then matched
 * to none; a failed or malformed config leaves `uidMap` null (host uids are then not shown as the
 * container's).
 */
async function readGpuPassing(
  hostRoute: Route,
  vmid: number,
  deps: ReadingDeps,
): Promise<{ passing: GpuPassing; uidMap: UidMap | null; results: ExecResult[] }> {
  const t = { timeoutMs: deps.commandTimeoutMs };
  const cfgSpec = containerConfig(vmid, t);
  const xmlSpec = hostGpuReport(t);
  const [cfg, xml] = await Promise.all([deps.exec(hostRoute, cfgSpec), deps.exec(hostRoute, xmlSpec)]);
  if (cfg.timedOut) throw timeoutError(cfgSpec, cfg);
  if (xml.timedOut) throw timeoutError(xmlSpec, xml);
  const results = [cfg, xml];
  const failed = (r: ExecResult, what: string): string => {
    const said = firstLine(r.stderr) || firstLine(r.stdout);
    return `\`${what}\` failed on ${r.machineId} (exit ${r.code ?? r.signal ?? '?'}${said ? `: ${said}` : ''})`;
  };
  if (cfg.code !== 0)
    return {
      passing: { vmid, minors: null, problem: failed(cfg, `pct config ${vmid}`), hostMinors: [] },
      uidMap: null,
      results,
    };
  const idMap = parsePctUidMap(cfg.stdout);
  const uidMap = idMap.ok ? idMap.map : null;
  if (xml.code !== 0 || xml.truncated)
    return {
      passing: {
        vmid,
        minors: null,
        problem: `${failed(xml, 'nvidia-smi -q -x')}, so the GPUs' device minors are unknown`,
        hostMinors: [],
      },
      uidMap,
      results,
    };
  return {
    passing: {
      vmid,
      minors: parsePctConfigGpuMinors(cfg.stdout),
      problem: null,
      hostMinors: parseXmlGpuMinors(xml.stdout),
    },
    uidMap,
    results,
  };
}

/** Container view: its status snapshot (GPUs, `fuser -v /dev/nvidia*`) and /proc of every fuser holder. */
async function readContainer(
  machine: Machine,
  route: Route,
  deps: ReadingDeps,
): Promise<ReadOutcome<ContainerReadings>> {
  const snap = await takeSnapshot(machine, route, deps);
  if (!snap.ok)
    return {
      ok: false,
      machineId: machine.id,
      code: snap.code,
      message: snap.message,
      commands: snap.commands,
      snapshot: null,
    };
  const commands = [...snap.commands];
  try {
    const procs = await readProcsOn(
      route,
      snap.snapshot.holders.map((h) => h.pid),
      deps,
    );
    if (procs) commands.push(recordOf(procs.result));
    return {
      ok: true,
      snapshot: snap.snapshot,
      readings: { holders: snap.snapshot.holders, procs: procs?.readings ?? [] },
      commands,
      procs,
    };
  } catch (e) {
    const ce = asCodedError(e);
    return { ok: false, machineId: machine.id, code: ce.code, message: ce.message, commands, snapshot: snap.snapshot };
  }
}

/**
 * Host view: its status snapshot (GPUs, compute apps by host PID), the target container's PID
 * namespace (`lxc-info`, then its init's `ns/pid`) and /proc of every compute app. The compute
 * apps are every GPU process of the host (other containers' too): which are the container's is
 * decided from the readings, by PID namespace and cgroup `lxc/<vmid>` (buildHolders).
 */
export async function readHost(
  host: Machine,
  hostRoute: Route,
  vmid: number,
  deps: ReadingDeps,
): Promise<ReadOutcome<HostReadings>> {
  const snap = await takeSnapshot(host, hostRoute, deps);
  if (!snap.ok)
    return {
      ok: false,
      machineId: host.id,
      code: snap.code,
      message: snap.message,
      commands: snap.commands,
      snapshot: null,
    };
  const commands = [...snap.commands];
  try {
    const init = await readContainerInit(hostRoute, vmid, deps);
    commands.push(...init.commands);
    if (init.pidNs === null)
      throw new CodedError(
        ErrorCode.CommandFailed,
        `could not find container ${vmid}'s PID namespace on ${host.id}: ${init.problem ?? 'unknown reason'}. Nothing was signalled.`,
      );
    const [procs, passing] = await Promise.all([
      readProcsOn(
        hostRoute,
        snap.snapshot.processes.map((p) => p.pid),
        deps,
      ),
      readGpuPassing(hostRoute, vmid, deps),
    ]);
    if (procs) commands.push(recordOf(procs.result));
    commands.push(...passing.results.map(recordOf));
    return {
      ok: true,
      snapshot: snap.snapshot,
      procs,
      readings: {
        gpus: snap.snapshot.gpus,
        apps: snap.snapshot.processes,
        procs: procs?.readings ?? [],
        targetPidNs: init.pidNs,
        targetVmid: vmid,
        passing: passing.passing,
        uidMap: passing.uidMap,
      },
      commands,
    };
  } catch (e) {
    const ce = asCodedError(e);
    return { ok: false, machineId: host.id, code: ce.code, message: ce.message, commands, snapshot: snap.snapshot };
  }
}

export interface TargetReadings {
  container: { snapshot: MachineSnapshot; readings: ContainerReadings; commands: CommandRecord[] };
  host: { snapshot: MachineSnapshot; readings: HostReadings; commands: CommandRecord[] };
}

/**
 * What the host says about its container, for the container view's Processes column (the GPU map,
 * the compute apps in the container), or why it could not be read. Pure.
 */
export function hostSideOf(host: Machine, r: ReadOutcome<HostReadings>): HostSideRead {
  if (!r.ok) return { host: null, problem: `${host.id} could not be read (${r.message.slice(0, 160)})` };
  if (!r.readings.passing) return { host: null, problem: `${host.id}'s GPU map was not read` };
  return {
    host: { hostId: host.id, gpus: r.readings.gpus, passing: r.readings.passing, readings: r.readings },
    problem: null,
  };
}

/** A view's snapshot with what its table shows beyond nvidia-smi, as `/gpu status` shows it (src/gpu/snapshot-table.ts). */
function tabled(
  side: Extract<ReadOutcome<ContainerReadings | HostReadings>, { ok: true }>,
  hostSide: HostSideRead | undefined,
): MachineSnapshot {
  const s = side.snapshot;
  return { ...s, ...causeFields(s, side.procs), ...rowFields(s, side.procs?.readings ?? [], hostSide) };
}

/** Both views, read at the same time. */
export async function readTarget(
  target: Extract<Machine, { kind: 'container' }>,
  host: Machine,
  routes: { container: Route; host: Route },
  deps: ReadingDeps,
): Promise<
  | { ok: true; value: TargetReadings }
  | {
      ok: false;
      failures: Array<Extract<ReadOutcome<unknown>, { ok: false }>>;
      read: Array<{ snapshot: MachineSnapshot; commands: CommandRecord[] }>;
    }
> {
  const [ctRead, hRead] = await Promise.all([
    readContainer(target, routes.container, deps),
    readHost(host, routes.host, target.vmid, deps),
  ]);
  // The tables are the status tables: the container's holders placed by the host's GPU map.
  const ct = ctRead.ok ? { ...ctRead, snapshot: tabled(ctRead, hostSideOf(host, hRead)) } : ctRead;
  const h = hRead.ok ? { ...hRead, snapshot: tabled(hRead, undefined) } : hRead;
  if (ct.ok && h.ok) return { ok: true, value: { container: ct, host: h } };
  const failures: Array<Extract<ReadOutcome<unknown>, { ok: false }>> = [];
  /** Snapshots that were read, container first: posted even though the readings as a whole failed. */
  const read: Array<{ snapshot: MachineSnapshot; commands: CommandRecord[] }> = [];
  for (const side of [ct, h]) {
    if (side.ok) read.push({ snapshot: side.snapshot, commands: side.commands });
    else {
      failures.push(side);
      if (side.snapshot !== null) read.push({ snapshot: side.snapshot, commands: side.commands });
    }
  }
  return { ok: false, failures, read };
}

export interface DiagnoseReadingsOptions {
  /** Uid container-side commands run as: 0 through `pct exec` or a root login, null when unknown. */
  containerExecUid: number | null;
  containerFailed?: readonly ContainerFailure[];
}

/** The per-GPU diagnosis of the target from both views' readings. Pure. */
export function diagnoseReadings(
  targetId: string,
  hostId: string,
  r: TargetReadings,
  o: DiagnoseReadingsOptions,
): Diagnosis {
  const passing = r.host.readings.passing ?? {
    vmid: 0,
    minors: null,
    problem: "the host's view of the container's GPUs was not read",
    hostMinors: [],
  };
  const holders = buildHolders(r.host.readings, r.container.readings);
  const d = diagnose({
    target: targetId,
    host: hostId,
    containerGpus: r.container.snapshot.gpus,
    hostGpus: r.host.snapshot.gpus,
    // Which host GPU each container GPU is, by the host's own view, never by the container's word alone.
    gpuMap: matchContainerGpus(r.container.snapshot.gpus, r.host.snapshot.gpus, passing, hostId),
    holders,
    errors: [r.host.snapshot.gpuError, r.container.snapshot.gpuError],
    containerExecUid: o.containerExecUid,
    containerFailed: o.containerFailed ?? [],
  });
  const causes = targetRootCauses(r, new Set(holders.holders.filter((h) => h.inTarget).map((h) => h.process.hostPid)));
  return causes.length > 0 ? { ...d, causes } : d;
}

/**
 * Root causes from the target's own holders only: its container's /proc readings (every process
 * there is the target's) and the host's readings of the holders placed inside it, each with its
 * parents; against the host's RAM (the host cache is host memory) and the GPUs the container sees.
 */
function targetRootCauses(r: TargetReadings, inTarget: ReadonlySet<number>): ReturnType<typeof rootCauses> {
  const procs = [...r.container.readings.procs, ...r.host.readings.procs.filter((p) => inTarget.has(p.pid))];
  const ram = r.host.snapshot.ram ?? r.container.snapshot.ram;
  return rootCauses({
    commandLines: commandLinesOf(procs),
    hostRamTotalBytes: ram && ram.totalBytes > 0 ? ram.totalBytes : null,
    gpusVisible: gpusSeen(r.container.snapshot),
  });
}
