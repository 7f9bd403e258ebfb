import { createHash } from 'node:crypto';
import { zombieWords, type Diagnosis, type DiagnosedHolder, type GpuDiagnosis } from '../gpu/diagnose.ts';
import { richPlain } from '../text/rich.ts';
import { processKey, sameProcess, sameProcessAndNamespace, type ProcessIdentity } from '../gpu/process-ref.ts';
import { shellJoin } from '../text/shell-quote.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import { queryComputeApps } from '../agent-grammar/templates/snapshot-commands.ts';
import { splitForCards } from '../text/batches.ts';
import { signalCommand, signalTargetOf, type SignalName, type SignalSide } from '../agent-grammar/templates/signal.ts';
import {
  GPU_UUID,
  assertSafeArgv,
  gpuReset,
  hostGpuApps,
  hostGpuByUuid,
  persistenceMode,
  readProcs,
  setPersistence,
} from '../agent-grammar/templates/unstick-commands.ts';
import { count, wholeSeconds } from '../text/units.ts';
import { NO_APPROVAL, type DestructiveIds } from '../agent-grammar/arg-types.ts';

/**
 * A plan lists each command's argv only (shown, hashed, sealed); the ids a destructive template
 * also takes are its agent call's, which the runner builds again at run time with the step's own
 * incident and approval (unstick-runner.ts). These stand in for them while planning.
 */
const PLANNING: DestructiveIds = { incidentId: 'planning', approvalId: NO_APPROVAL };

export type StepKind = 'container_signal' | 'host_kill' | 'host_reset';
export type Tier = 1 | 2;

/**
 * What a command is for, so the runner knows what to do with its output. `read_gpus` (memory
 * while waiting for release) and `read_init` (`lxc-info`, the container's PID namespace at run
 * time) are runner reads that no plan lists.
 */
export type CommandRole =
  | 'read_procs'
  | 'read_gpus'
  | 'read_init'
  | 'term'
  | 'kill'
  | 'check_apps'
  | 'read_persistence'
  | 'persistence_off'
  | 'reset'
  | 'persistence_on';

export type StepOutcome = 'done' | 'partial' | 'failed' | 'skipped';

export interface PlannedCommand {
  role: CommandRole;
  /** Where it runs: inside the target container (its route) or on its Proxmox host. */
  on: 'container' | 'host';
  argv: string[];
  /** `shellJoin(argv)`: exactly what a person reads on the card and in the log. */
  display: string;
  /**
   * `always`; `survivors`: only for the listed PIDs still alive and unchanged after the grace
   * period; `still_matching`: only for targets that pass the re-check; `persistence_was_on`:
   * only when persistence mode read as Enabled (or unreadable: then restored to be safe).
   */
  when: 'always' | 'survivors' | 'still_matching' | 'persistence_was_on';
  timeoutMs: number;
  /** Host GPU index the command is about (reset sequence), as planned: display only, indices can change. */
  gpuHostIndex?: number;
  /** UUID of the host GPU the command is about (reset sequence): what the runner groups and checks by. */
  gpuUuid?: string;
}

export interface TargetGpu {
  index: number | null;
  hostIndex: number | null;
  uuid: string | null;
  usedMiB: number | null;
}

/** A process a step will signal, with the GPUs it holds (for the card: GPU and MiB). */
export interface StepTarget extends ProcessIdentity {
  gpus: TargetGpu[];
  /** Why only the host can stop it (host_kill steps). */
  hostOnlyWhy: string | null;
}

export interface Step {
  /** Deterministic from incident + kind + targets: a re-planned identical step has the same id (step guard key). */
  id: string;
  tier: Tier;
  kind: StepKind;
  /** Inventory id of the machine the commands run on (`ct129` or `kpro5`). */
  machineId: string;
  targets: StepTarget[];
  /** GPUs a reset step is about (empty for signal steps). */
  gpus: TargetGpu[];
  commands: PlannedCommand[];
  /** Plain words: what will happen and why this tier. */
  explanation: string;
  /** Wait between SIGTERM and SIGKILL (container_signal). */
  graceMs: number;
  /** Longest wait for GPU memory to come back after the signals (a dying rank can take tens of seconds). */
  releaseTimeoutMs: number;
  pollIntervalMs: number;
  /**
   * host_reset: each GPU's persistence mode as the worker read it when it asked for approval
   * (null: unreadable, handled as on), sealed with the step. The step switches it off for the reset
   * and restores this original, and so does whoever finishes a step an earlier attempt left
   * inside its reset: the original is never read back from a GPU that attempt may have switched off.
   */
  persistence?: Array<{ uuid: string; on: boolean | null }>;
}

