import type { StepOutcome } from '../plan/unstick-plan.ts';
import type { Redis } from 'ioredis';
import { z } from 'zod';

/**
 * At-most-once for destructive steps. A step is claimed (SET NX) before its first command runs;
 * if the worker dies and BullMQ re-runs the job, the claim is still there, so the step is
 * reported as interrupted instead of signalling anything a second time.
 */

export type StepState =
  | { state: 'unclaimed' }
  /** Claimed and never finished: if the claimant is no longer running it, the step was interrupted. */
  | { state: 'claimed'; claimedAt: number; by: string }
  | { state: 'finished'; claimedAt: number; by: string; finishedAt: number; outcome: StepOutcome };

export interface StepGuardOptions {
  /** How long claims are kept: longer than any job retry or stalled-job recovery. Default 7 days. */
  retentionMs?: number;
}

const Claim = z.object({
  claimedAt: z.number(),
  by: z.string(),
  finishedAt: z.number().optional(),
  outcome: z.enum(['done', 'partial', 'failed', 'skipped']).optional(),
});

/** Only the claimant's own claim may be marked finished; keeps the key's remaining TTL. ARGV: by, json. */
const FINISH = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, claim = pcall(cjson.decode, raw)
if not ok or type(claim) ~= 'table' or claim['by'] ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
`;

/**
 * A claim taken only while `ARGV[1]` holds the attempt fence of its job (KEYS[2]).
 * Returns 1 claimed, 0 already claimed, -1 superseded (another attempt holds the fence).
 */
const FENCED_CLAIM = `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
if redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3], 'NX') then return 1 end
return 0
`;

/** The fence passes to ARGV[1] when free or still held by ARGV[2] (an attempt seen gone). */
const TAKE_FENCE = `
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] or cur == ARGV[2] then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3]) return 1 end
return 0
`;

/** Drops an unfinished claim of ARGV[1] (an attempt that is gone), so its successor can claim the step. */
const DROP_CLAIM = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, c = pcall(cjson.decode, raw)
if not ok or type(c) ~= 'table' or c['by'] ~= ARGV[1] or c['finishedAt'] ~= nil then return 0 end
redis.call('DEL', KEYS[1])
return 1
`;

export class StepGuard {
  private readonly retentionMs: number;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    opts: StepGuardOptions = {},
  ) {
    this.retentionMs = opts.retentionMs ?? 7 * 24 * 3600 * 1000;
  }

  private key(incidentId: string, stepId: string): string {
    return `${this.prefix}:step:${incidentId}:${stepId}`;
  }

  private fenceKey(incidentId: string, job: string): string {
    return `${this.prefix}:attempt:${incidentId}:${job}`;
  }

  private aliveKey(attempt: string): string {
    return `${this.prefix}:alive:${attempt}`;
  }

  /** The attempt of `job` allowed to act on the incident (finish it, claim, run commands), or null. */
  async fenceHolder(incidentId: string, job: string): Promise<string | null> {
    return this.redis.get(this.fenceKey(incidentId, job));
  }

  /** Takes the fence when it is free, ours, or held by `gone` (an earlier attempt seen not alive). */
  async takeFence(incidentId: string, job: string, attempt: string, gone: string | null): Promise<boolean> {
    return (
      (await this.redis.eval(
        TAKE_FENCE,
        1,
        this.fenceKey(incidentId, job),
        attempt,
        gone ?? '',
        String(this.retentionMs),
      )) === 1
    );
  }

  async holdsFence(incidentId: string, job: string, attempt: string): Promise<boolean> {
    return (await this.fenceHolder(incidentId, job)) === attempt;
  }

  /** An attempt says it is alive for `ttlMs` more (refreshed while it runs; lapses when it dies or stalls). */
  async beat(attempt: string, ttlMs: number): Promise<void> {
    await this.redis.set(this.aliveKey(attempt), '1', 'PX', ttlMs);
  }

  async isAlive(attempt: string): Promise<boolean> {
    return (await this.redis.exists(this.aliveKey(attempt))) === 1;
  }

  /** The attempt ended (its job returned or threw): a successor need not wait for its heartbeat to lapse. */
  async gone(attempt: string): Promise<void> {
    await this.redis.del(this.aliveKey(attempt));
  }

  /** `claimStep`, only while `by` holds its job's fence: a superseded attempt claims nothing. */
  async claimStepFenced(
    incidentId: string,
    stepId: string,
    by: string,
    now: number,
    job: string,
  ): Promise<'claimed' | 'taken' | 'superseded'> {
    const r = await this.redis.eval(
      FENCED_CLAIM,
      2,
      this.key(incidentId, stepId),
      this.fenceKey(incidentId, job),
      by,
      JSON.stringify({ claimedAt: now, by }),
      String(this.retentionMs),
    );
    return r === 1 ? 'claimed' : r === -1 ? 'superseded' : 'taken';
  }

  /** Drops `by`'s unfinished claim (an attempt that is gone) so the step can be claimed again; false if it is not that. */
  async dropClaim(incidentId: string, stepId: string, by: string): Promise<boolean> {
    return (await this.redis.eval(DROP_CLAIM, 1, this.key(incidentId, stepId), by)) === 1;
  }

  /** True exactly once per (incident, step), whoever asks and however often. `by` names the job attempt. */
  async claimStep(incidentId: string, stepId: string, by: string, now: number): Promise<boolean> {
    const res = await this.redis.set(
      this.key(incidentId, stepId),
      JSON.stringify({ claimedAt: now, by }),
      'PX',
      this.retentionMs,
      'NX',
    );
    return res === 'OK';
  }

  /** Records how the claimed step ended; false if the claim is not `by`'s (or is gone). */
  async finishStep(
    incidentId: string,
    stepId: string,
    by: string,
    outcome: StepOutcome,
    now: number,
  ): Promise<boolean> {
    const current = await this.stepState(incidentId, stepId);
    if (current.state === 'unclaimed') return false;
    const json = JSON.stringify({ claimedAt: current.claimedAt, by, finishedAt: now, outcome });
    return (await this.redis.eval(FINISH, 1, this.key(incidentId, stepId), by, json)) === 1;
  }

  async stepState(incidentId: string, stepId: string): Promise<StepState> {
    const raw = await this.redis.get(this.key(incidentId, stepId));
    if (raw === null) return { state: 'unclaimed' };
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      parsed = null;
    }
    const c = Claim.safeParse(parsed);
    // An unreadable claim still means "someone started this": never treat it as free.
    if (!c.success) return { state: 'claimed', claimedAt: 0, by: 'unknown' };
    if (c.data.finishedAt !== undefined && c.data.outcome !== undefined)
      return {
        state: 'finished',
        claimedAt: c.data.claimedAt,
        by: c.data.by,
        finishedAt: c.data.finishedAt,
        outcome: c.data.outcome,
      };
    return { state: 'claimed', claimedAt: c.data.claimedAt, by: c.data.by };
  }
}
