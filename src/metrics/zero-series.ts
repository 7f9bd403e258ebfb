import type { Metrics } from './metrics.ts';

/** The label values docs/deploy.md documents for each counter, created at 0 when a process starts. */
export const DOCUMENTED_LABELS = {
  incidentKinds: ['status', 'status_all', 'unstick', 'doctor'],
  incidentOutcomes: ['ok', 'partial', 'failed'],
  stepKinds: ['container_signal', 'host_kill', 'host_reset'],
  stepResults: ['done', 'partial', 'failed', 'skipped', 'interrupted'],
  signals: ['TERM', 'KILL'],
  signalResults: ['sent', 'gone', 'skipped'],
  approvalOutcomes: ['approved', 'denied', 'expired'],
  approvalRefusals: [
    'self_approval',
    'not_approver',
    'escalation_not_due',
    'approval_expired',
    'approval_decided',
    'approval_not_found',
  ],
  sshErrorCodes: [
    'host_key_mismatch',
    'host_key_unpinned',
    'connect_timeout',
    'connect_failed',
    'auth_failed',
    'connection_lost',
    'command_timeout',
  ],
  slackMethods: ['chat.postMessage', 'chat.update', 'views.publish'],
} as const;

/**
 * A labelled counter has no series until its first event, so `increase(...[15m]) > 0` cannot fire
 * on that first event. Every documented label set is created here at 0, per SSH endpoint (the
 * `machine` label) for the SSH counters.
 */
export function zeroSeries(m: Metrics, o: { machines: readonly string[] }): void {
  const L = DOCUMENTED_LABELS;
  for (const kind of L.incidentKinds) for (const outcome of L.incidentOutcomes) m.incidents.inc({ kind, outcome }, 0);
  for (const kind of L.stepKinds) for (const result of L.stepResults) m.destructiveSteps.inc({ kind, result }, 0);
  for (const signal of L.signals) for (const result of L.signalResults) m.signals.inc({ signal, result }, 0);
  for (const outcome of L.approvalOutcomes) m.approvals.inc({ outcome, reason: '' }, 0);
  for (const reason of L.approvalRefusals) m.approvals.inc({ outcome: 'refused', reason }, 0);
  for (const machine of o.machines) {
    m.sshCommands.inc({ machine, result: 'ok' }, 0);
    for (const code of L.sshErrorCodes) m.sshErrors.inc({ code, machine }, 0);
  }
  for (const method of L.slackMethods) m.slackCalls.inc({ method, result: 'ok' }, 0);
}