/** The sealed original persistence mode of one GPU of a reset: true (on, or unreadable: restored to be safe), false, or null (not sealed). */
export function sealedPersistence(step: Pick<Step, 'persistence'>, uuid: string): boolean | null {
  const list: unknown = step.persistence;
  if (!Array.isArray(list)) return null;
  const p: unknown = list.find((x: unknown) => typeof x === 'object' && x !== null && 'uuid' in x && x.uuid === uuid);
  if (typeof p !== 'object' || p === null || !('on' in p)) return null;
  return p.on === false ? false : p.on === true || p.on === null ? true : null;
}

export interface Plan {
  incidentId: string;
  target: string;
  host: string;
  vmid: number;
  steps: Step[];
  /** What will not be touched, and why (outside holders, monitors, GPUs in error). */
  leftAlone: string[];
}

export interface PlanOptions {
  incidentId: string;
  /** Proxmox container id of the target. */
  vmid: number;
  /** Wait between SIGTERM and SIGKILL. Default 10 s. */
  graceMs?: number;
  /** Longest wait for memory release after signalling. Default 90 s. */
  releaseTimeoutMs?: number;
  /** Poll interval while waiting for memory release. Default 3 s. */
  pollIntervalMs?: number;
  /** Per-command timeout. Default 15 s. */
  commandTimeoutMs?: number;
  /**
   * Whether one approval card can show every target and command of a tier-2 step (the caller
   * passes src/render/unstick.ts `approvalCardFits`). A host-level kill that does not fit is planned
   * as several steps, one card each, so each card is exactly what its button runs. Default: one step.
   */
  fitsCard?: (step: Step) => boolean;
}

const DEFAULT_GRACE_MS = 10_000;
const DEFAULT_RELEASE_TIMEOUT_MS = 90_000;
const DEFAULT_POLL_INTERVAL_MS = 3_000;
const DEFAULT_COMMAND_TIMEOUT_MS = 15_000;

/** The most GPUs one host-level reset step names: the most a Proxmox host carries (8 is common, 16 on the largest boards). */
const MAX_RESET_GPUS = 16;

/** Sequential commands one read of both views runs at most (status batch, holders' command lines, lxc-info, init, /proc, pct config). */
const READ_COMMANDS = 6;

/** What the longest step is made of: the worker's settings (GPU_MEDIC_TERM_GRACE_SEC, …) and its SSH timeouts. */
interface StepTiming {
  graceMs: number;
  releaseTimeoutMs: number;
  pollIntervalMs: number;
  commandTimeoutMs: number;
  /** SSH connect timeout: a command may need a new connection first. */
  connectTimeoutMs: number;
}

/**
 * The longest one job attempt can run with these settings: its reads before and after, and its
 * one step with every command at its timeout (plus a connect and 5 s for `timeout -k`), the grace
 * and the release wait each overrunning by a poll and that poll's commands; a reset counts
 * MAX_RESET_GPUS GPUs of six commands. A later attempt of the same job waits at least this long
 * for a live earlier one before taking over (workers/unstick.ts), so it never takes over one that
 * is still inside a step.
 */
export function longestAttemptMs(t: StepTiming): number {
  const cmd = t.commandTimeoutMs + t.connectTimeoutMs + 5_000;
  const wait = (ms: number, commandsPerPoll: number): number => ms + t.pollIntervalMs + commandsPerPoll * cmd;
  const release = wait(t.releaseTimeoutMs, 2);
  const containerSignal = 4 * cmd + wait(t.graceMs, 1) + release;
  const hostKill = 5 * cmd + release;
  const hostReset = MAX_RESET_GPUS * 6 * cmd + release;
  return 2 * READ_COMMANDS * cmd + Math.max(containerSignal, hostKill, hostReset);
}

function planned(
  role: CommandRole,
  on: PlannedCommand['on'],
  spec: CommandSpec,
  when: PlannedCommand['when'],
  gpu?: { hostIndex: number; uuid: string },
): PlannedCommand {
  assertSafeArgv(spec.argv);
  return {
    role,
    on,
    argv: spec.argv,
    display: shellJoin(spec.argv),
    when,
    timeoutMs: spec.timeoutMs,
    ...(gpu !== undefined ? { gpuHostIndex: gpu.hostIndex, gpuUuid: gpu.uuid } : {}),
  };
}

