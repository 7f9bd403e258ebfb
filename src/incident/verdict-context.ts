/**
 * What an incident's log says happened to its steps, as the verdict's advice needs it: which
 * host-level step was denied (by whom), expired, or ran and did not do it. Pure: events in,
 * context out; the worker passes it to `verdictOf` so the last word is what is really left.
 */
import type { StepHistory, VerdictContext } from '../gpu/verdict.ts';
import type { AnyLoggedEvent } from './all-events.ts';

type Ev<T extends AnyLoggedEvent['type']> = Extract<AnyLoggedEvent, { type: T }>;

/** A decision the worker knows from the approval store that the log may not hold yet. */
export interface KnownDecision {
  approvalId: string;
  decision: 'approved' | 'denied';
  by: string;
}

export function verdictContextOf(
  events: readonly AnyLoggedEvent[],
  approvers: readonly string[] | null,
  requester: string | null,
  known: readonly KnownDecision[] = [],
): VerdictContext {
  const steps: StepHistory[] = [];
  const finishedOf = (stepId: string): Ev<'step_finished'> | undefined =>
    [...events].reverse().find((e): e is Ev<'step_finished'> => e.type === 'step_finished' && e.stepId === stepId);
  for (const e of events) {
    if (e.type === 'step_started' && e.kind === 'container_signal') {
      if (steps.some((s) => s.kind === 'container_signal')) continue;
      const fin = finishedOf(e.stepId);
      const hostPids = events
        .filter((x): x is Ev<'signalled'> => x.type === 'signalled' && x.stepId === e.stepId)
        .map((x) => x.hostPid);
      steps.push({
        kind: 'container_signal',
        outcome: fin?.outcome === 'done' ? 'done' : 'failed',
        by: null,
        hostPids: [...new Set(hostPids)],
        gpuHostIndexes: [],
        message: fin?.message ?? null,
      });
    }
    if (e.type === 'approval_requested') {
      const about = {
        kind: e.step.kind,
        hostPids: e.step.targets.map((t) => t.hostPid),
        gpuHostIndexes: e.step.gpus.flatMap((g) => (g.hostIndex === null ? [] : [g.hostIndex])),
      };
      const decided =
        events.find(
          (x): x is Ev<'approval_decided'> => x.type === 'approval_decided' && x.approvalId === e.approvalId,
        ) ?? known.find((k) => k.approvalId === e.approvalId);
      const expired = events.some((x) => x.type === 'approval_expired' && x.approvalId === e.approvalId);
      if (decided?.decision === 'denied') steps.push({ ...about, outcome: 'denied', by: decided.by, message: null });
      else if (decided?.decision === 'approved') {
        const fin = finishedOf(e.stepId);
        if (fin)
          steps.push({
            ...about,
            outcome: fin.outcome === 'done' ? 'done' : 'failed',
            by: null,
            message: fin.message || null,
            ran: events.some((x) => x.type === 'command' && x.stepId === e.stepId),
          });
      } else if (expired) steps.push({ ...about, outcome: 'expired', by: null, message: null });
    }
  }
  return { steps, approvers, requester };
}
