import { findMachine } from '../src/config/machines.ts';
import { runDoctor } from '../src/doctor/doctor.ts';
import type { DoctorJob } from '../src/queue/jobs.ts';
import type { StatusWorkerDeps } from './status.ts';

/** A read-only job, like status: the same deps. */
export type DoctorWorkerDeps = StatusWorkerDeps;

/**
 * `/gpu doctor` on the worker (it holds the SSH key): the same read-only checks as
 * `gpu-medic doctor`, one `doctor_report` event framed by `started` and `finished`. Machines this
 * worker's inventory lacks are an error event, never silently left out. Safe to retry.
 */
export async function runDoctorJob(job: DoctorJob, deps: DoctorWorkerDeps): Promise<void> {
  const t0 = deps.now().getTime();
  await deps.log.append(job.incidentId, { type: 'started', at: deps.now().toISOString(), worker: deps.workerId });
  const known = job.machines.filter((id) => findMachine(deps.inventory, id) !== null);
  const unknown = job.machines.filter((id) => !known.includes(id));
  if (unknown.length > 0)
    await deps.log.append(job.incidentId, {
      type: 'error',
      at: deps.now().toISOString(),
      code: 'target_unknown',
      message: `this worker's inventory has no machine ${unknown.map((u) => `"${u}"`).join(', ')}`,
    });
  let outcome: 'ok' | 'partial' | 'failed' = unknown.length > 0 ? 'failed' : 'ok';
  if (known.length > 0) {
    const report = await runDoctor(deps.inventory, known, {
      exec: (r, s) => deps.executor.exec(r, s),
      ...(deps.executor.probeLine
        ? { probeLine: deps.executor.probeLine.bind(deps.executor), access: deps.executor.access ?? 'agent' }
        : {}),
      commandTimeoutMs: deps.commandTimeoutMs,
    });
    await deps.log.append(job.incidentId, {
      type: 'doctor_report',
      at: deps.now().toISOString(),
      machines: known,
      findings: report.findings,
      failed: report.failed,
      warned: report.warned,
    });
    if (report.failed > 0) outcome = 'failed';
    deps.logger.info({ incident: job.incidentId, failed: report.failed, warned: report.warned }, 'doctor finished');
  }
  await deps.log.append(job.incidentId, {
    type: 'finished',
    at: deps.now().toISOString(),
    outcome,
    durationMs: deps.now().getTime() - t0,
  });
}