/**
 * The literal commands of a step, from the fixed templates, for the given targets (by PID) or GPUs
 * (by UUID). The one place a plan's commands are made: planning uses it, and a worker acting
 * on an approval rebuilds the approved step's commands with it from its own sealed identity set
 * (plan-seal.ts), never from argv read back from Redis.
 */
export function stepCommands(
  kind: StepKind,
  targets: readonly ProcessIdentity[],
  gpus: readonly TargetGpu[],
  t: { timeoutMs: number },
): PlannedCommand[] {
  switch (kind) {
    case 'container_signal': {
      const pids = targets.map((x) => x.containerPid);
      return [
        planned('read_procs', 'container', readProcs(pids, t), 'always'),
        planned('term', 'container', signalOf('container', 'TERM', targets, t), 'always'),
        planned('read_procs', 'container', readProcs(pids, t), 'always'),
        planned('kill', 'container', signalOf('container', 'KILL', targets, t), 'survivors'),
      ];
    }
    case 'host_kill':
      return [
        planned(
          'read_procs',
          'host',
          readProcs(
            targets.map((x) => x.hostPid),
            t,
          ),
          'always',
        ),
        planned('check_apps', 'host', queryComputeApps(t), 'always'),
        planned('kill', 'host', signalOf('host', 'KILL', targets, t), 'still_matching'),
      ];
    case 'host_reset':
      // By UUID (a GPU without one is refused by the template): an index may name another GPU by run time.
      return gpus.flatMap((g) => {
        const id = { hostIndex: g.hostIndex ?? -1, uuid: g.uuid ?? '' };
        const u = id.uuid;
        return [
          planned('read_gpus', 'host', hostGpuByUuid(u, t), 'always', id),
          planned('check_apps', 'host', hostGpuApps(u, t), 'always', id),
          planned('read_persistence', 'host', persistenceMode(u, t), 'always', id),
          planned('persistence_off', 'host', setPersistence(u, false, { ...t, ...PLANNING }), 'persistence_was_on', id),
          planned('reset', 'host', gpuReset(u, { ...t, ...PLANNING }), 'always', id),
          planned('persistence_on', 'host', setPersistence(u, true, { ...t, ...PLANNING }), 'persistence_was_on', id),
        ];
      });
  }
}

/**
 * A step with only the given targets (same id: the step guard key), its commands rebuilt from the
 * templates. A target is kept only when every identity field a command uses matches: host PID,
 * start time, PID namespace, and the container PID the container-side command signals by.
 */
export function restrictStep(step: Step, keep: readonly ProcessIdentity[], t: { timeoutMs: number }): Step {
  const targets = step.targets.filter((x) => keep.some((k) => sameProcessAndNamespace(k, x)));
  return {
    ...step,
    targets,
    commands: targets.length > 0 || step.kind === 'host_reset' ? stepCommands(step.kind, targets, step.gpus, t) : [],
  };
}

/** `container_signal-3f9a0c1b2d4e`: same incident, kind and targets → same id, whatever the order. */
export function stepId(incidentId: string, kind: StepKind, keys: readonly string[]): string {
  const h = createHash('sha256')
    .update([incidentId, kind, ...[...keys].sort()].join('\n'))
    .digest('hex');
  return `${kind}-${h.slice(0, 12)}`;
}

const gpuKey = (g: TargetGpu): string => `gpu:${g.uuid ?? `host${g.hostIndex ?? '?'}`}`;

/**
 * Fingerprint of what an approval approves: targets and literal commands. Stored with the
 * approval, so a click on a card whose plan has since changed is refused.
 */
export function stepHash(step: Step): string {
  const canonical = JSON.stringify({
    id: step.id,
    kind: step.kind,
    tier: step.tier,
    machineId: step.machineId,
    targets: step.targets.map((t) => [t.hostPid, t.containerPid, t.startTimeTicks, t.pidNs]),
    gpus: step.gpus.map((g) => [g.hostIndex, g.uuid]),
    commands: step.commands.map((c) => [c.on, c.when, c.argv]),
  });
  return createHash('sha256').update(canonical).digest('hex');
}

/**
 * The check-and-signal command a step shows and runs for these targets (the runner rebuilds it
 * from the same template for whoever is still to be signalled at run time).
 */
