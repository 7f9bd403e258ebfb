import type { GpuMatch } from './gpu-map.ts';
import type { DeviceOnlyHolder, GpuHolder, HolderReport, UnresolvedHolder } from './holders.ts';
import { sameProcess, type ProcessIdentity } from './process-ref.ts';
import { errorAdvice } from './error-advice.ts';
import type { RootCause } from './root-cause.ts';
import { IDLE_MIB } from './snapshot.ts';
import type { Gpu, NvidiaError } from './types.ts';
import { joinRich, richPlain, say, type Part, type Rich } from '../text/rich.ts';
import { mib, noun } from '../text/units.ts';

/**
 * What is wrong with one GPU, in the terms the plan acts on.
 * - `held_in_container`: every holder in the target can be stopped from inside it (tier 1).
 * - `held_host_only`: at least one holder in the target only the host can stop (tier 2).
 * - `orphaned_memory`: memory in use and no process anywhere on the host lists it (host reset, tier 2).
 * - `leak_beside_holders`: memory no process accounts for, on a GPU that processes outside the
 *   target still use: a reset would kill them (and the driver refuses it), so none is offered.
 * - `held_outside`: only processes of other containers or of the host hold it: never touched.
 * - `unidentified`: the only holders exited or could not be read while we looked: look again.
 * - `held_by_zombie`: its only holders in the target are zombies (state Z): they have exited, no
 *   signal can free their memory, and their parent reaping them does. Nothing is offered.
 */
export type DiagnosisKind =
  | 'idle'
  | 'held_in_container'
  | 'held_host_only'
  | 'orphaned_memory'
  | 'leak_beside_holders'
  | 'gpu_error'
  | 'held_outside'
  | 'unidentified'
  | 'held_by_zombie';

export interface DiagnosedHolder extends GpuHolder {
  /** Who can stop it: the container itself, only the host, or nobody (a zombie: already exited; its parent must reap it). */
  reach: 'container' | 'host' | 'none';
  /** Why only the host can stop it (null when the container can). */
  hostOnlyWhy: string | null;
}

export interface GpuDiagnosis {
  /** Index as the target container numbers it (what its user sees in nvidia-smi). */
  index: number | null;
  /** Index on the Proxmox host: what host-side commands (`-i N`) must use. */
  hostIndex: number | null;
  uuid: string | null;
  name: string | null;
  usedMiB: number | null;
  totalMiB: number | null;
  /**
   * Memory in use that no process anywhere on the host accounts for: used − every holder host
   * nvidia-smi lists on this GPU (this container, other containers, the host). Null when a
   * holder's MiB or the GPU's memory is unknown.
   */
  unaccountedMiB: number | null;
  kind: DiagnosisKind;
  /** Holders inside the target container. */
  holders: DiagnosedHolder[];
  /** Holders outside the target (other containers, the host): reported, never signalled. */
  outside: GpuHolder[];
  unresolved: UnresolvedHolder[];
  error: NvidiaError | null;
  /** One plain-words sentence for the thread: `richPlain(parts)` (logs, CLI). */
  sentence: string;
  /**
   * The same sentence as data (src/text/rich.ts): cmdlines and ids as code parts, so the thread
   * shows them as code spans that the data cannot close. Absent in diagnoses logged before it.
   */
  parts?: Rich;
}

export interface Diagnosis {
  /** Inventory id of the target container, e.g. `ct129`. */
  target: string;
  /** Inventory id of its Proxmox host, e.g. `kpro5`. */
  host: string;
  gpus: GpuDiagnosis[];
  /** Container processes with a GPU device open but no memory: shown so nobody wonders, never signalled. */
  deviceOnly: DeviceOnlyHolder[];
  /** nvidia-smi failed as a whole (no per-GPU numbers). */
  error: NvidiaError | null;
  /**
   * Why, in plain words, from the target's holders' command lines and their parents'
   * (./root-cause.ts): numbers and flag names only. Absent: no known program (no guess), or not read.
   */
  causes?: RootCause[];
}

/** A holder the container-side step tried and failed to stop, and why (from its results). */
export interface ContainerFailure {
  process: ProcessIdentity;
  reason: string;
}

