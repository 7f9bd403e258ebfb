/**
 * Unstick's reasons name the real cause (advice must not mislead), on the test fleet with real SSH and Redis:
 * a host without `lxc-info` is not "a container that is not running", the snapshots that were
 * read are posted even when a later read fails, and no advice points at a command that works.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { APPROVER, inventoryOf, ofType, procStart, startRig, type Rig } from './rig.ts';

let rig: Rig;
let holder: FleetProcess;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 2 }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
  holder = await rig.fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 96_413 }], title: 'sglang::scheduler_TP0' });
});

afterAll(async () => {
  await rig?.stop();
});

describe('a host that loses lxc-info between the card and the approval', () => {
  it('the approved host kill is skipped, and the reason names lxc-info and its exit code, not "is it running?"', async () => {
    // A login as fleetuser cannot signal root's holder: tier 1 fails and a host-kill card follows.
    const inventory = inventoryOf(rig.fleet, (inv) => {
      const c = inv.containers.find((x) => x.id === 'ct129');
      if (c) c.user = 'fleetuser';
    });
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps({ inventory }));
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(req?.step.kind).toBe('host_kill');
    await rig.fleet.removeTool('kpro5', 'lxc-info');
    expect(
      await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob(
      { kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' },
      rig.deps({ inventory }),
    );
    const ev = await rig.events(id);
    const skipped = ofType(ev, 'signalled').filter((e) => e.signal === 'KILL');
    expect(skipped.map((e) => [e.hostPid, e.result])).toEqual([[holder.hostPid, 'skipped']]);
    expect(skipped[0]?.reason).toMatch(/`lxc-info` was not found on kpro5 \(exit 127/);
    expect(skipped[0]?.reason).not.toMatch(/is it running/);
    expect(rig.fleet.signals()).toEqual([]);
    expect(procStart(holder.hostPid)).toBe(holder.startTime);
    expect(await rig.lock.holder('ct129')).toBeNull();
  });
});

describe('a host without lxc-info', () => {
  it('says lxc-info is missing (exit 127), not that the container is not running; posts both before tables; signals nothing', async () => {
    await rig.fleet.removeTool('kpro5', 'lxc-info');
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    const ev = await rig.events(id);
    const hostError = ofType(ev, 'machine_error').find((e) => e.machineId === 'kpro5');
    expect(hostError?.message).toMatch(/`lxc-info` was not found on kpro5 \(exit 127/);
    expect(hostError?.message).not.toMatch(/not running/);
    // Both views had been read before the PID-namespace read failed: their tables are posted.
    expect(
      ofType(ev, 'snapshot')
        .map((e) => [e.label, e.snapshot.machineId])
        .sort(),
    ).toEqual([
      ['before', 'ct129'],
      ['before', 'kpro5'],
    ]);
    // No advice to run a command that works, and only the host read is blamed.
    const texts = [...ofType(ev, 'error'), ...ofType(ev, 'machine_error')].map((e) => e.message);
    expect(texts.join('\n')).not.toMatch(/Try `\/gpu status/);
    expect(ofType(ev, 'machine_error').map((e) => e.machineId)).toEqual(['kpro5']);
    expect(ofType(ev, 'error').map((e) => e.message)).toEqual([
      expect.stringMatching(/^Nothing was signalled: the host view of `kpro5` could not be read/),
    ]);
    expect(ofType(ev, 'step_started')).toEqual([]);
    expect(rig.fleet.signals()).toEqual([]);
    expect(procStart(holder.hostPid)).toBe(holder.startTime);
    expect(await rig.lock.holder('ct129')).toBeNull();
  });
});