function signalOf(
  side: SignalSide,
  signal: SignalName,
  targets: readonly ProcessIdentity[],
  t: { timeoutMs: number },
): CommandSpec {
  const pidNs = targets[0]?.pidNs ?? null;
  return signalCommand(
    side,
    signal,
    pidNs,
    targets.map((x) => signalTargetOf(x, side)),
    { ...t, ...PLANNING },
  );
}

/** A container's init (PID 1) holding a GPU: a kill would stop the whole container, so it is never a kill target. */
function isInit(h: DiagnosedHolder): boolean {
  return h.process.containerPid === 1;
}

function targetsOf(gpus: readonly GpuDiagnosis[], reach: DiagnosedHolder['reach']): StepTarget[] {
  const out: StepTarget[] = [];
  for (const g of gpus) {
    for (const h of g.holders) {
      if (h.reach !== reach || isInit(h)) continue;
      const gpu: TargetGpu = { index: g.index, hostIndex: g.hostIndex, uuid: g.uuid, usedMiB: h.usedMiB };
      const seen = out.find((t) => sameProcess(t, h.process));
      if (seen) seen.gpus.push(gpu);
      else out.push({ ...h.process, gpus: [gpu], hostOnlyWhy: h.hostOnlyWhy });
    }
  }
  return out.sort((a, b) => a.hostPid - b.hostPid);
}

/**
 * From a diagnosis to the ordered steps: container-side signals (tier 1) first, then the
 * host-level kill of what only the host can stop (tier 2), then a host-level reset of GPUs
 * whose memory no process holds (tier 2). Pure; the runner re-plans after each step from a
 * fresh diagnosis, passing what the container failed to stop.
 */
