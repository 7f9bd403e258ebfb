import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { StepGuard } from '../../src/step-guard/step-guard.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';

const INC = 'inc_20261130_092000_k3x9q2';
const STEP = 'host_kill-3f9a0c1b2d4e';
const T0 = Date.parse('2026-11-30T09:21:00Z');

describe('StepGuard on real Redis', () => {
  let redis: Redis;
  let prefix: string;
  let guard: StepGuard;
  beforeAll(() => {
    redis = newRedis();
  });
  afterAll(async () => {
    await redis.quit();
  });
  beforeEach(() => {
    prefix = randomPrefix();
    guard = new StepGuard(redis, prefix);
  });
  afterEach(async () => {
    await removePrefix(redis, prefix);
  });

  it('claims a step once; the claim is kept for days', async () => {
    expect(await guard.stepState(INC, STEP)).toEqual({ state: 'unclaimed' });
    expect(await guard.claimStep(INC, STEP, 'job-17:1', T0)).toBe(true);
    expect(await guard.claimStep(INC, STEP, 'job-17:1', T0 + 1)).toBe(false);
    expect(await guard.claimStep(INC, STEP, 'job-17:2', T0 + 2)).toBe(false);
    expect(await guard.stepState(INC, STEP)).toEqual({ state: 'claimed', claimedAt: T0, by: 'job-17:1' });
    expect(await redis.pttl(`${prefix}:step:${INC}:${STEP}`)).toBeGreaterThan(6 * 24 * 3600 * 1000);
    // Other steps and incidents are independent.
    expect(await guard.claimStep(INC, 'host_reset-000000000000', 'job-17:1', T0)).toBe(true);
    expect(await guard.claimStep('inc_other', STEP, 'job-18:1', T0)).toBe(true);
  });

  it('a worker that died mid-step: the re-run cannot claim it and sees it claimed, unfinished (interrupted)', async () => {
    expect(await guard.claimStep(INC, STEP, 'job-17:1', T0)).toBe(true);
    // The first attempt "dies" here; BullMQ re-runs the job as attempt 2.
    expect(await guard.claimStep(INC, STEP, 'job-17:2', T0 + 30_000)).toBe(false);
    const s = await guard.stepState(INC, STEP);
    expect(s.state).toBe('claimed');
    expect(s.state === 'claimed' && s.by).toBe('job-17:1');
  });

  it('only the claimant finishes the step; the TTL is kept', async () => {
    await guard.claimStep(INC, STEP, 'job-17:1', T0);
    expect(await guard.finishStep(INC, STEP, 'job-17:2', 'done', T0 + 5)).toBe(false);
    expect(await guard.finishStep(INC, STEP, 'job-17:1', 'partial', T0 + 9_000)).toBe(true);
    expect(await guard.stepState(INC, STEP)).toEqual({
      state: 'finished',
      claimedAt: T0,
      by: 'job-17:1',
      finishedAt: T0 + 9_000,
      outcome: 'partial',
    });
    expect(await redis.pttl(`${prefix}:step:${INC}:${STEP}`)).toBeGreaterThan(6 * 24 * 3600 * 1000);
    expect(await guard.claimStep(INC, STEP, 'job-17:3', T0 + 10_000)).toBe(false);
    expect(await guard.finishStep('inc_none', STEP, 'job-17:1', 'done', T0)).toBe(false);
  });

  it('20 parallel claims on 20 connections: exactly one true', async () => {
    const clients = Array.from({ length: 20 }, () => newRedis());
    try {
      const results = await Promise.all(
        clients.map((c, i) => new StepGuard(c, prefix).claimStep(INC, STEP, `job-17:${i}`, T0)),
      );
      expect(results.filter(Boolean)).toHaveLength(1);
    } finally {
      await Promise.all(clients.map((c) => c.quit()));
    }
  });

  it('an unreadable claim still counts as started, never as free', async () => {
    await redis.set(`${prefix}:step:${INC}:${STEP}`, 'garbage');
    expect(await guard.stepState(INC, STEP)).toEqual({ state: 'claimed', claimedAt: 0, by: 'unknown' });
    expect(await guard.claimStep(INC, STEP, 'job-17:1', T0)).toBe(false);
    expect(await guard.finishStep(INC, STEP, 'unknown', 'done', T0)).toBe(false);
  });
});
