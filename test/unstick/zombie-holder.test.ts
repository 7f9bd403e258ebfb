/**
 * Zombie holders (no kill frees them, so none is offered), on the real fleet: a holder that exited and whose
 * parent never reaps it (state Z, no open files) while the host's nvidia-smi still charges its memory to it.
 * No kill can free that memory; its parent reaping it does. The thread says so and names the parent (host
 * PID, command line, container); no step signals anything, no host-kill card is raised, the budget is
 * untouched, and the advice never says a kill "ran and still holds".
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BlastBudget } from '../../src/approval/blast-budget.ts';
import { runUnstickJob } from '../../workers/unstick.ts';
import { fleetuserInventory, ofType, procStart, startRig, type Rig } from './rig.ts';

let rig: Rig;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
}, 120_000);

afterAll(async () => {
  await rig?.stop();
}, 60_000);

function parentOf(pid: number): number {
  const st = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return Number(st.slice(st.lastIndexOf(') ') + 2).split(' ')[1]);
}

describe('a zombie holder', () => {
  for (const [gpu, login] of [
    [0, 'root'],
    [1, 'fleetuser'],
  ] as const)
    it(`(${login} login) is said to be a zombie with its parent named; nothing is signalled, no card, no budget spent`, async () => {
      const left = await rig.lock.holder('ct129');
      if (left) await rig.lock.release('ct129', left.incidentId);
      const z = await rig.fleet.spawnHolder('ct129', {
        gpus: [{ index: gpu, mib: 30_000 }],
        title: 'python3 /srv/train.py --rank 0',
        stuck: 'Z',
      });
      const keeper = parentOf(z.hostPid);
      const keeperStart = procStart(keeper);
      const budget = new BlastBudget(rig.redis, rig.prefix, { limit: 3 });
      const id = await rig.newIncident('ct129');
      await runUnstickJob(
        { kind: 'unstick', incidentId: id, machineId: 'ct129' },
        rig.deps({ budget, ...(login === 'fleetuser' ? { inventory: fleetuserInventory(rig.fleet) } : {}) }),
      );
      const ev = await rig.events(id);
      const gpu0 = ofType(ev, 'diagnosis')[0]?.diagnosis.gpus.find((g) => g.index === gpu);
      expect(gpu0?.sentence).toMatch(/zombie/);
      expect(gpu0?.sentence).toContain(`host PID ${keeper}`);
      expect(gpu0?.sentence).toContain('python3 /srv/train.py --rank 0');
      expect(gpu0?.sentence).toMatch(/ct129/);
      expect(gpu0?.sentence).toMatch(/reaps it/);
      expect(ofType(ev, 'step_started')).toEqual([]);
      expect(ofType(ev, 'signalled')).toEqual([]);
      expect(ofType(ev, 'approval_requested')).toEqual([]);
      expect(await budget.used('kpro5', Date.now())).toBe(0);
      const verdict = ofType(ev, 'verdict')[0]?.verdict;
      expect(verdict?.kind).toBe('still_stuck');
      expect(verdict?.nextStep).toMatch(/zombie/);
      expect(verdict?.nextStep).toContain(`host PID ${keeper}`);
      expect(verdict?.nextStep).not.toMatch(/ran and it still holds|reboot/);
      expect(ofType(ev, 'finished')).toHaveLength(1);
      expect(procStart(keeper)).toBe(keeperStart);
      expect(rig.fleet.signals().filter((s) => s.id === z.id)).toEqual([]);
      // Its parent reaps it (here: the parent ends): the memory is freed, with nothing signalled by gpu-medic.
      await rig.fleet.releaseStuck(z);
      expect(rig.fleet.gpuMemory('kpro5')[gpu]?.usedMiB).toBe(0);
    }, 60_000);
});
