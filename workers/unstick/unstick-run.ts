import { type Approval, ApprovalStore } from '../../src/approval/approval-store.ts';
import { escalationOf } from '../../src/approval/approval-policy.ts';
import { CodedError, ErrorCode } from '../../src/errors.ts';
import { type ContainerFailure, type Diagnosis, isStuck } from '../../src/gpu/diagnose.ts';
import type { Gpu, GpuProcess } from '../../src/gpu/types.ts';
import { adviceOf, type Verdict, verdictOf } from '../../src/gpu/verdict.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { type KnownDecision, verdictContextOf } from '../../src/incident/verdict-context.ts';
import type { Envelope } from '../../src/auth/envelope.ts';
import { sealStep } from '../../src/plan/plan-seal.ts';
import { parsePersistenceMode, persistenceMode } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { planUnstick, restrictStep, type Step, type StepTarget, stepHash } from '../../src/plan/unstick-plan.ts';
import { diagnoseReadings, readTarget, type TargetReadings } from '../../src/readings/unstick-readings.ts';
import {
  restorePersistence,
  runStep,
  type StepContext,
  type StepResult,
  type StepRunnerDeps,
} from '../../src/unstick-runner/unstick-runner.ts';
import { joinRich, type Rich } from '../../src/text/rich.ts';
import { approvalCardFits } from '../../src/render/unstick.ts';
import { APPROVAL_KEY, AttemptFence, type Ev } from './attempt-fence.ts';
import type { Target } from './target.ts';

/** One incident's run: what the unstick jobs share, on top of the attempt's fence. */
export class IncidentRun extends AttemptFence {
  readingDeps() {
    return {
      exec: this.deps.executor.exec.bind(this.deps.executor),
      now: this.deps.now,
      commandTimeoutMs: this.deps.timing.commandTimeoutMs,
    };
  }

  /** Machine ids whose read failed in the last `read()` that returned null, named in the stop message. */
  lastFailed: string[] = [];

  /** Reads both views; on failure logs the snapshots that were read, which machine failed and why, and returns null. */
  async read(t: Target, label: 'before' | 'after'): Promise<TargetReadings | null> {
    const r = await readTarget(t.container, t.host, t.routes, this.readingDeps());
    if (!r.ok) {
      // The tables that were read are posted: a later read failing does not unsee them.
      for (const x of r.read)
        await this.append({ type: 'snapshot', at: this.at(), label, snapshot: x.snapshot, commands: x.commands });
      for (const f of r.failures)
        await this.append({
          type: 'machine_error',
          at: this.at(),
          machineId: f.machineId,
          code: f.code,
          message: f.message,
          commands: f.commands,
        });
      this.lastFailed = r.failures.map((f) =>
        f.machineId === t.host.id ? `the host view of \`${f.machineId}\`` : `\`${f.machineId}\``,
      );
      return null;
    }
    await this.append({
      type: 'snapshot',
      at: this.at(),
      label,
      snapshot: r.value.container.snapshot,
      commands: r.value.container.commands,
    });
    await this.append({
      type: 'snapshot',
      at: this.at(),
      label,
      snapshot: r.value.host.snapshot,
      commands: r.value.host.commands,
    });
    return r.value;
  }

  async diagnose(
    t: Target,
    r: TargetReadings,
    label: 'before' | 'after',
    containerFailed: readonly ContainerFailure[] = [],
  ): Promise<Diagnosis> {
    const d = diagnoseReadings(t.container.id, t.host.id, r, { containerExecUid: t.execUid, containerFailed });
    await this.append({ type: 'diagnosis', at: this.at(), label, diagnosis: d });
    return d;
  }

  plan(t: Target, d: Diagnosis) {
    const { graceMs, releaseTimeoutMs, pollIntervalMs, commandTimeoutMs } = this.deps.timing;
    // A host kill too big for one approval card is planned as one card-sized step per batch.
    const fitsCard = (s: Step): boolean => approvalCardFits(s, t.host.id, t.container.vmid);
    return planUnstick(d, {
      incidentId: this.incidentId,
      vmid: t.container.vmid,
      graceMs,
      releaseTimeoutMs,
      pollIntervalMs,
      commandTimeoutMs,
      fitsCard,
    });
  }

