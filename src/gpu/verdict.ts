import { accountOf, isStuck, zombieWords, type Diagnosis, type DiagnosisKind, type GpuDiagnosis } from './diagnose.ts';
import { IDLE_MIB } from './snapshot.ts';
import { errorAdvice } from './error-advice.ts';
import type { NvidiaError } from './types.ts';
import { joinRich, richPlain, say, user, type Part, type Rich } from '../text/rich.ts';
import { count } from '../text/units.ts';

/** What the after-view said about a GPU the target had before. */
export type AfterState = 'read' | 'in_error' | 'missing';

export interface GpuChange {
  index: number | null;
  uuid: string | null;
  /** The GPU's whole memory in use before and after (every process on it, the target's or not). */
  beforeMiB: number | null;
  afterMiB: number | null;
  /**
   * What this incident was about on this GPU before: the MiB the target's own holders held, plus
   * memory no process anywhere held (a leak a reset would free). Never another container's.
   */
  heldMiB: number | null;
  /** Of that, what is still held after: the target's holders now, plus memory no process holds. */
  leftMiB: number | null;
  /** held − left, never negative and never more than held; null when either is unknown. */
  freedMiB: number | null;
  /**
   * The change in the GPU's memory that this incident did not cause: positive = freed by others
   * (another container's job ended, a concurrent incident), negative = taken by others.
   */
  othersFreedMiB: number | null;
  before: DiagnosisKind;
  after: DiagnosisKind | null;
  afterState: AfterState;
  /** Was stuck before and is no longer (idle, or only outside holders remain), read without error. */
  recovered: boolean;
}

/**
 * `gpu_error`: a target GPU (or nvidia-smi as a whole) is in error; `not_verified`: a GPU the
 * target had before is missing from the after-view. Neither is ever green.
 */
export type VerdictKind =
  | 'recovered'
  | 'partially_recovered'
  | 'still_stuck'
  | 'nothing_stuck'
  | 'gpu_error'
  | 'not_verified';

export interface Verdict {
  kind: VerdictKind;
  /** `Recovered`, `Partially recovered`, `Still stuck`, `Nothing was stuck`, `GPU error`, `Not verified`. */
  title: string;
  gpus: GpuChange[];
  /** Sum of `freedMiB`: only memory the target's holders held (or that no process held). */
  totalFreedMiB: number;
  /** Changes caused by others, in plain words, one per GPU ("GPU 5: 60,000 MiB freed outside this incident"). */
  outside: string[];
  /** What to do next, in plain words (null when there is nothing left to do): `richPlain(advice)`. */
  nextStep: string | null;
  /**
   * The same advice as data (src/text/rich.ts): gpu-medic's words, its mentions and commands,
   * and machine text apart, so the thread renders each once. Absent in verdicts logged before it.
   */
  advice?: Rich | null;
}

/** `advice` and its plain words `nextStep`, always together. */
export function adviceOf(advice: Rich | null): Pick<Verdict, 'advice' | 'nextStep'> {
  return { advice, nextStep: advice === null ? null : richPlain(advice) };
}

/** Verdicts that may be shown as a success (green mark, outcome `ok`). */
export function isGreen(v: Pick<Verdict, 'kind'>): boolean {
  return v.kind === 'recovered' || v.kind === 'nothing_stuck';
}

/** A step of this incident as the advice needs it: what it was about, and how it ended. */
export interface StepHistory {
  kind: 'container_signal' | 'host_kill' | 'host_reset';
  /** `denied`/`expired`: the approval card; `failed`/`done`: it ran. */
  outcome: 'denied' | 'expired' | 'failed' | 'done';
  /** Slack user id of whoever denied it (null otherwise). */
  by: string | null;
  /** Host PIDs it was about (kills); host GPU indexes it was about (resets). */
  hostPids: readonly number[];
  gpuHostIndexes: readonly number[];
  /** The step's own closing words (what was skipped and why), when it ran. */
  message: string | null;
  /**
   * A `failed`/`done` step sent at least one command (the log has a `command` event for it).
   * False: it ended before any command ran (the host did not answer). Absent: not known (true).
   */
  ran?: boolean;
}

/** What happened in the incident so far: the verdict's advice says what is really left and who can do it. */
export interface VerdictContext {
  steps: readonly StepHistory[];
  /** Configured approvers (Slack user ids); null when not known here. */
  approvers: readonly string[] | null;
  requester: string | null;
}