export interface DiagnoseInput {
  target: string;
  host: string;
  /** GPUs the container sees (its numbering). */
  containerGpus: readonly Gpu[];
  /** GPUs the host sees (host numbering); matched to the container's by UUID, else by index. */
  hostGpus: readonly Gpu[];
  holders: HolderReport;
  /** nvidia-smi errors from either view; matched to a GPU by bus id, else machine-wide. */
  errors: ReadonlyArray<NvidiaError | null>;
  /**
   * Uid the container-side commands run as (0 for `pct exec`); null = a login that is not root,
   * uid unknown: the container still tries first, but is not said to be able to stop a holder.
   */
  containerExecUid?: number | null;
  /** Holders a container-side step already failed to stop: only the host can now. */
  containerFailed?: readonly ContainerFailure[];
  /**
   * Per container GPU (same order as `containerGpus`): its host GPU by the host's own view
   * (src/gpu/gpu-map.ts), or why it could not be matched. The unstick flow always passes it;
   * without it GPUs are matched by the UUID the container reports (classification tests only).
   */
  gpuMap?: readonly GpuMatch[];
}

/** A diagnosis says the unit even when the amount is unknown: `? MiB`. */
const UNKNOWN_MIB = '? MiB';

/** ` (host uid N)` when the host sees it under another uid (an unprivileged container's shift), else nothing. */
function hostUidNote(p: ProcessIdentity): string {
  return p.hostUid !== undefined && p.hostUid !== p.uid ? ` (host uid ${p.hostUid})` : '';
}

function reachOf(h: GpuHolder, input: DiagnoseInput): Pick<DiagnosedHolder, 'reach' | 'hostOnlyWhy'> {
  if (h.process.state === 'Z') return { reach: 'none', hostOnlyWhy: null };
  if (h.isContainerInit)
    return {
      reach: 'host',
      hostOnlyWhy: `it is the container’s init (PID 1), and a PID namespace’s init ignores signals sent from inside its namespace`,
    };
  const failed = input.containerFailed?.find((f) => sameProcess(f.process, h.process));
  if (failed) return { reach: 'host', hostOnlyWhy: `the container could not stop it (${failed.reason})` };
  const execUid = input.containerExecUid ?? 0;
  if (execUid !== 0 && h.process.uid !== undefined && h.process.uid !== execUid)
    return {
      reach: 'host',
      hostOnlyWhy: `it runs as uid ${h.process.uid}${hostUidNote(h.process)} and container commands run as uid ${execUid}`,
    };
  return { reach: 'container', hostOnlyWhy: null };
}

/**
 * "The container can stop it" only when its login may signal it: root in the container, or the
 * process's own user. A login that is not root, whose uid is not known to match, only tries.
 */
function containerCan(hs: readonly DiagnosedHolder[], input: DiagnoseInput): string {
  const execUid = input.containerExecUid === undefined ? 0 : input.containerExecUid;
  const them = hs.length === 1 ? 'it' : 'them';
  const may = execUid === 0 || hs.every((h) => h.process.uid !== undefined && h.process.uid === execUid);
  return may
    ? `The container can stop ${them} itself.`
    : `The container tries first, but its login is not root: if it may not signal ${them}, only the host can.`;
}

function who(p: ProcessIdentity): Part[] {
  return say`PID ${p.containerPid} (host PID ${p.hostPid}) \`${p.cmdline.slice(0, 80)}\``;
}

/**
 * A zombie holder in plain words: it has exited, its memory is freed when its parent reaps it,
 * and the parent (host PID, command line, container) is what a person can act on. gpu-medic
 * signals only GPU holders, so it signals neither.
 */
export function zombieWords(h: Pick<GpuHolder, 'process' | 'zombieParent'>, target: string): Part[] {
  const p = h.zombieParent;
  const parent =
    p !== undefined && p.hostPid !== null
      ? say`its parent (host PID ${p.hostPid} \`${(p.cmdline ?? '?').slice(0, 80)}\`, in ${target})`
      : say`its parent in ${target} (not read: the container's init, or a process this login may not read)`;
  return say`${who(h.process)} is a zombie (state Z): it has exited, and the driver charges its memory to it until ${parent} reaps it or ends. No signal to the zombie frees it, and gpu-medic signals only GPU holders, so it signals neither. Whoever owns that parent can make it reap its child (wait for it) or end it; the memory is freed then.`;
}

