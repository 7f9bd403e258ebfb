import type { Machine } from '../config/machines.ts';
import { diagnose, type ContainerFailure, type Diagnosis } from '../gpu/diagnose.ts';
import { buildHolders, type ContainerReadings, type HostReadings, type ProcReading } from '../gpu/holders.ts';
import type { MachineSnapshot } from '../gpu/snapshot.ts';
import { CodedError, ErrorCode, asCodedError } from '../errors.ts';
import type { CommandRecord } from '../incident/events.ts';
import type { CommandSpec, ExecResult, Route } from '../ssh/types.ts';
import { recordOf, takeSnapshot, type SnapshotDeps } from './snapshot.ts';
import { containerInitPid, parseLxcInitPid, parseProcReadings, readProcs } from './unstick-commands.ts';

/**
 * The readings `/gpu unstick` decides from, gathered over the executor: each view's status
 * snapshot (reused as the before/after tables) plus what only unstick needs, the /proc identity
 * of every holder and the container's PID namespace as its host sees it.
 */

export type ReadingDeps = SnapshotDeps;

export type ReadOutcome<T> =
  | { ok: true; snapshot: MachineSnapshot; readings: T; commands: CommandRecord[] }
  | { ok: false; machineId: string; code: string; message: string; commands: CommandRecord[] };

export interface ProcsRead {
  readings: ProcReading[];
  /** False when the output was cut short: a missing field is then "not read", not "gone". */
  complete: boolean;
  result: ExecResult;
}

function timeoutError(spec: CommandSpec, r: ExecResult): CodedError {
  return new CodedError(ErrorCode.CommandTimeout, `\`${spec.argv[0]}\` did not answer within ${Math.round(spec.timeoutMs / 1000)} s and was ended`, {
    command: r.command,
  });
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
  /** The container init's host PID, or null when the container is not running. */
  initHostPid: number | null;
  /** `readlink /proc/<init>/ns/pid` on the host, or null when it could not be read. */
  pidNs: string | null;
  commands: CommandRecord[];
  results: ExecResult[];
}

/** `lxc-info -n <vmid> -p` on the host, then the init's /proc reading: the container's PID namespace now. */
export async function readContainerInit(hostRoute: Route, vmid: number, deps: ReadingDeps): Promise<InitRead> {
  const spec = containerInitPid(vmid, { timeoutMs: deps.commandTimeoutMs });
  const info = await deps.exec(hostRoute, spec);
  const results = [info];
  if (info.timedOut) throw timeoutError(spec, info);
  const initHostPid = info.code === 0 ? parseLxcInitPid(info.stdout) : null;
  if (initHostPid === null) return { initHostPid: null, pidNs: null, commands: results.map(recordOf), results };
  const procs = await readProcsOn(hostRoute, [initHostPid], deps);
  if (procs) results.push(procs.result);
  const r = procs?.readings.find((x) => x.pid === initHostPid);
  // Only an init that is PID 1 of its own namespace names the container's namespace.
  const isInit = r?.nsPids !== null && r?.nsPids !== undefined && r.nsPids[r.nsPids.length - 1] === 1;
  return { initHostPid, pidNs: isInit ? (r?.pidNs ?? null) : null, commands: results.map(recordOf), results };
}

/** Container view: its status snapshot (GPUs, `fuser -v /dev/nvidia*`) and /proc of every fuser holder. */
export async function readContainer(machine: Machine, route: Route, deps: ReadingDeps): Promise<ReadOutcome<ContainerReadings>> {
  const snap = await takeSnapshot(machine, route, deps);
  if (!snap.ok) return { ok: false, machineId: machine.id, code: snap.code, message: snap.message, commands: snap.commands };
  const commands = [...snap.commands];
  try {
    const procs = await readProcsOn(
      route,
      snap.snapshot.holders.map((h) => h.pid),
      deps,
    );
    if (procs) commands.push(recordOf(procs.result));
    return { ok: true, snapshot: snap.snapshot, readings: { holders: snap.snapshot.holders, procs: procs?.readings ?? [] }, commands };
  } catch (e) {
    const ce = asCodedError(e);
    return { ok: false, machineId: machine.id, code: ce.code, message: ce.message, commands };
  }
}

