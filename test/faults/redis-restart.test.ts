import { describe, expect, it } from 'vitest';
import { percentile } from './lib/figures.ts';
import { redisRestart } from './scenarios/redis-restart.ts';

describe('Redis stopped and restarted mid-incident (private redis-server, appendonly yes, everysec)', () => {
  it('answers "queue unavailable, nothing was done" during the outage, resumes after it with no restart, loses nothing acknowledged', async () => {
    const f = await redisRestart({ outages: 2, outageMs: 2500, inFlight: 4, duringOutage: 4 });
    expect(f.failures).toEqual([]);
    expect(f.eventsLost).toBe(0);
    expect(f.messagesLost).toBe(0);
    expect(percentile(f.ackMs, 99)).toBeLessThan(3000);
  }, 150_000);
});