  /**
   * Runs a step through the runner, fenced: every command first checks that this attempt still
   * holds its job's fence, and the step is claimed only while it does. A host-level step an earlier
   * attempt of this job claimed and left unfinished (it is gone: this attempt took the fence over)
   * is finished here instead of given up: minus the processes the log says it already signalled,
   * and, for a reset, only if it had not reached a destructive command. A step already finished
   * is not run again.
   */
  async runStep(
    t: Target,
    planned: Step,
    hostNow: { gpus: readonly Gpu[]; apps: readonly GpuProcess[] },
    authority: StepContext['authority'],
  ): Promise<StepResult> {
    const { steps, workerId } = this.deps;
    let step = planned;
    const st = await steps.stepState(this.incidentId, step.id);
    if (st.state === 'finished')
      return {
        outcome: st.outcome,
        containerFailed: [],
        sent: 0,
        released: null,
        message: 'finished by an earlier attempt',
        error: null,
      };
    if (st.state === 'claimed' && this.sameJob(st.by) && step.kind !== 'container_signal') {
      const events = await this.deps.log.events(this.incidentId);
      const mine = (e: AnyLoggedEvent): boolean => 'stepId' in e && e.stepId === step.id;
      const destructive = events.some(
        (e) =>
          mine(e) &&
          e.type === 'command' &&
          (e.role === 'reset' || e.role === 'persistence_off' || e.role === 'persistence_on'),
      );
      // Left inside its reset: not run again, but the sealed original persistence mode is restored.
      if (step.kind === 'host_reset' && destructive)
        await restorePersistence(step, this.stepContext(t, hostNow, authority), this.stepDeps());
      if (!(step.kind === 'host_reset' && destructive) && (await steps.dropClaim(this.incidentId, step.id, st.by))) {
        const sent = new Set(
          events
            .filter(
              (e): e is Ev<'signalled'> =>
                mine(e) && e.type === 'signalled' && e.result === 'sent' && e.signal === 'KILL',
            )
            .map((e) => e.hostPid),
        );
        const left = step.targets.filter((x) => !sent.has(x.hostPid));
        this.logger.warn(
          { stepId: step.id, by: st.by, alreadySent: [...sent] },
          'an earlier attempt of this job claimed this step and is gone: finishing it',
        );
        if (step.kind === 'host_kill' && left.length === 0) {
          const now = this.deps.now().getTime();
          if ((await steps.claimStepFenced(this.incidentId, step.id, workerId, now, this.job)) !== 'claimed')
            return this.superseded(step);
          await steps.finishStep(this.incidentId, step.id, workerId, 'done', now);
          const message = `The earlier attempt (its worker stopped) had already sent every signal of this step; nothing is sent again.`;
          await this.append({
            type: 'step_finished',
            at: this.at(),
            stepId: step.id,
            outcome: 'done',
            durationMs: 0,
            message,
          });
          return { outcome: 'done', containerFailed: [], sent: 0, released: null, message, error: null };
        }
        if (step.kind === 'host_kill')
          step = restrictStep(step, left, { timeoutMs: this.deps.timing.commandTimeoutMs });
      }
    }
    return runStep(step, this.stepContext(t, hostNow, authority), this.stepDeps());
  }

  private stepContext(
    t: Target,
    hostNow: { gpus: readonly Gpu[]; apps: readonly GpuProcess[] },
    authority: StepContext['authority'],
  ): StepContext {
    return {
      authority,
      incidentId: this.incidentId,
      containerRoute: t.routes.container,
      hostRoute: t.routes.host,
      vmid: t.container.vmid,
      hostGpus: hostNow.gpus,
      hostApps: hostNow.apps,
    };
  }

  /**
   * The worker-signed plan of a tier-1 step (the agent needs it): the same sealed body as a card's, with no
   * approval, so the host's agent can check every target it is asked to signal against it.
   */
  tier1Plan(t: Target, step: Step, requester: string, expiresAt: number): Envelope {
    const seal = sealStep(
      {
        incidentId: this.incidentId,
        approvalId: '',
        requester,
        createdAt: this.deps.now().getTime(),
        expiresAt,
        approvers: [],
        adminOnly: false,
        escalation: null,
        container: t.container.id,
        vmid: t.container.vmid,
        host: t.host.id,
        step,
      },
      this.deps.planKey,
      this.deps.keys.signing,
    );
    return { body: seal.body, sig: seal.sig };
  }

  /** The runner's deps, fenced: every command first checks that this attempt still holds its job's fence. */
  private stepDeps(): StepRunnerDeps {
    const { steps, workerId } = this.deps;
    return {
      exec: async (route, spec) => {
        if (!(await this.current()))
          throw new CodedError(
            ErrorCode.Internal,
            'a later attempt of this job took over; this attempt stopped before its next command',
          );
        return this.deps.executor.exec(route, spec);
      },
      append: (e) => this.append(e),
      steps: {
        claimStep: async (incidentId, stepId, by, now) =>
          (await steps.claimStepFenced(incidentId, stepId, by, now, this.job)) === 'claimed',
        finishStep: (incidentId, stepId, by, outcome, now) => steps.finishStep(incidentId, stepId, by, outcome, now),
      },
      now: this.deps.now,
      sleep: this.deps.sleep,
      workerId,
      commandTimeoutMs: this.deps.timing.commandTimeoutMs,
    };
  }

