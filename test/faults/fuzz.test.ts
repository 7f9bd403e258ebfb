import { describe, expect, it } from 'vitest';
import { fuzz, fuzzCases } from './scenarios/fuzz.ts';
import { alertmanagerCases, fuzzAlertmanager } from './scenarios/fuzz-alertmanager.ts';

const SEED = Number(process.env.GPU_MEDIC_FUZZ_SEED ?? 20261130);

describe(`fuzzed /gpu text (seed ${SEED}; set GPU_MEDIC_FUZZ_SEED to replay another)`, () => {
  it('the generator is seeded: same seed, same cases; and it covers the hostile shapes', () => {
    const a = fuzzCases(SEED, 2000);
    expect(fuzzCases(SEED, 2000)).toEqual(a);
    expect(a.some((t) => t.length >= 3990)).toBe(true);
    expect(a.some((t) => t.includes('$(') || t.includes('`'))).toBe(true);
    expect(a.some((t) => t.includes('\n'))).toBe(true);
    expect(a.some((t) => /[^\x00-\x7f]/.test(t))).toBe(true);
    expect(a.some((t) => /^status kpro5./.test(t))).toBe(true);
  });

  it('10,000 cases through handleSlash and 300 through the signed receiver: every one answered, ephemeral; only template commands reached the fleet', async () => {
    const f = await fuzz({ seed: SEED, cases: 10_000, viaBolt: 300 });
    expect(f.failures).toEqual([]);
    expect(f.badInputsTried).toBe(10_300);
    expect(f.badInputsReachedShell).toBe(0);
  }, 180_000);
});

describe(`fuzzed Alertmanager notifications (seed ${SEED})`, () => {
  it('the generator is seeded and covers bad tokens, unknown versions, non-JSON, oversized and hostile labels', () => {
    const a = alertmanagerCases(SEED, 300);
    expect(alertmanagerCases(SEED, 300)).toEqual(a);
    expect(a.some((c) => c.token === null)).toBe(true);
    expect(a.some((c) => c.body.length > 1_000_000)).toBe(true);
    expect(a.some((c) => c.body.includes('"version":"3"'))).toBe(true);
    expect(a.some((c) => c.body.includes('$(reboot)') && c.body.includes('"version":"4"'))).toBe(true);
  });

  it('150 notifications to the receiver: each answered as documented, nothing reached a machine, no live mention in Slack', async () => {
    const f = await fuzzAlertmanager({ seed: SEED, cases: 150 });
    expect(f.failures).toEqual([]);
    expect(f.statuses[200] ?? 0).toBeGreaterThan(0);
    expect(f.statuses[401] ?? 0).toBeGreaterThan(0);
    expect(f.statuses[400] ?? 0).toBeGreaterThan(0);
  }, 180_000);
});
