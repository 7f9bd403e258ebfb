/**
 * What became of one signal, in the same words everywhere (thread, summary, `/gpu history`, the
 * Markdown post-mortem): a refusal by gpu-medic's own re-check is not the kernel's "not
 * permitted", and neither is a process that had already exited. Pure.
 */
import type { UnstickEvent } from './unstick-events.ts';

type Signalled = Extract<UnstickEvent, { type: 'signalled' }>;

export type SignalOutcome = 'sent' | 'gone' | 'not_permitted' | 'failed' | 'refused';

/** Reason prefix the runner writes when the kernel refused a container-side signal (EPERM). */
const NOT_PERMITTED_PREFIX = 'the container may not signal it';

export function signalOutcome(e: Pick<Signalled, 'result' | 'reason' | 'refusedBy'>): SignalOutcome {
  if (e.result === 'sent') return 'sent';
  if (e.result === 'gone') return 'gone';
  if (e.refusedBy !== undefined) return e.refusedBy === 'recheck' ? 'refused' : e.refusedBy;
  // Logs written before `refusedBy` existed: the runner's own wording tells.
  return e.reason?.startsWith(NOT_PERMITTED_PREFIX) ? 'not_permitted' : 'refused';
}

export const OUTCOME_WORDS: Record<SignalOutcome, string> = {
  sent: 'signalled',
  gone: 'already gone',
  not_permitted: 'not permitted',
  failed: 'signal failed',
  refused: 'refused by the re-check',
};

/** Same process: host PID and start time when both events carry it, else host and container PID. */
function sameTarget(
  a: Pick<Signalled, 'hostPid' | 'containerPid' | 'startTimeTicks'>,
  b: Pick<Signalled, 'hostPid' | 'containerPid' | 'startTimeTicks'>,
): boolean {
  if (a.hostPid !== b.hostPid) return false;
  if (a.startTimeTicks !== undefined && b.startTimeTicks !== undefined) return a.startTimeTicks === b.startTimeTicks;
  return a.containerPid === b.containerPid;
}

/** The targets never signalled: each signalled event that is not `sent`, for a process no `sent` event names. */
export function neverSignalled<E extends Signalled>(events: readonly E[]): E[] {
  const sent = events.filter((e) => e.result === 'sent');
  const out: E[] = [];
  for (const e of events) {
    if (e.result === 'sent' || sent.some((s) => sameTarget(s, e))) continue;
    if (out.some((o) => sameTarget(o, e))) continue;
    out.push(e);
  }
  return out;
}
