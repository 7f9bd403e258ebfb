import type { EscalateJob, RemindJob } from '../../src/queue/jobs.ts';
import { asAttempt } from './attempt-fence.ts';
import type { UnstickWorkerDeps } from './deps.ts';
import { IncidentRun } from './unstick-run.ts';

/** Half the card's time to live: if it still waits, its deciders are mentioned again in the thread (once). Nothing runs. */
export async function runRemindJob(job: RemindJob, deps: UnstickWorkerDeps): Promise<void> {
  const run = new IncidentRun(job.incidentId, deps);
  return asAttempt(run, () => nudgeJob(run, job, 'remind'));
}

/** The escalation time: if the card still waits, the escalation group is mentioned (once) and may decide from now on. Nothing runs. */
export async function runEscalateJob(job: EscalateJob, deps: UnstickWorkerDeps): Promise<void> {
  const run = new IncidentRun(job.incidentId, deps);
  return asAttempt(run, () => nudgeJob(run, job, 'escalate'));
}

/** Slack a delayed job may fire early by (clocks of the queueing and the running process). */
const EARLY_MS = 2000;

async function nudgeJob(run: IncidentRun, job: RemindJob | EscalateJob, kind: 'remind' | 'escalate'): Promise<void> {
  const { deps } = run;
  const what = kind === 'remind' ? 'reminder' : 'escalation';
  const logger = deps.logger.child({ incident: job.incidentId, approvalId: job.approvalId });
  const nothing = (reason: string, why: string): void => logger.info({ reason, job: kind }, `${what}: ${why}`);
  const approval = await deps.approvals.get(job.approvalId);
  if (!approval || approval.incidentId !== job.incidentId)
    return nothing('approval_not_found', 'no such approval in this incident, nothing posted');
  if (approval.state !== 'pending')
    return nothing(
      approval.state,
      `the approval is ${approval.state}, nothing to ${kind === 'remind' ? 'remind of' : 'escalate'}`,
    );
  const now = deps.now().getTime();
  if (now >= approval.expiresAt)
    return nothing('expired', 'the approval has run out of time (its expiry job closes it), nothing posted');
  const escalated = approval.escalation !== undefined && now + EARLY_MS >= approval.escalation.at;
  if (kind === 'escalate' && !escalated)
    return nothing(
      approval.escalation ? 'not_due' : 'no_escalation',
      approval.escalation ? 'not due yet, nothing posted' : 'this approval has no escalation group, nothing posted',
    );
  const events = await deps.log.events(job.incidentId);
  if (events.some((e) => e.type === 'finished')) return nothing('finished', 'the incident is over, nothing posted');
  const type = kind === 'remind' ? 'approval_reminded' : 'approval_escalated';
  if (events.some((e) => e.type === type && e.approvalId === approval.id))
    return nothing(
      'already',
      kind === 'remind' ? 'already reminded, nothing posted again' : 'already escalated, nothing posted again',
    );
  // The reminder pings whoever may decide now: the approvers, and the escalation group once it escalated.
  const deciders =
    kind === 'escalate'
      ? (approval.escalation?.approvers ?? [])
      : [...approval.approvers, ...(escalated ? (approval.escalation?.approvers ?? []) : [])];
  const pinged = [...new Set(deciders)].filter((u) => u !== approval.requester);
  await run.append({
    type,
    at: run.at(),
    approvalId: approval.id,
    stepId: approval.stepId,
    pinged,
    expiresAt: new Date(approval.expiresAt).toISOString(),
  });
  logger.info({ job: kind, pinged: pinged.length }, `${what} posted`);
}
