import type { Approval } from '../../src/approval/approval-store.ts';
import { checkDecider } from '../../src/approval/decider-check.ts';
import { checkDecision, checkRequest } from '../../src/auth/signed-jobs.ts';
import type { Diagnosis } from '../../src/gpu/diagnose.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { openSeal, planDigest, type SealedStep } from '../../src/plan/plan-seal.ts';
import { type Step, stepCommands } from '../../src/plan/unstick-plan.ts';
import type { DecisionJob } from '../../src/queue/jobs.ts';
import { type Rich, say, user } from '../../src/text/rich.ts';
import { asAttempt, type Ev, loadMeta } from './attempt-fence.ts';
import type { UnstickWorkerDeps } from './deps.ts';
import { resolveTarget, type Target } from './target.ts';
import { firstBefore, hostOnlyOf, IncidentRun, latestDiagnosis, withNote } from './unstick-run.ts';

/** A second person decided: run the approved step on the host, or close the incident if denied. */
export async function runDecisionJob(job: DecisionJob, deps: UnstickWorkerDeps): Promise<void> {
  const run = new IncidentRun(job.incidentId, deps);
  return asAttempt(run, () => decisionJob(run, job, deps));
}

async function decisionJob(run: IncidentRun, job: DecisionJob, deps: UnstickWorkerDeps): Promise<void> {
  const logger = deps.logger.child({ incident: job.incidentId, approvalId: job.approvalId });
  const approval = await deps.approvals.get(job.approvalId);
  if (!approval || approval.incidentId !== job.incidentId) {
    logger.warn('decision job for an unknown approval (or another incident): nothing run');
    return;
  }
  // Taken up: the sweep for decisions whose job was never queued leaves this one alone.
  await deps.approvals.dispatched(approval.id);
  if (approval.state !== 'approved' && approval.state !== 'denied') {
    logger.info({ state: approval.state }, 'decision job for an undecided or expired approval: nothing run');
    return;
  }
  const events = await deps.log.events(job.incidentId);
  if (events.some((e) => e.type === 'finished')) {
    logger.info('incident already finished: nothing run');
    return;
  }
  const meta = await loadMeta(run);
  const before = firstBefore(events);
  const t = resolveTarget(deps, meta?.targets[0] ?? '');
  if (!before || !meta || typeof t === 'string') {
    await run.error('internal', `the incident record has no card for this approval (or no target); nothing was run.`);
    return run.finish(meta, null);
  }
  const stillStuck = (note: Rich) =>
    run.finish(meta, withNote(run.verdictOf(before, latestDiagnosis(events) ?? before, meta, events), note));
  // What runs is what this worker signed when it asked, rebuilt from its templates; the stream's copy of the step is only the card's text.
  const opened = openSeal(approval.seal, deps.keys.workerPublic, deps.planKey);
  const sealed = opened.ok ? opened.sealed : null;
  const why = !opened.ok
    ? opened.why
    : sealed === null ||
        sealed.incidentId !== job.incidentId ||
        sealed.approvalId !== approval.id ||
        sealed.step.id !== approval.stepId ||
        sealed.step.tier !== 2 ||
        sealed.container !== t.container.id ||
        sealed.vmid !== t.container.vmid ||
        sealed.step.machineId !== t.host.id
      ? 'the sealed plan is for another approval, incident or machine'
      : null;
  if (sealed === null || approval.seal === null || why !== null) {
    await run.error('plan_unverified', `${why ?? 'no sealed plan'}; nothing was run. Ask again with \`/gpu unstick\`.`);
    logger.warn({ why }, 'approved step without a valid worker seal: nothing run');
    return stillStuck([
      'The approved step could not be verified as the one this worker planned; nothing from the card was run.',
    ]);
  }
  // Who decided, what and when is the bot's signed decision naming this plan's digest;
  // the approval's state and decidedBy in Redis are not believed, as any Redis writer could set them.
  const now = deps.now().getTime();
  const dec = checkDecision(
    approval.signedDecision,
    deps.keys.botPublic,
    { approvalId: approval.id, incidentId: job.incidentId, planDigest: planDigest(approval.seal) },
    now,
  );
  if (!dec.ok) {
    logger.warn({ reason: dec.code, why: dec.why, event: 'decision_refused' }, 'decision refused: nothing run');
    if (dec.code === 'lapsed') {
      await run.error('approval_lapsed', `The approval lapsed: ${dec.why}. Nothing from the card was run.`);
      return stillStuck(
        say`The approval lapsed (${dec.why}): nothing from the card was run. Run ${`/gpu unstick ${t.container.id}`} again for a new card if the GPUs are still stuck.`,
      );
    }
    await run.error('decision_unverified', `This decision is not one the bot signed (${dec.why}); nothing was run.`);
    return stillStuck(['The decision on the card is not one the bot signed: nothing from the card was run.']);
  }
  const by = dec.value.decider;
  // Time is part of the seal: a decision signed after the card's expiry decides nothing.
  if (dec.value.signedAt >= sealed.expiresAt) {
    await run.append({
      type: 'approval_refused',
      at: run.at(),
      approvalId: approval.id,
      by,
      reason: 'approval_expired',
    });
    logger.warn(
      { by, reason: 'approval_expired', event: 'approval_refused' },
      'decided after the card expired: nothing run',
    );
    return stillStuck(say`The decision by ${user(by)} came after the card expired: nothing from the card was run.`);
  }
  const take = await deps.nonces.take(
    dec.value.nonce,
    `${job.incidentId}:decision:${approval.id}`,
    dec.value.expiresAt,
    now,
  );
  if (take === 'replayed') {
    logger.warn({ by, reason: 'replayed', event: 'decision_refused' }, 'a signed decision used before: nothing run');
    return;
  }
  try {
    return await decided(run, job, deps, { meta, before, events, t, approval, sealed, by, decision: dec.value });
  } finally {
    deps.nonces.done(dec.value.nonce);
  }
}

