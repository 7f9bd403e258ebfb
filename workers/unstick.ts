import { ApprovalStore, type Approval } from '../src/approval/approval-store.ts';
import type { BlastBudget } from '../src/approval/blast-budget.ts';
import type { Inventory } from '../src/config/inventory.ts';
import { findMachine, hostRouteFor, routeFor, type Machine } from '../src/config/machines.ts';
import { isStuck, type ContainerFailure, type Diagnosis } from '../src/gpu/diagnose.ts';
import type { Gpu, GpuProcess } from '../src/gpu/types.ts';
import { adviceOf, isGreen, verdictOf, type Verdict } from '../src/gpu/verdict.ts';
import { verdictContextOf, type KnownDecision } from '../src/incident/verdict-context.ts';
import { joinRich, say, user, type Rich } from '../src/render/rich.ts';
import type { AnyEvent, AnyLoggedEvent } from '../src/incident/all-events.ts';
import type { IncidentMeta } from '../src/incident/events.ts';
import type { IncidentLog } from '../src/incident/log.ts';
import type { TargetLock } from '../src/incident/target-lock.ts';
import type { Logger } from '../src/logger.ts';
import type { StepGuard } from '../src/playbooks/step-guard.ts';
import { openSeal, planDigest, type SealedStep, sealStep } from '../src/playbooks/plan-seal.ts';
import type { WorkerKeys } from '../src/auth/keys.ts';
import type { NonceLedger } from '../src/auth/nonce-ledger.ts';
import { checkDecision, checkRequest } from '../src/auth/signed-jobs.ts';
import { checkDecider } from '../src/approval/decider-check.ts';
import { parsePersistenceMode } from '../src/playbooks/unstick-commands.ts';
import {
  longestAttemptMs,
  planUnstick,
  restrictStep,
  stepCommands,
  stepHash,
  type Step,
  type StepTarget,
} from '../src/playbooks/unstick-plan.ts';
import { approvalCardFits } from '../src/render/unstick.ts';
import { EXPIRED_NOTE } from '../src/render/approval-nudges.ts';
import { diagnoseReadings, readTarget, type TargetReadings } from '../src/playbooks/unstick-readings.ts';
import {
  restorePersistence,
  runStep,
  type StepContext,
  type StepResult,
  type StepRunnerDeps,
} from '../src/playbooks/unstick-runner.ts';
import type { Dispatcher } from '../src/queue/dispatcher.ts';
import type { DecisionJob, EscalateJob, ExpireJob, RemindJob, UnstickJob } from '../src/queue/jobs.ts';
import { escalationOf } from '../src/approval/approval-policy.ts';
import type { Executor, Route } from '../src/ssh/types.ts';
import { CodedError, ErrorCode } from '../src/errors.ts';

export interface UnstickWorkerDeps {
  inventory: Inventory;
  executor: Executor;
  log: IncidentLog;
  approvals: ApprovalStore;
  steps: StepGuard;
  lock: TargetLock;
  /** Schedules the expiry job: enqueue(site, { kind: 'expire', incidentId, approvalId }, jobId, { delayMs }). */
  dispatcher: Dispatcher;
  /**
   * Slack user IDs who may decide host-level steps: frozen into each approval when it is created,
   * and checked again (live) before an approved step runs.
   */
  approvers: string[];
  /**
   * Key of the plan seal (src/playbooks/plan-seal.ts), held by workers only: an approved step runs
   * only from a plan sealed with it, its commands rebuilt from the templates.
   */
  planKey: Buffer;
  /**
   * Issue 19: the worker's Ed25519 key (it signs the plans it asks approval for) and the public keys
   * it verifies with: the bot's (requests and decisions), and its own and previous ones (plans).
   */
  keys: WorkerKeys;
  /** Single use of every signed request and decision (Redis and this process's memory). */
  nonces: NonceLedger;
  /** Slack user IDs who alone may approve a host-level step past the blast-radius budget. */
  admins: string[];
  budget: BlastBudget;
  approvalTtlMs: number;
  /**
   * GPU_MEDIC_ESCALATION_APPROVERS and GPU_MEDIC_ESCALATE_AFTER_SEC: frozen into each approval
   * (never when only an admin may approve it), pinged at that time, and checked again (live) before
   * a step they approved runs. Absent or empty: cards do not escalate.
   */
  escalation?: { approvers: string[]; afterMs: number };
  timing: { graceMs: number; releaseTimeoutMs: number; pollIntervalMs: number; commandTimeoutMs: number };
  now(): Date;
  sleep(ms: number): Promise<void>;
  logger: Logger;
  /** Names this worker (and job attempt) in step claims. */
  workerId: string;
  /**
   * The BullMQ job id (the same for every attempt of a job; `workerId` contains it). Lets a re-run
   * finish a once-only write that an earlier attempt of the same job claimed and died before doing.
   */
  jobId?: string;
  /** How long an attempt's heartbeat lasts unrefreshed (a successor waits this long for a dead one). Default 5 s. */
  aliveMs?: number;
}

