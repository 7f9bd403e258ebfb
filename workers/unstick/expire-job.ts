import type { ExpireJob } from '../../src/queue/jobs.ts';
import { EXPIRED_NOTE } from '../../src/render/approval-nudges.ts';
import { asAttempt, loadMeta } from './attempt-fence.ts';
import type { UnstickWorkerDeps } from './deps.ts';
import { firstBefore, IncidentRun, latestDiagnosis, withNote } from './unstick-run.ts';

/** The approval's time ran out: if it was still pending, say so and close the incident; nothing runs. */
export async function runExpireJob(job: ExpireJob, deps: UnstickWorkerDeps): Promise<void> {
  const run = new IncidentRun(job.incidentId, deps);
  return asAttempt(run, () => expireJob(run, job, deps));
}

async function expireJob(run: IncidentRun, job: ExpireJob, deps: UnstickWorkerDeps): Promise<void> {
  const res = await deps.approvals.expire(job.approvalId, deps.now().getTime());
  // Already expired with the incident still open: an earlier attempt of this job expired it and
  // died before saying so; the log decides what is still to be written.
  const approval = res.expired || res.reason === 'already_expired' ? res.approval : null;
  const open =
    approval !== null &&
    approval.incidentId === job.incidentId &&
    (res.expired || !(await deps.log.events(job.incidentId)).some((e) => e.type === 'finished'));
  if (!approval || !open) {
    deps.logger
      .child({ incident: job.incidentId })
      .info(
        { approvalId: job.approvalId, reason: res.expired ? 'other_incident' : res.reason },
        'expiry: nothing to do',
      );
    return;
  }
  if (
    !(await deps.log.events(job.incidentId)).some((e) => e.type === 'approval_expired' && e.approvalId === approval.id)
  )
    await run.append({ type: 'approval_expired', at: run.at(), approvalId: approval.id, stepId: approval.stepId });
  const events = await deps.log.events(job.incidentId);
  const meta = await loadMeta(run);
  const before = firstBefore(events);
  const latest = latestDiagnosis(events) ?? before;
  const verdict = before && latest ? withNote(run.verdictOf(before, latest, meta, events), [EXPIRED_NOTE]) : null;
  return run.finish(meta, verdict);
}
