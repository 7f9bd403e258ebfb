import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Stack } from '../harness/stack.ts';
import {
  clockSkewFaults,
  finalChecks,
  interactionFaults,
  policyFaults,
  REQUEST_MACHINES,
  signedRequestFaults,
  startRequestsStack,
} from './scenarios/requests.ts';

describe('hostile and out-of-policy requests through the real Bolt receiver', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startRequestsStack();
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('forged signature, stale timestamp, altered body, replay (also after a bot restart): refused, nothing queued', async () => {
    const f = await signedRequestFaults(s, { rounds: 3 });
    expect(f.failures).toEqual([]);
    expect(f.badInputsTried).toBe(3 * 5 + 1);
  });

  it('commands from a channel or user outside the policy: refused with a reason, logged, nothing queued', async () => {
    const f = await policyFaults(s);
    expect(f.failures).toEqual([]);
  });

  it('tampered Approve/Deny clicks: refused with an ephemeral reason, recorded in the incident log, nothing runs', async () => {
    const f = await interactionFaults(s);
    expect(f.failures).toEqual([]);
  });

  it('signed requests dated more than 5 minutes ahead or behind, or sent to a bot whose clock is an hour off either way: 401 like a stale one, nothing opened; a replay record outlives the window', async () => {
    const f = await clockSkewFaults(s);
    expect(f.failures).toEqual([]);
    expect(f.skewedRefused).toBe(f.skewedSent);
    expect(f.skewedSent).toBe(12);
  });

  it('no secret in any artefact of the run, and only template commands reached the fleet', async () => {
    const f = await finalChecks(s, REQUEST_MACHINES);
    expect(f.failures).toEqual([]);
  });
});