/** Distinct processes (a process can hold several GPUs; here one GPU, but rows may repeat). */
function distinct<T extends { process: ProcessIdentity }>(hs: readonly T[]): T[] {
  const out: T[] = [];
  for (const h of hs) if (!out.some((o) => sameProcess(o.process, h.process))) out.push(h);
  return out;
}

/** `host PID 823001 \`python3 train.py\` (40,211 MiB)`, for processes outside the target. */
function outsiders(hs: readonly GpuHolder[]): Part[] {
  return joinRich(
    distinct(hs).map(
      (h) =>
        say`host PID ${h.process.hostPid} \`${h.process.cmdline.slice(0, 60)}\` (${mib(sumMiB(hs.filter((x) => sameProcess(x.process, h.process))), UNKNOWN_MIB)})`,
    ),
    ', ',
  );
}

function sentenceOf(d: Omit<GpuDiagnosis, 'sentence' | 'parts'>, input: DiagnoseInput): Part[] {
  const gpu = `GPU ${d.index ?? d.hostIndex ?? '?'}`;
  const used = mib(d.usedMiB, UNKNOWN_MIB);
  const outsideNote =
    d.outside.length > 0
      ? say` Also used by something outside ${input.target} (${outsiders(d.outside)}): left alone.`
      : '';
  const leakNote =
    d.unaccountedMiB !== null && d.unaccountedMiB > IDLE_MIB
      ? say` Another ${mib(d.unaccountedMiB, UNKNOWN_MIB)} on it is held by no process anywhere on ${input.host} (a leaked context): only a host-level GPU reset frees that, once no process uses the GPU.`
      : '';
  const zombies = distinct(d.holders.filter((h) => h.reach === 'none'));
  const zNote =
    zombies.length > 0 && d.kind !== 'held_by_zombie'
      ? [
          ' ',
          ...joinRich(
            zombies.map((h) => zombieWords(h, input.target)),
            ' ',
          ),
        ]
      : '';
  const dNote = d.holders.some((h) => h.process.state === 'D')
    ? ' A holder is in uninterruptible sleep (D): a kill takes effect when it wakes, and memory can take tens of seconds to come back.'
    : '';
  switch (d.kind) {
    case 'idle':
      return say`${gpu} is idle (${used} used, no process).`;
    case 'gpu_error':
      return d.error
        ? say`${gpu} is in error: ${d.error.message}. Nothing will be signalled: ${errorAdvice(d.error.kind, input.target, input.host)}`
        : say`${gpu}: its memory could not be read. Nothing will be signalled; look at ${input.host} (\`nvidia-smi -q\`, dmesg) before anything else.`;
    case 'held_in_container': {
      const hs = distinct(d.holders);
      return say`${gpu}: ${used} held by ${hs.length} ${noun(hs.length, 'process', 'processes')} in ${input.target}: ${joinRich(
        hs.map((h) => who(h.process)),
        ', ',
      )}. ${containerCan(hs, input)}${zNote}${dNote}${leakNote}${outsideNote}`;
    }
    case 'held_host_only': {
      const hs = distinct(d.holders);
      const hostOnly = hs.filter((h) => h.reach === 'host');
      const ct = hs.filter((h) => h.reach === 'container');
      const hostPart = joinRich(
        hostOnly.map(
          (h) => say`${who(h.process)}: only the host can stop it, because ${h.hostOnlyWhy ?? 'the container cannot'}`,
        ),
        '; ',
      );
      const ctPart =
        ct.length > 0
          ? say` ${joinRich(
              ct.map((h) => who(h.process)),
              ', ',
            )}: ${containerCan(ct, input)}`
          : '';
      return say`${gpu}: ${used} held by ${hs.length} ${noun(hs.length, 'process', 'processes')} in ${input.target}. ${hostPart}.${ctPart}${zNote}${dNote}${leakNote}${outsideNote}`;
    }
    case 'held_by_zombie':
      return say`${gpu}: ${used} held in ${input.target}. ${joinRich(
        zombies.map((h) => zombieWords(h, input.target)),
        ' ',
      )}${leakNote}${outsideNote}`;
    case 'orphaned_memory':
      return say`${gpu}: ${mib(d.unaccountedMiB ?? d.usedMiB, UNKNOWN_MIB)} in use and no process anywhere on ${input.host} holds it (a leaked context). Killing processes cannot free it; only a host-level GPU reset can, and a container cannot reset a GPU.`;
    case 'leak_beside_holders':
      return [
        ...say`${gpu}: ${mib(d.unaccountedMiB, UNKNOWN_MIB)} of the ${used} in use is held by no process anywhere on ${input.host} (a leaked context); `,
        ...say`the rest is held outside ${input.target} by ${outsiders(d.outside)}. A GPU reset would end ${distinct(d.outside).length === 1 ? 'that process' : 'those processes'} `,
        ...say`(and the driver refuses one while any process uses the GPU), so none is offered: the leak can be reset once the GPU has no process. Nothing will be signalled.`,
      ];
    case 'held_outside':
      return say`${gpu}: ${used} held by something outside ${input.target} (${outsiders(d.outside)}, another container or the host itself): left alone.`;
    case 'unidentified':
      return say`${gpu}: ${used} held by host PID ${d.unresolved.map((u) => u.hostPid).join(', ')}, which exited or could not be read while we looked. Nothing will be signalled; take a new snapshot.`;
  }
}

