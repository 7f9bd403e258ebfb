import { describe, expect, it } from 'vitest';
import { slackFaults } from './scenarios/slack-faults.ts';

describe('Slack rate-limits, 5xx bursts and an outage', () => {
  it('every thread message arrives exactly once, in order, after Slack recovers', async () => {
    const f = await slackFaults({ incidentsPerPhase: 4, burst: 3, outageMs: 8000, settleMs: 60_000 });
    expect(f.failures).toEqual([]);
    expect(f.messagesLost).toBe(0);
    expect(f.eventsLost).toBe(0);
  }, 150_000);
});
