import { describe, expect, it } from 'vitest';
import { sshFaults } from './scenarios/ssh-faults.ts';

describe('SSH faults: host down, connection dropped mid-command, auth refused, host key changed, nvidia-smi hanging', () => {
  it('each ends within its bound with a clear coded error, and the worker keeps serving the healthy machines', async () => {
    const f = await sshFaults({ rounds: 1, connectTimeoutSec: 2, commandTimeoutSec: 2 });
    expect(f.failures).toEqual([]);
    expect(f.eventsLost).toBe(0);
    expect(f.messagesLost).toBe(0);
  }, 120_000);
});
