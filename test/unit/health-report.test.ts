import { describe, expect, it } from 'vitest';
import { defaultHealthFile, judgeHealth, maxAgeMs } from '../../src/health/report.ts';

const NOW = Date.parse('2026-11-30T03:00:00.000Z');
const report = (o: { ageMs?: number; checks?: Record<string, string | null>; intervalMs?: number } = {}) =>
  JSON.stringify({
    role: 'bot',
    pid: 7,
    at: new Date(NOW - (o.ageMs ?? 0)).toISOString(),
    intervalMs: o.intervalMs ?? 10_000,
    checks: o.checks ?? { redis: null },
  });

describe('judging a heartbeat (pure)', () => {
  it('each role has its own default file', () => {
    expect(defaultHealthFile('bot')).toBe('/tmp/gpu-medic-bot.health.json');
    expect(defaultHealthFile('worker')).not.toBe(defaultHealthFile('bot'));
  });

  it('stale exactly after three missed beats plus 5 s', () => {
    expect(maxAgeMs(10_000)).toBe(35_000);
    expect(judgeHealth(report({ ageMs: 35_000 }), NOW, 'f').ok).toBe(true);
    expect(judgeHealth(report({ ageMs: 35_001 }), NOW, 'f')).toMatchObject({
      ok: false,
      line: expect.stringContaining('stale'),
    });
  });

  it('names every failing check, and only those', () => {
    const j = judgeHealth(
      report({
        checks: { redis: 'no answer within 2000 ms', outbox: null, slack: 'Socket Mode reconnecting for 40 s' },
      }),
      NOW,
      'f',
    );
    expect(j).toEqual({
      ok: false,
      line: 'bot (pid 7) unhealthy (0 s ago): redis: no answer within 2000 ms; slack: Socket Mode reconnecting for 40 s',
    });
  });

  it('garbage, a wrong shape, a bad time and a clock ahead of ours', () => {
    expect(judgeHealth('{"role":', NOW, '/x')).toEqual({ ok: false, line: 'heartbeat at /x is not JSON' });
    expect(judgeHealth('{"role":"bot"}', NOW, '/x')).toEqual({
      ok: false,
      line: 'heartbeat at /x has an unexpected shape',
    });
    expect(
      judgeHealth(JSON.stringify({ role: 'bot', pid: 1, at: 'yesterday', intervalMs: 1000, checks: {} }), NOW, '/x')
        .line,
    ).toBe('heartbeat at /x has no valid time');
    expect(judgeHealth(report({ ageMs: -3000 }), NOW, 'f')).toEqual({
      ok: true,
      line: 'bot (pid 7) ok (0 s ago): redis',
    });
  });
});
