import { isStuck, type Diagnosis, type DiagnosisKind, type GpuDiagnosis } from './diagnose.ts';

export interface GpuChange {
  index: number | null;
  uuid: string | null;
  beforeMiB: number | null;
  afterMiB: number | null;
  /** before − after, never negative; null when either side is unknown. */
  freedMiB: number | null;
  before: DiagnosisKind;
  after: DiagnosisKind | null;
  /** Was stuck before and is no longer (idle, or only outside holders remain). */
  recovered: boolean;
}

export type VerdictKind = 'recovered' | 'partially_recovered' | 'still_stuck' | 'nothing_stuck';

export interface Verdict {
  kind: VerdictKind;
  /** `Recovered`, `Partially recovered`, `Still stuck`, `Nothing was stuck`. */
  title: string;
  gpus: GpuChange[];
  totalFreedMiB: number;
  /** What to do next, in plain words (null when there is nothing left to do). */
  nextStep: string | null;
}

const TITLES: Record<VerdictKind, string> = {
  recovered: 'Recovered',
  partially_recovered: 'Partially recovered',
  still_stuck: 'Still stuck',
  nothing_stuck: 'Nothing was stuck',
};

function match(a: GpuDiagnosis, bs: readonly GpuDiagnosis[]): GpuDiagnosis | undefined {
  return a.uuid !== null ? bs.find((b) => b.uuid === a.uuid) : bs.find((b) => b.index === a.index);
}

function nextFor(g: GpuDiagnosis, d: Diagnosis): string {
  const gpu = `GPU ${g.index ?? '?'}`;
  switch (g.kind) {
    case 'held_in_container':
      return `${gpu}: still held by processes the container can stop; run \`/gpu unstick ${d.target}\` again.`;
    case 'held_host_only':
      return `${gpu}: needs the host-level kill on ${d.host}, approved by a second person.`;
    case 'orphaned_memory':
      return `${gpu}: memory with no process; a host-level GPU reset on ${d.host}, approved by a second person.`;
    case 'gpu_error':
      return `${gpu}: in error; look at ${d.host} (\`nvidia-smi -q\`, dmesg), then a host-level reset or a reboot.`;
    case 'unidentified':
      return `${gpu}: holders changed while we looked; run \`/gpu status ${d.target}\` and try again.`;
    case 'idle':
    case 'held_outside':
      return '';
  }
}

/** Before → after per GPU of the target, and the verdict with the next step. Pure. */
export function verdictOf(before: Diagnosis, after: Diagnosis): Verdict {
  const gpus = before.gpus.map((b): GpuChange => {
    const a = match(b, after.gpus);
    const beforeMiB = b.usedMiB;
    const afterMiB = a?.usedMiB ?? null;
    const freedMiB = beforeMiB !== null && afterMiB !== null ? Math.max(0, beforeMiB - afterMiB) : null;
    return {
      index: b.index,
      uuid: b.uuid,
      beforeMiB,
      afterMiB,
      freedMiB,
      before: b.kind,
      after: a?.kind ?? null,
      recovered: isStuck(b) && a !== undefined && !isStuck(a),
    };
  });
  const stuckBefore = gpus.filter((g) => isStuck({ kind: g.before }));
  const recovered = stuckBefore.filter((g) => g.recovered);
  const stillStuck = after.gpus.filter(isStuck);
  const kind: VerdictKind =
    stuckBefore.length === 0 && stillStuck.length === 0
      ? 'nothing_stuck'
      : stillStuck.length === 0
        ? 'recovered'
        : recovered.length > 0 || gpus.some((g) => (g.freedMiB ?? 0) > 0 && isStuck({ kind: g.before }))
          ? 'partially_recovered'
          : 'still_stuck';
  const next = stillStuck.map((g) => nextFor(g, after)).filter((s) => s !== '');
  return {
    kind,
    title: TITLES[kind],
    gpus,
    totalFreedMiB: gpus.reduce((n, g) => n + (g.freedMiB ?? 0), 0),
    nextStep: next.length > 0 ? next.join(' ') : null,
  };
}
