import type { AnyEvent, AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import type { Logger } from '../../src/logger.ts';
import type { ErrorCode } from '../../src/errors.ts';
import { isGreen, type Verdict } from '../../src/gpu/verdict.ts';
import { longestAttemptMs, type Step } from '../../src/plan/unstick-plan.ts';
import type { StepResult } from '../../src/unstick-runner/unstick-runner.ts';
import type { UnstickWorkerDeps } from './deps.ts';

/** Step-guard keys used as once-only latches beside the steps themselves. */
const FINISH_KEY = 'incident-finished';
export const APPROVAL_KEY = 'approval-requested-';
export type Ev<T extends AnyEvent['type']> = Extract<AnyLoggedEvent, { type: T }>;

/**
 * The fence of one job attempt on one incident: its writes to the log, its once-only latches and the
 * incident's finish, each only while this attempt holds its job's fence (no later attempt took over).
 */
export class AttemptFence {
  protected readonly logger: Logger;

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

  /** The name attempts of this job share in the fence: the BullMQ job id (a direct call: this attempt alone). */
  get job(): string {
    return this.deps.jobId ?? this.deps.workerId;
  }

  /** True while this attempt holds its job's fence (no later attempt took over). */
  async current(): Promise<boolean> {
    return this.deps.steps.holdsFence(this.incidentId, this.job, this.deps.workerId);
  }

  protected sameJob(by: string): boolean {
    return this.deps.jobId !== undefined && by !== this.deps.workerId && by.includes(`:${this.deps.jobId}:`);
  }

  protected superseded(step: Step): StepResult {
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
  protected async claimOnce(key: string, written: (e: AnyLoggedEvent) => boolean): Promise<boolean> {
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
export async function asAttempt(run: AttemptFence, body: () => Promise<void>): Promise<void> {
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

export async function loadMeta(run: AttemptFence): Promise<IncidentMeta | null> {
  return run.deps.log.meta(run.incidentId);
}
