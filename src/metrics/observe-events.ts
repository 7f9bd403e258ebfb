import type { AnyEvent } from '../incident/all-events.ts';
import type { Metrics } from './metrics.ts';

/**
 * Counters derived from the incident log at the one place every event passes: its append (a
 * command's first event, `requested`, is written by `IncidentLog.openIn` instead; it counts nothing). Each
 * event is appended once, by one process, so bot and worker never count the same thing twice.
 * Pure apart from the counters; `kindOf` reads an incident's kind (only for `finished`).
 */
export function eventObserver(
  m: Metrics,
  kindOf: (incidentId: string) => Promise<string | null>,
): (incidentId: string, e: AnyEvent) => Promise<void> {
  // step_started names the kind; step_finished only the step id. Bounded: a step that never finishes is forgotten.
  const stepKinds = new Map<string, string>();
  return async (incidentId, e) => {
    switch (e.type) {
      case 'finished':
        m.incidents.inc({ kind: (await kindOf(incidentId)) ?? 'unknown', outcome: e.outcome });
        return;
      case 'step_started':
        if (stepKinds.size >= 1000) stepKinds.delete(stepKinds.keys().next().value ?? '');
        stepKinds.set(`${incidentId}/${e.stepId}`, e.kind);
        return;
      case 'step_finished': {
        const key = `${incidentId}/${e.stepId}`;
        const kind = stepKinds.get(key) ?? 'unknown';
        stepKinds.delete(key);
        m.stepSeconds.observe({ kind, outcome: e.outcome }, Math.max(0, e.durationMs) / 1000);
        m.destructiveSteps.inc({ kind, result: e.outcome });
        return;
      }
      case 'signalled':
        m.signals.inc({ signal: e.signal, result: e.result });
        return;
      case 'approval_decided':
        m.approvals.inc({ outcome: e.decision, reason: '' });
        return;
      case 'approval_expired':
        m.approvals.inc({ outcome: 'expired', reason: '' });
        return;
      case 'approval_refused':
        m.approvals.inc({ outcome: 'refused', reason: e.reason });
        return;
      default:
        return;
    }
  };
}