type Container = Extract<Machine, { kind: 'container' }>;

/** Step-guard keys used as once-only latches beside the steps themselves. */
const FINISH_KEY = 'incident-finished';
const APPROVAL_KEY = 'approval-requested-';
type Ev<T extends AnyEvent['type']> = Extract<AnyLoggedEvent, { type: T }>;

interface Target {
  container: Container;
  host: Machine;
  routes: { container: Route; host: Route };
  /** 0 when container commands run as root (`pct exec`, root login); null when unknown. */
  execUid: number | null;
}

function resolveTarget(deps: UnstickWorkerDeps, machineId: string): Target | string {
  const m = findMachine(deps.inventory, machineId);
  if (!m) return `this worker's inventory has no machine "${machineId}"`;
  if (m.kind !== 'container')
    return `\`${machineId}\` is a host; unstick works on a container (its GPU holders and its host's view of them)`;
  const host = findMachine(deps.inventory, m.hostId);
  const container = routeFor(deps.inventory, m.id);
  const hostRoute = hostRouteFor(deps.inventory, m.hostId);
  if (!host || !container || !hostRoute)
    return `container \`${machineId}\` names host \`${m.hostId}\`, which this worker's inventory does not have`;
  const entry = deps.inventory.containers.find((c) => c.id === m.id);
  const user = container.kind === 'pct' ? 'root' : (entry?.user ?? deps.inventory.defaults.user);
  return { container: m, host, routes: { container, host: hostRoute }, execUid: user === 'root' ? 0 : null };
}

/** One incident's run: the helpers every job kind shares. */
class IncidentRun {
  private readonly logger: Logger;

  constructor(
    readonly incidentId: string,
    readonly deps: UnstickWorkerDeps,
  ) {
    this.logger = deps.logger.child({ incident: incidentId });
  }

  at(): string {
    return this.deps.now().toISOString();
  }

  /** Appends to the incident's log while this attempt holds its job's fence; a superseded attempt's events go to the process log only. */
  async append(e: AnyEvent): Promise<void> {
    if (!(await this.current())) {
      this.logger.warn(
        { event: e.type },
        'a later attempt of this job holds the fence: this attempt writes nothing more to the incident',
      );
      return;
    }
    await this.deps.log.append(this.incidentId, e);
  }

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

  /** The name attempts of this job share in the fence: the BullMQ job id (a direct call: this attempt alone). */
  get job(): string {
    return this.deps.jobId ?? this.deps.workerId;
  }

  /** True while this attempt holds its job's fence (no later attempt took over). */
  async current(): Promise<boolean> {
    return this.deps.steps.holdsFence(this.incidentId, this.job, this.deps.workerId);
  }

  private sameJob(by: string): boolean {
    return this.deps.jobId !== undefined && by !== this.deps.workerId && by.includes(`:${this.deps.jobId}:`);
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
        await restorePersistence(step, this.stepContext(t, hostNow), this.stepDeps());
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
    return runStep(step, this.stepContext(t, hostNow), this.stepDeps());
  }

