import { describe, expect, it } from 'vitest';
import { REPLAY_MARGIN_MS, replayTtlMs, requestTimeProblem } from '../../src/slack/request-time.ts';

const NOW_MS = 1_764_550_000_000;
const NOW_SEC = NOW_MS / 1000;

describe("Slack's request window on the absolute difference (|now − ts| ≤ 300 s)", () => {
  it('accepts 300 s either way and refuses 301 s either way', () => {
    expect(requestTimeProblem(String(NOW_SEC + 300), NOW_MS)).toBeNull();
    expect(requestTimeProblem(String(NOW_SEC - 300), NOW_MS)).toBeNull();
    expect(requestTimeProblem(String(NOW_SEC + 301), NOW_MS)).toMatch(/301 s in the future/);
    expect(requestTimeProblem(String(NOW_SEC - 301), NOW_MS)).toMatch(/301 s in the past/);
  });

  it('refuses a header that is missing, repeated, empty, fractional or not decimal digits', () => {
    for (const h of [undefined, [String(NOW_SEC)], '', `${NOW_SEC}.5`, '-1', '0x69', ` ${NOW_SEC}`, '1e9']) {
      expect(requestTimeProblem(h, NOW_MS)).toMatch(/no usable/);
    }
  });

  it('keeps the replay record until ts + 300 s by the bot clock, plus the margin', () => {
    expect(replayTtlMs(NOW_SEC + 300, NOW_MS)).toBe(600_000 + REPLAY_MARGIN_MS);
    expect(replayTtlMs(NOW_SEC, NOW_MS)).toBe(300_000 + REPLAY_MARGIN_MS);
    expect(replayTtlMs(NOW_SEC - 300, NOW_MS)).toBe(REPLAY_MARGIN_MS);
    expect(replayTtlMs(NOW_SEC - 10_000, NOW_MS)).toBe(REPLAY_MARGIN_MS);
  });
});