/**
 * Host view: its status snapshot (GPUs, compute apps by host PID), the target container's PID
 * namespace (`lxc-info`, then its init's `ns/pid`) and /proc of every compute app.
 */
export async function readHost(host: Machine, hostRoute: Route, vmid: number, deps: ReadingDeps): Promise<ReadOutcome<HostReadings>> {
  const snap = await takeSnapshot(host, hostRoute, deps);
  if (!snap.ok) return { ok: false, machineId: host.id, code: snap.code, message: snap.message, commands: snap.commands };
  const commands = [...snap.commands];
  try {
    const init = await readContainerInit(hostRoute, vmid, deps);
    commands.push(...init.commands);
    if (init.initHostPid === null)
      throw new CodedError(
        ErrorCode.CommandFailed,
        `container ${vmid} is not running on ${host.id} (\`lxc-info -n ${vmid} -p\` printed no PID); nothing was signalled. Check \`pct status ${vmid}\`.`,
      );
    if (init.pidNs === null)
      throw new CodedError(
        ErrorCode.CommandFailed,
        `could not read the PID namespace of container ${vmid}'s init (host PID ${init.initHostPid}) on ${host.id}; nothing was signalled.`,
      );
    const procs = await readProcsOn(
      hostRoute,
      snap.snapshot.processes.map((p) => p.pid),
      deps,
    );
    if (procs) commands.push(recordOf(procs.result));
    return {
      ok: true,
      snapshot: snap.snapshot,
      readings: { gpus: snap.snapshot.gpus, apps: snap.snapshot.processes, procs: procs?.readings ?? [], targetPidNs: init.pidNs },
      commands,
    };
  } catch (e) {
    const ce = asCodedError(e);
    return { ok: false, machineId: host.id, code: ce.code, message: ce.message, commands };
  }
}

export interface TargetReadings {
  container: { snapshot: MachineSnapshot; readings: ContainerReadings; commands: CommandRecord[] };
  host: { snapshot: MachineSnapshot; readings: HostReadings; commands: CommandRecord[] };
}

/** Both views, read at the same time. */
export async function readTarget(
  target: Extract<Machine, { kind: 'container' }>,
  host: Machine,
  routes: { container: Route; host: Route },
  deps: ReadingDeps,
): Promise<{ ok: true; value: TargetReadings } | { ok: false; failures: Array<Extract<ReadOutcome<unknown>, { ok: false }>> }> {
  const [ct, h] = await Promise.all([readContainer(target, routes.container, deps), readHost(host, routes.host, target.vmid, deps)]);
  if (ct.ok && h.ok) return { ok: true, value: { container: ct, host: h } };
  const failures: Array<Extract<ReadOutcome<unknown>, { ok: false }>> = [];
  if (!ct.ok) failures.push(ct);
  if (!h.ok) failures.push(h);
  return { ok: false, failures };
}

export interface DiagnoseReadingsOptions {
  /** Uid container-side commands run as: 0 through `pct exec` or a root login, null when unknown. */
  containerExecUid: number | null;
  containerFailed?: readonly ContainerFailure[];
}

/** The per-GPU diagnosis of the target from both views' readings. Pure. */
export function diagnoseReadings(targetId: string, hostId: string, r: TargetReadings, o: DiagnoseReadingsOptions): Diagnosis {
  return diagnose({
    target: targetId,
    host: hostId,
    containerGpus: r.container.snapshot.gpus,
    hostGpus: r.host.snapshot.gpus,
    holders: buildHolders(r.host.readings, r.container.readings),
    errors: [r.host.snapshot.gpuError, r.container.snapshot.gpuError],
    containerExecUid: o.containerExecUid,
    containerFailed: o.containerFailed ?? [],
  });
}
