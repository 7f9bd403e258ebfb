import { describe, expect, it } from 'vitest';
import { percentile } from './lib/figures.ts';
import { load } from './scenarios/load.ts';

describe('load: 200 slash commands at once, then status all across 12 machines (the soak uses 50)', () => {
  it('acks and queues every command, drains the queue, loses no message, no cross-talk, one SSH login per host, ≤ 8 channels', async () => {
    const f = await load({ machines: 12, burst: 200, statusAll: 3, drainMs: 90_000 });
    console.log(
      `ack p50 ${Math.round(percentile(f.ackMs, 50))} ms, p99 ${Math.round(percentile(f.ackMs, 99))} ms; peak channels/host ${f.peakChannels}, connections/host ${f.peakConnections}`,
    );
    expect(f.failures).toEqual([]);
    expect(f.messagesLost).toBe(0);
    expect(f.eventsLost).toBe(0);
  }, 150_000);
});