  /** The verdict, with what the log says happened to the steps: the advice names what is really left and who can do it. */
  verdictOf(
    before: Diagnosis,
    after: Diagnosis,
    meta: IncidentMeta | null,
    events: readonly AnyLoggedEvent[],
    known: readonly KnownDecision[] = [],
  ): Verdict {
    // Who can act: the approvers, and the escalation group (they decide a new card once it escalates).
    const deciders = [...new Set([...this.deps.approvers, ...(this.deps.escalation?.approvers ?? [])])];
    return verdictOf(before, after, verdictContextOf(events, deciders, meta?.requester ?? null, known));
  }

  /**
   * Asks a second person for a tier-2 step: approval with the frozen approvers list and the
   * step's hash, the card's event, and the expiry job. A step already asked for in this incident
   * (a re-run job, or a re-plan that came back the same) is not asked for again.
   */
  async requestApproval(
    t: Target,
    meta: IncidentMeta,
    planned: Step,
    events: readonly AnyLoggedEvent[],
  ): Promise<'requested' | 'already' | 'over_budget'> {
    if (events.some((e) => e.type === 'approval_requested' && e.stepId === planned.id)) return 'already';
    const now = this.deps.now().getTime();
    // Past the host's blast-radius budget, only an admin may approve, and the card says so.
    const { budget, admins } = this.deps;
    const used = await budget.used(t.host.id, now);
    const over = used >= budget.limit;
    const approvers = over ? admins.filter((a) => a !== meta.requester) : this.deps.approvers;
    if (over && approvers.length === 0) {
      await this.error(
        'budget_exhausted',
        `${t.host.id} already had ${used} host-level destructive step(s) in the last hour (limit ${budget.limit}) and no admin is configured (GPU_MEDIC_ADMINS) to lift it; nothing was asked for or run.`,
      );
      return 'over_budget';
    }
    const step: Step = {
      ...(over
        ? {
            ...planned,
            explanation: `${planned.explanation} Blast-radius budget: ${t.host.id} already had ${used} host-level destructive step(s) in the last hour (limit ${budget.limit}), so only an admin (GPU_MEDIC_ADMINS) can approve this one.`,
          }
        : planned),
      ...(planned.kind === 'host_reset' ? { persistence: await this.persistenceOf(t, planned) } : {}),
    };
    if (
      !(await this.claimOnce(
        `${APPROVAL_KEY}${step.id}`,
        (e) => e.type === 'approval_requested' && e.stepId === step.id,
      ))
    )
      return 'already';
    // The seal names the approval, so a sealed plan cannot be moved to another approval or incident.
    const id = ApprovalStore.newId();
    const expiresAt = now + this.deps.approvalTtlMs;
    // Past the budget only an admin decides: no escalation widens that.
    const escalation =
      over || !this.deps.escalation
        ? null
        : escalationOf({ approvers, escalation: this.deps.escalation }, meta.requester, now, expiresAt);
    // Signed with the worker's key: who asked, who may decide (and whether only an admin), until when.
    const seal = sealStep(
      {
        incidentId: this.incidentId,
        approvalId: id,
        requester: meta.requester,
        createdAt: now,
        expiresAt,
        approvers,
        adminOnly: over,
        escalation,
        container: t.container.id,
        vmid: t.container.vmid,
        host: t.host.id,
        step,
      },
      this.deps.planKey,
      this.deps.keys.signing,
    );
    const approval = await this.deps.approvals.create({
      id,
      seal,
      incidentId: this.incidentId,
      stepId: step.id,
      planHash: stepHash(step),
      requester: meta.requester,
      approvers,
      now,
      expiresAt,
      escalation,
    });
    await this.append({
      type: 'approval_requested',
      at: this.at(),
      approvalId: approval.id,
      stepId: step.id,
      expiresAt: new Date(approval.expiresAt).toISOString(),
      planHash: approval.planHash,
      step,
      host: t.host.id,
      vmid: t.container.vmid,
      seal: { body: seal.body, sig: seal.sig },
      approvers: [...approval.approvers],
      ...(approval.escalation
        ? {
            escalation: {
              approvers: [...approval.escalation.approvers],
              at: new Date(approval.escalation.at).toISOString(),
            },
          }
        : {}),
    });
    // Counted from the card's creation, as its expiry is.
    await this.scheduleTimers(t, approval, approval.createdAt);
    return 'requested';
  }

