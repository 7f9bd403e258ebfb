import { sameProcess } from '../../src/gpu/process-ref.ts';
import { checkRequest } from '../../src/auth/signed-jobs.ts';
import type { Envelope } from '../../src/auth/envelope.ts';
import { NO_APPROVAL } from '../../src/agent-grammar/arg-types.ts';
import type { ContainerFailure, Diagnosis } from '../../src/gpu/diagnose.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { restrictStep, type Step } from '../../src/plan/unstick-plan.ts';
import { diagnoseReadings } from '../../src/readings/unstick-readings.ts';
import type { UnstickJob } from '../../src/queue/jobs.ts';
import { asAttempt, type Ev, loadMeta } from './attempt-fence.ts';
import type { UnstickWorkerDeps } from './deps.ts';
import { resolveTarget, type Target } from './target.ts';
import { firstBefore, IncidentRun } from './unstick-run.ts';

/**
 * `/gpu unstick <container>`: before snapshots, diagnosis, the container-side step if any,
 * a fresh look, then either done or an approval card for the host-level step.
 */
export async function runUnstickJob(job: UnstickJob, deps: UnstickWorkerDeps): Promise<void> {
  const run = new IncidentRun(job.incidentId, deps);
  return asAttempt(run, () => unstickJob(run, job, deps));
}

async function unstickJob(run: IncidentRun, job: UnstickJob, deps: UnstickWorkerDeps): Promise<void> {
  const meta = await loadMeta(run);
  await run.append({ type: 'started', at: run.at(), worker: deps.workerId });
  const t = resolveTarget(deps, job.machineId);
  if (typeof t === 'string') {
    await run.error('target_unknown', `${t}. Nothing was run.`);
    return run.finish(meta, null);
  }
  if (!meta) {
    await run.error(
      'internal',
      `incident ${job.incidentId} has no record (requester unknown), so no approval could be asked for. Nothing was run.`,
    );
    return run.finish(null, null);
  }
  // The job's data is not the record: the incident names its target; a job naming another is refused (and closes nothing).
  if (meta.targets[0] !== job.machineId) {
    await run.error(
      'job_mismatch',
      `this job names \`${job.machineId}\` but incident ${job.incidentId} is about \`${meta.targets[0] ?? '?'}\`; nothing was run.`,
    );
    return;
  }
  // Tier 1 acts on the request alone, so it must be the bot's, not a Redis writer's: signed, for this incident
  // and target, not past its expiry, and used once. What Redis says of the requester is checked against it.
  const now = deps.now().getTime();
  const request = await deps.log.request(job.incidentId);
  // The host and vmid the bot signed must be this worker's own reading of the inventory: the agent checks the plan against them.
  const req = checkRequest(
    request,
    deps.keys.botPublic,
    { incidentId: job.incidentId, target: job.machineId, host: t.host.id, vmid: t.container.vmid },
    now,
  );
  const mismatch =
    req.ok && (req.value.requester !== meta.requester || req.value.channel !== meta.channel)
      ? 'the incident record names another requester or channel than the signed request'
      : null;
  if (!req.ok || mismatch !== null) {
    const why = req.ok ? (mismatch ?? '') : req.why;
    const lapsed = !req.ok && req.code === 'lapsed';
    deps.logger
      .child({ incident: job.incidentId })
      .warn(
        { reason: req.ok ? 'mismatch' : req.code, why, event: 'request_refused' },
        'unstick request refused: nothing run',
      );
    await run.error(
      lapsed ? 'request_lapsed' : 'request_unverified',
      lapsed
        ? `This request lapsed: ${why}. Nothing was run. Run \`/gpu unstick ${t.container.id}\` again if the GPUs are still stuck.`
        : `This request is not one the bot signed (${why}); nothing was run.`,
    );
    return run.finish(meta, null);
  }
  const take = await deps.nonces.take(req.value.nonce, `${job.incidentId}:request`, req.value.expiresAt, now);
  if (take === 'replayed') {
    deps.logger
      .child({ incident: job.incidentId })
      .warn({ reason: 'replayed', event: 'request_refused' }, 'a signed request used before: nothing run');
    return;
  }
  try {
    return await unstickVerified(run, job, deps, meta, t, { envelope: request, expiresAt: req.value.expiresAt });
  } finally {
    deps.nonces.done(req.value.nonce);
  }
}