  private stepContext(t: Target, hostNow: { gpus: readonly Gpu[]; apps: readonly GpuProcess[] }): StepContext {
    return {
      incidentId: this.incidentId,
      containerRoute: t.routes.container,
      hostRoute: t.routes.host,
      vmid: t.container.vmid,
      hostGpus: hostNow.gpus,
      hostApps: hostNow.apps,
    };
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

  private superseded(step: Step): StepResult {
    this.logger.warn(
      { stepId: step.id },
      'a later attempt of this job holds the fence: this attempt runs nothing more',
    );
    return {
      outcome: 'interrupted',
      containerFailed: [],
      sent: 0,
      released: null,
      message: 'superseded by a later attempt',
      error: null,
    };
  }

  /** Verdict, `finished`, lock released: the incident's last three things. */
  async finish(
    meta: IncidentMeta | null,
    verdict: Verdict | null,
    outcome?: 'ok' | 'partial' | 'failed',
  ): Promise<void> {
    // Once per incident, whichever job gets here first (a re-run job must not close it twice).
    if (!(await this.claimOnce(FINISH_KEY, (e) => e.type === 'finished'))) {
      this.logger.info('incident already finished by another attempt: nothing appended');
      return;
    }
    if (verdict) await this.append({ type: 'verdict', at: this.at(), verdict });
    const o =
      outcome ??
      (verdict === null
        ? 'failed'
        : isGreen(verdict)
          ? 'ok'
          : verdict.kind === 'partially_recovered'
            ? 'partial'
            : 'failed');
    const created = meta ? Date.parse(meta.createdAt) : NaN;
    const durationMs = Number.isFinite(created) ? Math.max(0, this.deps.now().getTime() - created) : 0;
    await this.append({ type: 'finished', at: this.at(), outcome: o, durationMs });
    for (const id of meta?.targets ?? []) await this.deps.lock.release(id, this.incidentId);
    this.logger.info({ outcome: o, verdict: verdict?.kind ?? null }, 'unstick finished');
  }

  /**
   * Claims a once-only latch. Taken over only when the claim belongs to an earlier attempt of this
   * same job (BullMQ re-runs a job once its worker's lock lapsed: that attempt is gone) and the
   * log shows the guarded write never happened: a worker killed between claim and write must not
   * leave the incident open for good (no verdict, target locked, thread "planning…").
   */
  private async claimOnce(key: string, written: (e: AnyLoggedEvent) => boolean): Promise<boolean> {
    const { steps, workerId, jobId } = this.deps;
    const c = await steps.claimStepFenced(this.incidentId, key, workerId, this.deps.now().getTime(), this.job);
    if (c === 'claimed') return true;
    if (c === 'superseded') {
      this.logger.warn({ key }, 'a later attempt of this job holds the fence: this attempt does not write this');
      return false;
    }
    if (!jobId) return false;
    const st = await steps.stepState(this.incidentId, key);
    if (st.state !== 'claimed' || st.by === workerId || !st.by.includes(`:${jobId}:`)) return false;
    if ((await this.deps.log.events(this.incidentId)).some(written)) return false;
    this.logger.warn(
      { key, by: st.by },
      'an earlier attempt of this job claimed this and died before writing it: doing it now',
    );
    return true;
  }

  async error(code: ErrorCode, message: string): Promise<void> {
    await this.append({ type: 'error', at: this.at(), code, message });
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
        .exec(t.routes.host, { argv: c.argv, timeoutMs: c.timeoutMs })
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

const DEFAULT_ALIVE_MS = 5000;

/**
 * Every job attempt runs inside this: a heartbeat while it runs, and the fence of its job. An
 * earlier attempt of the same job that is still alive (BullMQ re-ran the job because its lock
 * lapsed, not because it died) keeps the fence: this attempt waits until it ended or its
 * heartbeat lapsed, then takes the fence, and only then reads the log and acts. The fence is
 * checked before every command, every claim and the finish, so an attempt that lost it (a
 * stalled one waking up) runs nothing more and never finishes the incident.
 */
async function asAttempt(run: IncidentRun, body: () => Promise<void>): Promise<void> {
  const { steps, workerId } = run.deps;
  const aliveMs = run.deps.aliveMs ?? DEFAULT_ALIVE_MS;
  await steps.beat(workerId, aliveMs);
  const timer = setInterval(
    () => void steps.beat(workerId, aliveMs).catch(() => undefined),
    Math.max(50, Math.floor(aliveMs / 5)),
  );
  try {
    const since = run.deps.now().getTime();
    // A live earlier attempt is waited for at least as long as the longest attempt these settings allow.
    const maxWaitMs = longestAttemptMs({
      ...run.deps.timing,
      connectTimeoutMs: run.deps.inventory.defaults.connectTimeoutSec * 1000,
    });
    for (;;) {
      const holder = await steps.fenceHolder(run.incidentId, run.job);
      const gone =
        holder === null ||
        holder === workerId ||
        !(await steps.isAlive(holder)) ||
        run.deps.now().getTime() - since > maxWaitMs;
      if (gone && (await steps.takeFence(run.incidentId, run.job, workerId, holder))) {
        if (holder !== null && holder !== workerId)
          run.deps.logger.warn(
            { incident: run.incidentId, from: holder },
            'took over from an earlier attempt of this job',
          );
        break;
      }
      await run.deps.sleep(Math.min(run.deps.timing.pollIntervalMs, aliveMs / 2));
    }
    await body();
  } finally {
    clearInterval(timer);
    await steps.gone(workerId).catch(() => undefined);
  }
}

async function loadMeta(run: IncidentRun): Promise<IncidentMeta | null> {
  return run.deps.log.meta(run.incidentId);
}

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
  // Issue 19: tier 1 acts on the request alone, so it must be the bot's: signed, for this incident
  // and target, not past its expiry, and used once. What Redis says of the requester is checked against it.
  const now = deps.now().getTime();
  const req = checkRequest(
    await deps.log.request(job.incidentId),
    deps.keys.botPublic,
    { incidentId: job.incidentId, target: job.machineId },
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
    return await unstickVerified(run, job, deps, meta, t);
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

  const res = await run.runStep(t, tier1, { gpus: r0.host.snapshot.gpus, apps: r0.host.snapshot.processes });
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
  const failed = [...res.containerFailed];
  if (res.outcome !== 'interrupted' && res.error === null)
    for (const g of after.gpus)
      for (const h of g.holders)
        if (
          h.reach === 'container' &&
          tier1.targets.some((x) => x.hostPid === h.process.hostPid && x.startTimeTicks === h.process.startTimeTicks)
        )
          if (!failed.some((f) => f.process.hostPid === h.process.hostPid))
            failed.push({
              process: h.process,
              reason: 'it was still running after SIGTERM and SIGKILL from inside the container',
            });
  const current = await run.diagnose(t, r1, 'after', failed);
  return run.next(t, meta, first, current);
}

function firstBefore(events: readonly AnyLoggedEvent[]): Diagnosis | null {
  return events.find((e): e is Ev<'diagnosis'> => e.type === 'diagnosis' && e.label === 'before')?.diagnosis ?? null;
}

function latestDiagnosis(events: readonly AnyLoggedEvent[]): Diagnosis | null {
  return [...events].reverse().find((e): e is Ev<'diagnosis'> => e.type === 'diagnosis')?.diagnosis ?? null;
}

/** Targets of a host-level step: the container could not stop them, so only the host can. */
function hostOnlyOf(targets: readonly StepTarget[]): ContainerFailure[] {
  return targets.map((x) => ({ process: x, reason: x.hostOnlyWhy ?? 'the container could not stop it' }));
}

function withNote(v: Verdict, note: Rich): Verdict {
  const rest = v.advice ?? (v.nextStep ? [v.nextStep] : null);
  return { ...v, ...adviceOf(rest ? joinRich([note, rest], ' ') : note) };
}

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
  // Issue 19: who decided, what and when is the bot's signed decision naming this plan's digest;
  // the approval's state and decidedBy in Redis are not believed.
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
  const res = await run.runStep(t, step, { gpus: hostSnap?.gpus ?? [], apps: hostSnap?.processes ?? [] });
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