/** MiB of a list of holders; null when any of them is unknown. */
function sumMiB(hs: ReadonlyArray<{ usedMiB: number | null }>): number | null {
  let n = 0;
  for (const h of hs) {
    if (h.usedMiB === null) return null;
    n += h.usedMiB;
  }
  return n;
}

/** Who accounts for a GPU's memory: the target's holders, everyone else host nvidia-smi lists, and nobody. */
export interface GpuAccount {
  /** MiB the target container's own processes hold (null when one of them is unknown). */
  targetMiB: number | null;
  /** MiB every other listed process holds: other containers, the host, PIDs that could not be identified. */
  othersMiB: number | null;
  /** used − both, never negative (null when anything is unknown). */
  unaccountedMiB: number | null;
}

/** Pure. Every holder known anywhere on the host counts; what is left over no process holds. */
export function accountOf(g: Pick<GpuDiagnosis, 'usedMiB' | 'holders' | 'outside' | 'unresolved'>): GpuAccount {
  const targetMiB = sumMiB(g.holders);
  const othersMiB = sumMiB([...g.outside, ...g.unresolved]);
  const unaccountedMiB =
    g.usedMiB !== null && targetMiB !== null && othersMiB !== null
      ? Math.max(0, g.usedMiB - targetMiB - othersMiB)
      : null;
  return { targetMiB, othersMiB, unaccountedMiB };
}

function kindOf(
  d: Pick<GpuDiagnosis, 'holders' | 'outside' | 'unresolved' | 'usedMiB' | 'error' | 'unaccountedMiB'>,
  unreadable: boolean,
): DiagnosisKind {
  if (d.error !== null || unreadable) return 'gpu_error';
  const live = d.holders.filter((h) => h.reach !== 'none');
  if (live.length > 0) return live.some((h) => h.reach === 'host') ? 'held_host_only' : 'held_in_container';
  if (d.holders.length > 0) return 'held_by_zombie';
  if (d.unresolved.length > 0) return 'unidentified';
  const leaked = d.unaccountedMiB !== null && d.unaccountedMiB > IDLE_MIB;
  // A leak beside another container's live job is still a leak, but a reset would end that job
  // (and the driver refuses a reset while any client holds the GPU): it is reported, not reset.
  if (d.outside.length > 0) return leaked ? 'leak_beside_holders' : 'held_outside';
  if (leaked) return 'orphaned_memory';
  return 'idle';
}