  /** Each reset GPU's persistence mode now (null: unreadable), sealed with the step as the original to restore. */
  private async persistenceOf(t: Target, step: Step): Promise<NonNullable<Step['persistence']>> {
    const out: NonNullable<Step['persistence']> = [];
    for (const c of step.commands.filter((x) => x.role === 'read_persistence' && x.gpuUuid !== undefined)) {
      const r = await this.deps.executor
        // From the template (its agent verb too), for the GPU the planned command names.
        .exec(t.routes.host, persistenceMode(c.gpuUuid ?? '', { timeoutMs: c.timeoutMs }))
        .catch(() => null);
      const on = r !== null && r.code === 0 && !r.timedOut ? parsePersistenceMode(r.stdout) : null;
      out.push({ uuid: c.gpuUuid ?? '', on });
    }
    return out;
  }

  /**
   * The card's delayed jobs, each under a fixed id, so scheduling them again (a re-run job, two
   * workers) is a no-op: the reminder at half its time to live, the escalation at its time (when
   * it has one), and the expiry. Each does nothing once the card is decided or expired.
   */
  async scheduleTimers(
    t: Target,
    a: Pick<Approval, 'id' | 'createdAt' | 'expiresAt' | 'escalation'>,
    now = this.deps.now().getTime(),
  ): Promise<void> {
    const timers: Array<{ kind: 'remind' | 'escalate' | 'expire'; at: number; failed: string }> = [
      {
        kind: 'remind',
        at: a.createdAt + Math.floor((a.expiresAt - a.createdAt) / 2),
        failed: 'the approvers are not reminded',
      },
      ...(a.escalation
        ? [
            {
              kind: 'escalate' as const,
              at: a.escalation.at,
              failed: 'the escalation group is not pinged (it may still decide from its time on)',
            },
          ]
        : []),
      // The store refuses a late click on its own; only the "expired" line in the thread would be missing.
      { kind: 'expire', at: a.expiresAt, failed: 'the thread will not say it expired' },
    ];
    for (const x of timers) {
      try {
        await this.deps.dispatcher.enqueue(
          t.container.site,
          { kind: x.kind, incidentId: this.incidentId, approvalId: a.id },
          `${x.kind}-${a.id}`,
          { delayMs: Math.max(1, x.at - now) },
        );
      } catch (e) {
        this.logger.warn(
          { err: e, approvalId: a.id, job: x.kind },
          `could not schedule the approval's ${x.kind} job: ${x.failed}`,
        );
      }
    }
  }

  /**
   * After a diagnosis: clean → finish; a tier-2 step left → ask for the first one (kill before
   * reset: a kill may free the memory a reset would otherwise be needed for); none → finish.
   */
  async next(t: Target, meta: IncidentMeta, before: Diagnosis, current: Diagnosis): Promise<void> {
    const events = await this.deps.log.events(this.incidentId);
    // A card still open (this job was re-run while it waited): its decision or expiry continues the incident.
    for (const req of events.filter((e): e is Ev<'approval_requested'> => e.type === 'approval_requested')) {
      const pending = await this.deps.approvals.get(req.approvalId);
      if (pending?.state === 'pending') {
        this.logger.info({ approvalId: req.approvalId }, 'an approval is still pending: waiting for it');
        // The attempt that posted the card may have died before scheduling its reminder, escalation or expiry.
        await this.scheduleTimers(t, pending);
        return;
      }
    }
    const stuck = current.gpus.some(isStuck);
    const tier2 = stuck ? this.plan(t, current).steps.filter((s) => s.tier === 2) : [];
    const fresh = tier2.filter((s) => !events.some((e) => e.type === 'approval_requested' && e.stepId === s.id));
    const step = fresh[0];
    if (step === undefined) return this.finish(meta, this.verdictOf(before, current, meta, events));
    if (this.deps.approvers.length === 0) {
      await this.error('not_approver', 'no approvers configured: host-level steps cannot run; set GPU_MEDIC_APPROVERS');
      return this.finish(meta, this.verdictOf(before, current, meta, events));
    }
    if ((await this.requestApproval(t, meta, step, events)) === 'over_budget')
      return this.finish(meta, this.verdictOf(before, current, meta, events));
  }
}

export function firstBefore(events: readonly AnyLoggedEvent[]): Diagnosis | null {
  return events.find((e): e is Ev<'diagnosis'> => e.type === 'diagnosis' && e.label === 'before')?.diagnosis ?? null;
}

export function latestDiagnosis(events: readonly AnyLoggedEvent[]): Diagnosis | null {
  return [...events].reverse().find((e): e is Ev<'diagnosis'> => e.type === 'diagnosis')?.diagnosis ?? null;
}

/** Targets of a host-level step: the container could not stop them, so only the host can. */
export function hostOnlyOf(targets: readonly StepTarget[]): ContainerFailure[] {
  return targets.map((x) => ({ process: x, reason: x.hostOnlyWhy ?? 'the container could not stop it' }));
}

export function withNote(v: Verdict, note: Rich): Verdict {
  const rest = v.advice ?? (v.nextStep ? [v.nextStep] : null);
  return { ...v, ...adviceOf(rest ? joinRich([note, rest], ' ') : note) };
}
