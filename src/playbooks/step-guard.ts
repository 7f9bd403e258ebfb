import type { Redis } from 'ioredis';
import { z } from 'zod';

/**
 * At-most-once for destructive steps. A step is claimed (SET NX) before its first command runs;
 * if the worker dies and BullMQ re-runs the job, the claim is still there, so the step is
 * reported as interrupted instead of signalling anything a second time.
 */

export type StepOutcome = 'done' | 'partial' | 'failed' | 'skipped';

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

  /** True exactly once per (incident, step), whoever asks and however often. `by` names the job attempt. */
  async claimStep(incidentId: string, stepId: string, by: string, now: number): Promise<boolean> {
    const res = await this.redis.set(this.key(incidentId, stepId), JSON.stringify({ claimedAt: now, by }), 'PX', this.retentionMs, 'NX');
    return res === 'OK';
  }

  /** Records how the claimed step ended; false if the claim is not `by`'s (or is gone). */
  async finishStep(incidentId: string, stepId: string, by: string, outcome: StepOutcome, now: number): Promise<boolean> {
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
      return { state: 'finished', claimedAt: c.data.claimedAt, by: c.data.by, finishedAt: c.data.finishedAt, outcome: c.data.outcome };
    return { state: 'claimed', claimedAt: c.data.claimedAt, by: c.data.by };
  }
}