/** Per-GPU diagnosis of the target container, from both views. Pure. */
export function diagnose(input: DiagnoseInput): Diagnosis {
  const errors = input.errors.filter((e): e is NvidiaError => e !== null);
  const machineError = errors.find((e) => e.busId === null) ?? null;
  // nvidia-smi failing on the host leaves a container GPU without its host numbers or holders:
  // that GPU is unreadable, never "memory with no process".
  const hostError = input.hostGpus.length === 0 ? (machineError ?? errors[0] ?? null) : null;
  const gpus = input.containerGpus.map((cg, position): GpuDiagnosis => {
    const match = input.gpuMap?.[position];
    const hg =
      match !== undefined
        ? match.host
        : ((cg.uuid !== null ? input.hostGpus.find((g) => g.uuid === cg.uuid) : undefined) ??
          (cg.uuid === null ? input.hostGpus.find((g) => g.index === cg.index) : undefined) ??
          null);
    const hostIndex = hg?.index ?? null;
    // The host's UUID when the host matched it: what the container says is not taken for it.
    const uuid = match !== undefined ? (hg?.uuid ?? null) : (cg.uuid ?? hg?.uuid ?? null);
    const unmatched = match?.problem ?? null;
    const onThis = (x: { gpuIndex: number | null; gpuUuid: string | null }): boolean =>
      (uuid !== null && x.gpuUuid === uuid) || (x.gpuUuid === null && hostIndex !== null && x.gpuIndex === hostIndex);
    const mine = input.holders.holders.filter(onThis);
    const holders = mine.filter((h) => h.inTarget).map((h): DiagnosedHolder => ({ ...h, ...reachOf(h, input) }));
    const busId = cg.busId ?? hg?.busId ?? null;
    // A GPU the host's view could not match is not acted on; a failing host nvidia-smi is the likelier cause, so it wins.
    const mapError: NvidiaError | null =
      unmatched !== null ? { kind: 'unknown', message: unmatched, busId: null } : null;
    const error =
      errors.find((e) => e.busId !== null && e.busId === busId) ?? (hg === null ? (hostError ?? mapError) : null);
    const usedMiB = hg?.memoryUsedMiB ?? cg.memoryUsedMiB;
    const totalMiB = hg?.memoryTotalMiB ?? cg.memoryTotalMiB;
    const held = {
      usedMiB,
      holders,
      outside: mine.filter((h) => !h.inTarget),
      unresolved: input.holders.unresolved.filter(onThis),
    };
    const base = {
      index: cg.index,
      hostIndex,
      uuid,
      name: cg.name ?? hg?.name ?? null,
      totalMiB,
      ...held,
      unaccountedMiB: accountOf(held).unaccountedMiB,
      error,
    };
    const kind = kindOf(base, usedMiB === null);
    const d = { ...base, kind };
    const parts =
      mapError !== null && error === mapError
        ? say`GPU ${cg.index ?? '?'}: ${unmatched ?? ''}. Nothing will be done to it from ${input.host}.`
        : sentenceOf(d, input);
    return { ...d, sentence: richPlain(parts), parts };
  });
  // An error about a GPU the target has no row for (nvidia-smi failed as a whole: `GPU is lost`
  // stops the query) is the diagnosis's error: never dropped, never read as "nothing stuck".
  const unattached = errors.find((e) => !gpus.some((g) => g.error === e)) ?? null;
  return {
    target: input.target,
    host: input.host,
    gpus,
    deviceOnly: input.holders.deviceOnly,
    error: machineError ?? (gpus.length === 0 ? unattached : null),
  };
}

/** GPUs the unstick flow would act on (or must report as stuck). */
export function isStuck(d: Pick<GpuDiagnosis, 'kind'>): boolean {
  return (
    d.kind === 'held_in_container' ||
    d.kind === 'held_host_only' ||
    d.kind === 'orphaned_memory' ||
    d.kind === 'leak_beside_holders' ||
    d.kind === 'gpu_error' ||
    d.kind === 'unidentified' ||
    d.kind === 'held_by_zombie'
  );
}