const TITLES: Record<VerdictKind, string> = {
  recovered: 'Recovered',
  partially_recovered: 'Partially recovered',
  still_stuck: 'Still stuck',
  nothing_stuck: 'Nothing was stuck',
  gpu_error: 'GPU error',
  not_verified: 'Not verified',
};

const gpuName = (g: Pick<GpuDiagnosis, 'index' | 'hostIndex'>): string => `GPU ${g.index ?? g.hostIndex ?? '?'}`;

function match(a: GpuDiagnosis, bs: readonly GpuDiagnosis[]): GpuDiagnosis | undefined {
  return a.uuid !== null ? bs.find((b) => b.uuid === a.uuid) : bs.find((b) => b.index === a.index);
}

/** The incident's memory on a GPU: its holders' MiB plus what no process holds (above the idle allowance). */
function incidentMiB(g: GpuDiagnosis): number | null {
  if (g.kind === 'gpu_error') return null;
  const a = accountOf(g);
  if (a.targetMiB === null) return null;
  if (a.unaccountedMiB === null)
    return g.outside.length === 0 && g.unresolved.length === 0 && g.usedMiB !== null
      ? Math.max(a.targetMiB, g.usedMiB)
      : null;
  return a.targetMiB + (a.unaccountedMiB > IDLE_MIB ? a.unaccountedMiB : 0);
}

function errorNext(g: GpuDiagnosis | null, error: NvidiaError | null, d: Diagnosis): Part[] {
  const who = g ? say`${gpuName(g)}: ` : '';
  if (error === null)
    return say`${who}its memory could not be read; run \`/gpu status ${d.target}\` and \`/gpu status ${d.host}\` and look at ${d.host} (\`nvidia-smi -q\`, dmesg) before anything else.`;
  return say`${who}${errorAdvice(error.kind, d.target, d.host)}`;
}

function usersText(ids: readonly string[]): Part[] {
  return joinRich(
    ids.map((u) => [user(u)]),
    ', ',
  );
}

/** Approvers still able to decide: configured, not the requester, not one who already denied. */
function otherApprovers(c: VerdictContext): string[] | null {
  const deniers = new Set(c.steps.filter((s) => s.outcome === 'denied' && s.by !== null).map((s) => s.by));
  return c.approvers === null ? null : c.approvers.filter((a) => a !== c.requester && !deniers.has(a));
}

/** What happened to the tier-2 step that this GPU needs, and what is really left. */
function tier2Next(
  what: Rich,
  kind: 'host_kill' | 'host_reset',
  step: StepHistory | undefined,
  c: VerdictContext,
  d: Diagnosis,
): Part[] {
  const others = otherApprovers(c);
  const some = others !== null && others.length > 0;
  const ask = some
    ? say`ask another approver (${usersText(others)})`
    : 'no other approver is configured (GPU_MEDIC_APPROVERS)';
  const act = kind === 'host_kill' ? 'kill' : 'reset';
  if (step === undefined)
    return others === null || some
      ? say`${what}, approved by a second person.`
      : say`${what}, and ${ask}, so it cannot run.`;
  switch (step.outcome) {
    case 'denied':
      return say`${what}; that ${act} was denied by ${user(step.by ?? '?')}. If it is still needed, ${some ? say`${ask} to approve a new \`/gpu unstick ${d.target}\`` : others === null ? say`ask another approver to approve a new \`/gpu unstick ${d.target}\`` : say`${ask}: nobody else can approve it`}.`;
    case 'expired':
      return say`${what}; the approval request expired without a decision. Run \`/gpu unstick ${d.target}\` again when ${some ? say`an approver (${usersText(others)})` : 'an approver'} can answer the card.`;
    case 'failed':
    case 'done':
      // "ran" only when a command ran: an approved step that ended before sending any did nothing.
      if (step.ran === false)
        return say`${what}; the approved ${act} was not run: it ended before any command reached ${d.host}${step.message ? say` (${step.message})` : ''}. Nothing was signalled or reset. When ${d.host} answers, run \`/gpu unstick ${d.target}\` again.`;
      return kind === 'host_kill'
        ? say`${what}; the host-level kill ran and it still holds the GPU${step.message ? say` (${step.message})` : ''}. A process that survives SIGKILL on the host is stuck in the driver: check dmesg on ${d.host} for Xid errors; a reboot of ${d.host} may be needed.`
        : say`${what}; the host-level reset ran and the memory is still held${step.message ? say` (${step.message})` : ''}. A reset that does not free memory means a reboot of ${d.host}.`;
  }
}

