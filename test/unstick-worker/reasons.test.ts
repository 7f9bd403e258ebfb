/**
 * Unstick's reasons name the real cause (issue 11 #7), on the test fleet with real SSH and Redis:
 * a host without `lxc-info` is not "a container that is not running", the snapshots that were
 * read are posted even when a later read fails, and no advice points at a command that works.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { ofType, procStart, startRig, type Rig } from './rig.ts';

let rig: Rig;
let holder: FleetProcess;

beforeAll(async () => {
  rig = await startRig({ hosts: [{ id: 'kpro5', gpus: 2 }], containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }] });
  holder = await rig.fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 96_413 }], title: 'sglang::scheduler_TP0' });
});

afterAll(async () => {
  await rig?.stop();
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
    expect(ofType(ev, 'snapshot').map((e) => [e.label, e.snapshot.machineId]).sort()).toEqual([
      ['before', 'ct129'],
      ['before', 'kpro5'],
    ]);
    // No advice to run a command that works, and only the host read is blamed.
    const texts = [...ofType(ev, 'error'), ...ofType(ev, 'machine_error')].map((e) => e.message);
    expect(texts.join('\n')).not.toMatch(/Try `\/gpu status/);
    expect(ofType(ev, 'machine_error').map((e) => e.machineId)).toEqual(['kpro5']);
    expect(ofType(ev, 'error').map((e) => e.message)).toEqual([expect.stringMatching(/^Nothing was signalled: the host view of `kpro5` could not be read/)]);
    expect(ofType(ev, 'step_started')).toEqual([]);
    expect(rig.fleet.signals()).toEqual([]);
    expect(procStart(holder.hostPid)).toBe(holder.startTime);
    expect(await rig.lock.holder('ct129')).toBeNull();
  });
});
