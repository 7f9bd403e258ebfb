import { describe, expect, it } from 'vitest';
import { percentile } from './lib/figures.ts';
import { failover } from './scenarios/failover.ts';

describe('Redis primary SIGKILLed mid-incident under Sentinel (private primary, replica, three sentinels)', () => {
  it('with a status fan-out running and an approval pending: answered inside 3 s meanwhile, resumes with no restart, nothing acknowledged lost, the approved kill runs once', async () => {
    const f = await failover({ failovers: 1, inFlight: 4, duringFailover: 4 });
    expect(f.failures).toEqual([]);
    expect(f.failoversSurvived).toBe(1);
    expect(f.eventsLost).toBe(0);
    expect(f.messagesLost).toBe(0);
    expect(f.killsExecutedTwice).toBe(0);
    expect(percentile(f.ackMs, 99)).toBeLessThan(3000);
    // Above the sum of the scenario's own bounds (card 45 s, failover 30 s, resume 30 s, Recovered 45 s,
    // the threads 60 s, plus start and stop), so a slow step fails with its own message, not this timeout.
  }, 420_000);
});