function lastStep(
  c: VerdictContext,
  kind: StepHistory['kind'],
  about: (s: StepHistory) => boolean,
): StepHistory | undefined {
  return [...c.steps].reverse().find((s) => s.kind === kind && about(s));
}

function nextFor(g: GpuDiagnosis, d: Diagnosis, c: VerdictContext): Part[] {
  const gpu = gpuName(g);
  switch (g.kind) {
    case 'held_in_container': {
      const step = c.steps.find((s) => s.kind === 'container_signal');
      const pids = [...new Set(g.holders.map((h) => h.process.hostPid))].join(', ');
      if (step === undefined)
        return say`${gpu}: still held by processes the container can stop; run \`/gpu unstick ${d.target}\` again.`;
      if (step.outcome === 'failed')
        return say`${gpu}: still held by processes of ${d.target} (host PID ${pids}); this incident’s container step did not complete${step.message ? say` (${step.message})` : ''}. Check \`/gpu status ${d.target}\` before running \`/gpu unstick ${d.target}\` again.`;
      return say`${gpu}: held by processes of ${d.target} that this incident’s container step did not target (host PID ${pids}): they did not hold it when the incident looked. If they should stop, run \`/gpu unstick ${d.target}\` again.`;
    }
    case 'held_host_only': {
      // Killing a container's init stops the whole container: that is not a process kill, and gpu-medic does not do it.
      if (g.holders.length > 0 && g.holders.every((h) => h.isContainerInit))
        return say`${gpu}: held by ${d.target}'s init (PID 1); only stopping the container frees it, and every process in it ends with it. gpu-medic does not stop containers: if ${d.target} may stop, run \`pct stop\` for it on ${d.host} yourself.`;
      const pids = g.holders.filter((h) => h.reach === 'host').map((h) => h.process.hostPid);
      const step = lastStep(c, 'host_kill', (s) => pids.some((p) => s.hostPids.includes(p)));
      const what =
        step === undefined
          ? say`${gpu}: needs the host-level kill on ${d.host}`
          : say`${gpu}: only a host-level kill on ${d.host} can free it (host PID ${pids.join(', ')})`;
      return tier2Next(what, 'host_kill', step, c, d);
    }
    case 'orphaned_memory': {
      const step = lastStep(c, 'host_reset', (s) => g.hostIndex !== null && s.gpuHostIndexes.includes(g.hostIndex));
      const what = say`${gpu}: memory with no process; a host-level GPU reset on ${d.host}`;
      return tier2Next(what, 'host_reset', step, c, d);
    }
    case 'leak_beside_holders':
      return say`${gpu}: ${g.unaccountedMiB === null ? '?' : count(g.unaccountedMiB)} MiB is held by no process, beside processes outside ${d.target} (host PID ${g.outside.map((h) => h.process.hostPid).join(', ')}). A reset can only run once the GPU has no process: when they have ended, \`/gpu unstick ${d.target}\` offers it.`;
    case 'gpu_error':
      return errorNext(g, g.error, d);
    case 'unidentified':
      return say`${gpu}: holders changed while we looked; run \`/gpu status ${d.target}\` and try again.`;
    case 'held_by_zombie':
      // A kill cannot free it, so no card is offered: the advice is who can (its parent), never "reboot".
      return say`${gpu}: ${joinRich(
        g.holders.map((h) => zombieWords(h, d.target)),
        ' ',
      )} Then \`/gpu status ${d.target}\` shows it free.`;
    case 'idle':
    case 'held_outside':
      return [];
  }
}

function othersNote(g: GpuChange): string | null {
  const n = g.othersFreedMiB;
  if (n === null || Math.abs(n) <= IDLE_MIB) return null;
  const gpu = `GPU ${g.index ?? '?'}`;
  return n > 0
    ? `${gpu}: ${count(n)} MiB freed outside this incident.`
    : `${gpu}: ${count(-n)} MiB more in use, taken by processes outside this incident.`;
}

const NO_CONTEXT: VerdictContext = { steps: [], approvers: null, requester: null };

/**
 * Before → after per GPU of the target, and the verdict with the next step. Speaks only of the
 * memory the target's holders held (and memory no process held); what others freed or took is
 * reported apart. Never green while a target GPU is in error, unreadable or missing after. Pure.
 */