export function planUnstick(d: Diagnosis, o: PlanOptions): Plan {
  const t = { timeoutMs: o.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS };
  const timing = {
    graceMs: o.graceMs ?? DEFAULT_GRACE_MS,
    releaseTimeoutMs: o.releaseTimeoutMs ?? DEFAULT_RELEASE_TIMEOUT_MS,
    pollIntervalMs: o.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS,
  };
  const steps: Step[] = [];

  const ct = targetsOf(d.gpus, 'container');
  if (ct.length > 0) {
    const pids = ct.map((x) => x.containerPid);
    steps.push({
      id: stepId(o.incidentId, 'container_signal', ct.map(processKey)),
      tier: 1,
      kind: 'container_signal',
      machineId: d.target,
      targets: ct,
      gpus: [],
      commands: stepCommands('container_signal', ct, [], t),
      explanation:
        `Inside ${d.target}: SIGTERM exactly ${ct.length === 1 ? 'this process' : `these ${ct.length} processes`} (container PID ${pids.join(', ')}), ` +
        `wait ${wholeSeconds(timing.graceMs)}, then SIGKILL only those still running as the same process (same PID and start time). ` +
        `Then wait up to ${wholeSeconds(timing.releaseTimeoutMs)} for GPU memory to come back and take a new snapshot. ` +
        `Nothing else in ${d.target} is signalled. The requester's own request is enough for this step.`,
      ...timing,
    });
  }

  const host = targetsOf(d.gpus, 'host');
  const hostKillStep = (batch: StepTarget[], part: string): Step => ({
    id: stepId(o.incidentId, 'host_kill', batch.map(processKey)),
    tier: 2,
    kind: 'host_kill',
    machineId: d.host,
    targets: batch,
    gpus: [],
    commands: stepCommands('host_kill', batch, [], t),
    explanation:
      `On ${d.host} itself, SIGKILL ${batch.length === 1 ? 'this process' : `these ${batch.length} processes`} of ${d.target} by host PID ` +
      `(not through \`pct exec\`: that enters the container's PID namespace, where its init ignores signals). ` +
      `Just before, each one is re-checked: same PID and start time, still in ${d.target}'s PID namespace, still holding GPU memory; ` +
      `then one command on ${d.host} checks each again and signals it through a pidfd, so a PID that changed hands is never signalled; ` +
      `any that changed is skipped and reported. Needs a second person's approval.${part}`,
    ...timing,
  });
  if (host.length > 0) {
    const fits = o.fitsCard;
    const batches =
      fits === undefined ? [host] : splitForCards(host, (b) => fits(hostKillStep([...b], ' (part 99 of 99 …)')));
    batches.forEach((batch, i) =>
      steps.push(
        hostKillStep(
          batch,
          batches.length > 1
            ? ` This is part ${i + 1} of ${batches.length}: ${host.length} processes are more than one card can show, so each card approves only the processes it lists.`
            : '',
        ),
      ),
    );
  }

  // A reset names the GPU by its UUID (from the host's own view), never by an index that may name another GPU by run time.
  const orphaned = d.gpus.filter(
    (g) => g.kind === 'orphaned_memory' && g.hostIndex !== null && g.uuid !== null && GPU_UUID.test(g.uuid),
  );
  if (orphaned.length > 0) {
    const gpus: TargetGpu[] = orphaned.map((g) => ({
      index: g.index,
      hostIndex: g.hostIndex,
      uuid: g.uuid,
      usedMiB: g.unaccountedMiB ?? g.usedMiB,
    }));
    const commands = stepCommands('host_reset', [], gpus, t);
    // What the card must show: how much no process holds, and which holders were ruled out and why.
    const which = orphaned
      .map((g) => {
        const held = g.usedMiB !== null && g.unaccountedMiB !== null ? g.usedMiB - g.unaccountedMiB : null;
        return `GPU ${g.index ?? '?'} (host GPU ${g.hostIndex ?? '?'}): ${count(g.unaccountedMiB)} MiB unaccounted: ${count(g.usedMiB)} MiB in use, ${count(held)} MiB held by the processes host nvidia-smi lists on it`;
      })
      .join('; ');
    const monitors = d.deviceOnly.map(
      (m) =>
        `PID ${m.containerPid} \`${m.command ?? '?'}\` in ${d.target} has ${m.devices.join(', ')} open but holds no GPU memory (a monitor)`,
    );
    const ruledOut = [
      `host nvidia-smi lists no process on ${orphaned.length === 1 ? 'it' : 'them'}, and it sees every process on ${d.host} (every container and the host)`,
      ...monitors,
    ].join('; ');
    steps.push({
      id: stepId(o.incidentId, 'host_reset', gpus.map(gpuKey)),
      tier: 2,
      kind: 'host_reset',
      machineId: d.host,
      targets: [],
      gpus,
      commands,
      explanation:
        `${which}. Ruled out: ${ruledOut}. No process anywhere on ${d.host} holds that memory, so no kill can free it. ` +
        `Reset on ${d.host} (never inside ${d.target}: a container cannot reset a GPU), naming each GPU by its UUID. For each GPU: check that ${d.host} still has that UUID ` +
        `and that no process anywhere on ${d.host} holds it (if not, that GPU is skipped), switch persistence mode off if it is on, \`nvidia-smi --gpu-reset -i <UUID>\`, then switch persistence back on. ` +
        `Needs a second person's approval.`,
      ...timing,
    });
  }

  const leftAlone: string[] = [];
  for (const g of d.gpus) {
    if (g.outside.length > 0 || g.kind === 'gpu_error' || g.kind === 'unidentified' || g.kind === 'held_by_zombie')
      leftAlone.push(g.sentence);
    // A zombie beside live holders: never a target (no signal frees it), said with its parent.
    else if (g.holders.some((h) => h.reach === 'none'))
      for (const h of g.holders.filter((x) => x.reach === 'none'))
        leftAlone.push(`GPU ${g.index ?? '?'}: ${richPlain(zombieWords(h, d.target))}`);
    else if (g.kind === 'orphaned_memory' && (g.hostIndex === null || g.uuid === null || !GPU_UUID.test(g.uuid)))
      leftAlone.push(
        `GPU ${g.index ?? '?'}: no matching host GPU with a UUID was found, so no reset can be offered. ${g.sentence}`,
      );
  }
  for (const g of d.gpus)
    for (const h of g.holders.filter(isInit)) {
      const p = h.process;
      leftAlone.push(
        `GPU ${g.index ?? '?'}: held by the init (PID 1) of ${d.target} (host PID ${p.hostPid}, \`${p.cmdline}\`, ${h.usedMiB === null ? '?' : count(h.usedMiB)} MiB). ` +
          `Killing a container's init is not a process kill: every process in ${d.target} dies with it and the container stops. ` +
          `gpu-medic does not stop containers. If ${d.target} may stop, run \`pct stop ${o.vmid}\` on ${d.host} yourself (then \`pct start ${o.vmid}\`); ` +
          `otherwise restart that workload from inside the container.`,
      );
    }
  for (const m of d.deviceOnly)
    leftAlone.push(
      `PID ${m.containerPid} \`${m.command ?? '?'}\` in ${d.target} has ${m.devices.join(', ')} open but holds no GPU memory (a monitor?): left alone.`,
    );
  return { incidentId: o.incidentId, target: d.target, host: d.host, vmid: o.vmid, steps, leftAlone };
}