/** The unstick job once its request is the bot's (unstickJob checked it). */
async function unstickVerified(
  run: IncidentRun,
  job: UnstickJob,
  deps: UnstickWorkerDeps,
  meta: IncidentMeta,
  t: Target,
  signed: { envelope: Envelope | null; expiresAt: number },
): Promise<void> {
  const r0 = await run.read(t, 'before');
  if (!r0) {
    await run.error(
      'machine_error',
      `Nothing was signalled: ${run.lastFailed.join(' and ')} could not be read (the reason is above), and unstick acts only on both views.`,
    );
    return run.finish(meta, null);
  }
  const before = await run.diagnose(t, r0, 'before');
  // A re-run (BullMQ handed this job over after its worker died) is judged against the first
  // attempt: the verdict compares with what the incident started from, and the container step is
  // the one the first attempt planned. Re-planned from this fresh look, the survivors of a SIGTERM
  // already sent would make a different step (other targets, other id) and get a second SIGTERM.
  const events = await deps.log.events(job.incidentId);
  const first = firstBefore(events) ?? before;
  const earlier = events.find(
    (e): e is Ev<'step_started'> => e.type === 'step_started' && e.kind === 'container_signal',
  );
  // It ran to its end before the worker died: this fresh look is its after; nothing is run again.
  if (earlier && events.some((e) => e.type === 'step_finished' && e.stepId === earlier.stepId))
    return run.next(t, meta, first, before);
  // Only processes this attempt's own readings show as GPU holders now: the first attempt's plan
  // comes back from Redis and is not trusted beyond that. None of them left: a fresh plan (new processes).
  const fresh = run.plan(t, before).steps.find((s) => s.tier === 1);
  const firstTier1 = earlier ? run.plan(t, first).steps.find((s) => s.tier === 1) : undefined;
  const holdersNow = before.gpus.flatMap((g) => g.holders.map((h) => h.process));
  const resumed = firstTier1
    ? restrictStep(firstTier1, holdersNow, { timeoutMs: deps.timing.commandTimeoutMs })
    : undefined;
  const tier1 = resumed && resumed.targets.length > 0 ? resumed : fresh;
  if (!tier1) return run.next(t, meta, first, before);

  // A stolen worker key cannot signal: the agent does only with the bot's request and this worker's plan on stdin.
  const envelopes =
    signed.envelope === null
      ? null
      : {
          request: signed.envelope,
          decisions: [],
          plan: run.tier1Plan(t, tier1, meta.requester, signed.expiresAt),
        };
  const res = await run.runStep(
    t,
    tier1,
    { gpus: r0.host.snapshot.gpus, apps: r0.host.snapshot.processes },
    { approvalId: NO_APPROVAL, envelopes },
  );
  // Superseded meanwhile (stalled, and a later attempt took over): that attempt carries on, this one stops.
  if (!(await run.current())) return;
  const r1 = await run.read(t, 'after');
  if (!r1) {
    await run.error(
      'machine_error',
      `the container step ran (${res.outcome}), but the fresh snapshot failed; check \`/gpu status ${t.container.id}\` before anything else.`,
    );
    return run.finish(meta, null);
  }
  // Holders the container could not stop, and tier-1 targets still running as the same process: only the host can now.
  const after = diagnoseReadings(t.container.id, t.host.id, r1, {
    containerExecUid: t.execUid,
    containerFailed: res.containerFailed,
  });
  const failed =
    res.outcome !== 'interrupted' && res.error === null
      ? withSurvivors(after, tier1, res.containerFailed)
      : [...res.containerFailed];
  const current = await run.diagnose(t, r1, 'after', failed);
  return run.next(t, meta, first, current);
}

/**
 * The step's own failures, plus each tier-1 target that still holds a GPU as the same process (host PID
 * and start time) after the step ran to its end: the container could not stop it, only the host can.
 */
function withSurvivors(
  after: Diagnosis,
  tier1: Step,
  containerFailed: readonly ContainerFailure[],
): ContainerFailure[] {
  const failed = [...containerFailed];
  for (const g of after.gpus) {
    for (const h of g.holders) {
      const targeted = h.reach === 'container' && tier1.targets.some((x) => sameProcess(x, h.process));
      if (targeted && !failed.some((f) => sameProcess(f.process, h.process))) {
        failed.push({
          process: h.process,
          reason: 'it was still running after SIGTERM and SIGKILL from inside the container',
        });
      }
    }
  }
  return failed;
}