export function verdictOf(before: Diagnosis, after: Diagnosis, context: VerdictContext = NO_CONTEXT): Verdict {
  const gpus = before.gpus.map((b): GpuChange => {
    const a = match(b, after.gpus);
    const afterState: AfterState = a === undefined ? 'missing' : a.kind === 'gpu_error' ? 'in_error' : 'read';
    const heldMiB = incidentMiB(b);
    const leftMiB = a !== undefined && afterState === 'read' ? incidentMiB(a) : null;
    const freedMiB = heldMiB !== null && leftMiB !== null ? Math.min(heldMiB, Math.max(0, heldMiB - leftMiB)) : null;
    const beforeMiB = b.usedMiB;
    const afterMiB = afterState === 'read' ? (a?.usedMiB ?? null) : null;
    const othersFreedMiB =
      beforeMiB !== null && afterMiB !== null && freedMiB !== null ? beforeMiB - afterMiB - freedMiB : null;
    return {
      index: b.index,
      uuid: b.uuid,
      beforeMiB,
      afterMiB,
      heldMiB,
      leftMiB,
      freedMiB,
      othersFreedMiB,
      before: b.kind,
      after: a?.kind ?? null,
      afterState,
      recovered: isStuck(b) && a !== undefined && afterState === 'read' && !isStuck(a),
    };
  });
  const stuckBefore = gpus.filter((g) => isStuck({ kind: g.before }));
  const recovered = stuckBefore.filter((g) => g.recovered);
  // A GPU the target held nothing on before (idle, or only others' processes) whose holders
  // changed while the after-view was read: a neighbour's change (another incident, a job ending),
  // never the target's unfinished work. It is said apart, as the neighbour's.
  const neighbours = after.gpus.filter((a) => {
    const b = match(a, before.gpus);
    return a.kind === 'unidentified' && b !== undefined && (b.kind === 'idle' || b.kind === 'held_outside');
  });
  const stillStuck = after.gpus.filter((a) => isStuck(a) && !neighbours.includes(a));
  const missing = gpus.filter((g) => g.afterState === 'missing');
  const inError =
    after.error !== null ||
    stillStuck.some((g) => g.kind === 'gpu_error') ||
    (before.gpus.length === 0 && before.error !== null);
  const freedAny = gpus.some((g) => (g.freedMiB ?? 0) > IDLE_MIB && isStuck({ kind: g.before }));
  const someGood = recovered.length > 0 || freedAny;
  const kind: VerdictKind = inError
    ? someGood
      ? 'partially_recovered'
      : 'gpu_error'
    : missing.length > 0
      ? someGood
        ? 'partially_recovered'
        : 'not_verified'
      : stuckBefore.length === 0 && stillStuck.length === 0
        ? 'nothing_stuck'
        : stillStuck.length === 0
          ? 'recovered'
          : someGood
            ? 'partially_recovered'
            : 'still_stuck';

  const next: Rich[] = [];
  const machineError = after.error ?? (before.gpus.length === 0 ? before.error : null);
  if (machineError !== null && !stillStuck.some((g) => g.error === machineError))
    next.push(
      say`nvidia-smi failed on ${after.target} or ${after.host}: ${errorAdvice(machineError.kind, after.target, after.host)}`,
    );
  for (const g of missing) {
    const b = before.gpus.find((x) => (x.uuid !== null ? x.uuid === g.uuid : x.index === g.index));
    next.push(
      say`GPU ${g.index ?? '?'}: missing from ${after.target}'s nvidia-smi after the run${after.error ? say` (${after.error.message})` : ''}, so nothing can be said about its memory${b && isStuck(b) ? say` (${b.usedMiB === null ? '?' : count(b.usedMiB)} MiB were in use before)` : ''}. Run \`/gpu status ${after.host}\`; if the GPU stays missing, look for Xid 79 (fallen off the bus) in dmesg on ${after.host}: then only a reboot of ${after.host} helps.`,
    );
  }
  for (const g of stillStuck) {
    const s = nextFor(g, after, context);
    if (s.length > 0) next.push(s);
  }
  return {
    kind,
    title: TITLES[kind],
    gpus,
    totalFreedMiB: gpus.reduce((n, g) => n + (g.freedMiB ?? 0), 0),
    outside: [
      ...gpus.map(othersNote).filter((s): s is string => s !== null),
      ...neighbours.map(
        (g) =>
          `GPU ${g.index ?? g.hostIndex ?? '?'}: processes outside this incident changed while it was read (this incident held nothing there).`,
      ),
    ],
    ...adviceOf(next.length > 0 ? joinRich(next, ' ') : null),
  };
}
