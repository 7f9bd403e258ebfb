/**
 * A job re-run after its worker died between a once-only claim and the write it guards (a crash
 * must never signal twice). Deterministic: the dead attempt is simulated by leaving its claim behind, on the
 * real fleet and Redis (test/unstick/rig.ts). The SIGKILL versions are in unstick-crash.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runExpireJob, runUnstickJob } from '../../workers/unstick.ts';
import { REQUESTER, ofType, startRig, type Rig } from '../unstick/rig.ts';

let rig: Rig;

beforeAll(async () => {
  rig = await startRig({ hosts: [{ id: 'kpro5', gpus: 2 }], containers: [{ id: 'ct130', vmid: 130, host: 'kpro5' }] });
}, 120_000);

afterAll(async () => {
  await rig?.stop();
}, 60_000);

const FINISH_KEY = 'incident-finished';

describe('a re-run finishes what its own dead attempt claimed and never wrote', () => {
  it('the finish latch held by an earlier attempt of the same job: the re-run writes the verdict, `finished`, and releases the lock', async () => {
    const id = await rig.newIncident('ct130');
    const jobId = `${id}-unstick`;
    // Attempt 1 claimed the finish and was SIGKILLed before appending anything.
    expect(await rig.steps.claimStep(id, FINISH_KEY, `host:101:${jobId}:1`, Date.now())).toBe(true);
    await runUnstickJob(
      { kind: 'unstick', incidentId: id, machineId: 'ct130' },
      rig.deps({ workerId: `host:202:${jobId}:2`, jobId }),
    );
    const ev = await rig.events(id);
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(ofType(ev, 'verdict')[0]?.verdict.kind).toBe('nothing_stuck');
    expect(await rig.lock.holder('ct130')).toBeNull();
    // Another run of the same job (e.g. a third attempt) finds `finished` in the log: nothing more.
    await runUnstickJob(
      { kind: 'unstick', incidentId: id, machineId: 'ct130' },
      rig.deps({ workerId: `host:303:${jobId}:3`, jobId }),
    );
    expect(ofType(await rig.events(id), 'finished')).toHaveLength(1);
  }, 60_000);

  it('the latch held by ANOTHER job (which may still be writing): no takeover', async () => {
    const id = await rig.newIncident('ct130');
    expect(await rig.steps.claimStep(id, FINISH_KEY, `host:101:${id}-decision-x:1`, Date.now())).toBe(true);
    await runUnstickJob(
      { kind: 'unstick', incidentId: id, machineId: 'ct130' },
      rig.deps({ workerId: `host:202:${id}-unstick:1`, jobId: `${id}-unstick` }),
    );
    expect(ofType(await rig.events(id), 'finished')).toEqual([]);
    await rig.lock.release('ct130', id);
  }, 60_000);

  it('an expiry whose first attempt expired the approval and died: the re-run says it expired and closes the incident, once', async () => {
    const id = await rig.newIncident('ct130');
    const now = Date.now();
    const a = await rig.approvals.create({
      incidentId: id,
      stepId: 'host_kill-x',
      planHash: 'h',
      requester: REQUESTER,
      approvers: ['U0APPROVE1'],
      now: now - 10_000,
      expiresAt: now - 1,
    });
    expect((await rig.approvals.expire(a.id, now)).expired).toBe(true);
    const jobId = `expire-${a.id}`;
    await runExpireJob(
      { kind: 'expire', incidentId: id, approvalId: a.id },
      rig.deps({ workerId: `host:202:${jobId}:2`, jobId }),
    );
    await runExpireJob(
      { kind: 'expire', incidentId: id, approvalId: a.id },
      rig.deps({ workerId: `host:303:${jobId}:3`, jobId }),
    );
    const ev = await rig.events(id);
    expect(ofType(ev, 'approval_expired')).toHaveLength(1);
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(await rig.lock.holder('ct130')).toBeNull();
  }, 60_000);
});