/** A decision the bot signed, on a plan this worker signed (decisionJob checked both). */
async function decided(
  run: IncidentRun,
  job: DecisionJob,
  deps: UnstickWorkerDeps,
  d: {
    meta: IncidentMeta;
    before: Diagnosis;
    events: readonly AnyLoggedEvent[];
    t: Target;
    approval: Approval;
    sealed: SealedStep;
    by: string;
    decision: { decision: 'approved' | 'denied'; signedAt: number };
  },
): Promise<void> {
  const { meta, before, events, t, approval, sealed, by } = d;
  const logger = deps.logger.child({ incident: job.incidentId, approvalId: job.approvalId });
  const stillStuck = (note: Rich) =>
    run.finish(meta, withNote(run.verdictOf(before, latestDiagnosis(events) ?? before, meta, events), note));
  if (d.decision.decision === 'denied') {
    // What the container already failed to stop stays host-only in the diagnosis and the advice
    // (the sealed step's targets: words only, nothing is run from them here).
    const hostOnly = hostOnlyOf(sealed.step.targets);
    const r = await run.read(t, 'after');
    const after = r ? await run.diagnose(t, r, 'after', hostOnly) : (latestDiagnosis(events) ?? before);
    const known = [{ approvalId: approval.id, decision: 'denied' as const, by }];
    const verdict = run.verdictOf(before, after, meta, await deps.log.events(job.incidentId), known);
    return run.finish(meta, withNote(verdict, say`Denied by ${user(by)}: nothing from the approval card was run.`));
  }
  // The decider is checked again, here, against this worker's own live lists and the rules of the
  // plan it signed (requester, frozen approvers, admin-only past the budget, escalation time).
  const who = checkDecider(
    {
      decider: by,
      decidedAt: d.decision.signedAt,
      requesters: [sealed.requester, meta.requester],
      frozenApprovers: sealed.approvers,
      adminOnly: sealed.adminOnly,
      escalation: sealed.escalation,
    },
    { approvers: deps.approvers, admins: deps.admins, escalation: deps.escalation?.approvers ?? [] },
  );
  if (!who.ok) {
    await run.append({ type: 'approval_refused', at: run.at(), approvalId: approval.id, by, reason: who.code });
    logger.warn(
      { by, reason: who.code, why: who.why, event: 'approval_refused' },
      'approved by someone who may not approve it: nothing run',
    );
    return stillStuck(say`The approval by ${user(by)} was refused (${who.why}): nothing from the card was run.`);
  }
  const step: Step = {
    ...sealed.step,
    commands: stepCommands(sealed.step.kind, sealed.step.targets, sealed.step.gpus, {
      timeoutMs: deps.timing.commandTimeoutMs,
    }),
  };
  // The budget is taken when the step is about to run (once per step): a card approved within it
  // may still find it spent by other incidents since; then only an admin's approval goes through.
  const spent = await deps.budget.consume(
    t.host.id,
    { incidentId: job.incidentId, stepId: step.id },
    deps.now().getTime(),
    deps.admins.includes(by),
  );
  if (spent === 'exhausted') {
    await run.append({
      type: 'approval_refused',
      at: run.at(),
      approvalId: approval.id,
      by,
      reason: 'budget_exhausted',
    });
    await run.error(
      'budget_exhausted',
      `${t.host.id} already had ${deps.budget.limit} host-level destructive step(s) in the last hour (the blast-radius budget); only an admin (GPU_MEDIC_ADMINS) can approve more. Nothing was run.`,
    );
    return stillStuck([
      'The blast-radius budget of the host is spent for this hour: nothing from the card was run. Ask again with /gpu unstick and have an admin approve it.',
    ]);
  }
  // The step re-checks everything it acts on; the last host snapshot only sets the release baseline.
  const hostSnap = [...events]
    .reverse()
    .find((e): e is Ev<'snapshot'> => e.type === 'snapshot' && e.snapshot.machineId === t.host.id)?.snapshot;
  // The host's agent acts only with the bot's request (which names the container and host), the
  // bot's decision and this worker's signed plan on stdin. The request's own expiry does not count
  // here (the card's does), but it must be the bot's, for this incident, container and host.
  const seal = approval.seal;
  const request = await deps.log.request(job.incidentId);
  const req = checkRequest(
    request,
    deps.keys.botPublic,
    { incidentId: job.incidentId, target: t.container.id, host: t.host.id, vmid: t.container.vmid },
    deps.now().getTime(),
    true,
  );
  if (!req.ok || request === null) {
    const reason = req.ok ? 'no signed request is stored' : req.why;
    await run.error(
      'request_unverified',
      `The incident's request is not one the bot signed (${reason}); nothing was run.`,
    );
    return stillStuck(['The request behind this card is not one the bot signed: nothing from the card was run.']);
  }
  const envelopes =
    approval.signedDecision === null || seal === null
      ? null
      : { request, decisions: [approval.signedDecision], plan: { body: seal.body, sig: seal.sig } };
  const res = await run.runStep(
    t,
    step,
    { gpus: hostSnap?.gpus ?? [], apps: hostSnap?.processes ?? [] },
    { approvalId: approval.id, envelopes },
  );
  // Superseded meanwhile (stalled, and a later attempt took over): that attempt carries on, this one stops.
  if (!(await run.current())) return;
  const r1 = await run.read(t, 'after');
  if (!r1) {
    await run.error(
      'machine_error',
      `the approved step ran (${res.outcome}), but the fresh snapshot failed; check \`/gpu status ${t.container.id}\`.`,
    );
    return run.finish(meta, null);
  }
  const hostOnly = hostOnlyOf(step.targets);
  const after = await run.diagnose(t, r1, 'after', hostOnly);
  return run.next(t, meta, before, after);
}
