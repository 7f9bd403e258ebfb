/**
 * What the worker takes as a container's on a shared host, on real LXC containers (a kill never leaves it):
 * a host process is the container's only when its PID namespace and its cgroup (`lxc/<vmid>`)
 * both say so, and a host uid is shown as the container's user through the uid map its
 * `pct config` says (the default shift for `unprivileged: 1`, its own `lxc.idmap` lines
 * otherwise), never an assumed 100000.
 * kpro5: ct129 and ct130 with Proxmox's default map, ct131 with its own (0 → 200000).
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findMachine, hostRouteFor, routeFor } from '../../src/config/machines.ts';
import type { Inventory } from '../../src/config/inventory.ts';
import { buildHolders, type HostReadings } from '../../src/gpu/holders.ts';
import { diagnoseReadings, readHost, readTarget } from '../../src/readings/unstick-readings.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { startFleet } from '../harness/fleet/index.ts';
import { lxcCgroupDirs } from '../harness/fleet/lxc-container.ts';
import type { Fleet } from '../harness/fleet/types.ts';
import { inventoryOf } from './rig.ts';

let fleet: Fleet;
let inventory: Inventory;
let executor: Executor;

beforeAll(async () => {
  fleet = await startFleet({
    engine: 'lxc',
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5' },
      { id: 'ct130', vmid: 130, host: 'kpro5' },
      { id: 'ct131', vmid: 131, host: 'kpro5', idmapBase: 200000 },
    ],
  });
  inventory = inventoryOf(fleet);
  executor = createSshExecutor({ connectTimeoutMs: 8000 });
});

afterAll(async () => {
  await executor?.close();
  await fleet?.stop();
});

const deps = () => ({ exec: executor.exec.bind(executor), now: () => new Date(), commandTimeoutMs: 15_000 });

async function hostReadings(vmid: number): Promise<HostReadings> {
  const host = findMachine(inventory, 'kpro5');
  const route = hostRouteFor(inventory, 'kpro5');
  if (!host || !route) throw new Error('no kpro5 in the inventory');
  const r = await readHost(host, route, vmid, deps());
  if (!r.ok) throw new Error(r.message);
  return r.readings;
}

/** The fleet's first cgroup component (`gpu-medic-<fleet>`), from a container's cgroup path. */
function cgroupTag(id: string): string {
  const parts = (fleet.machine(id).cgroup ?? '').split('/');
  const tag = parts[parts.lastIndexOf('lxc') - 1];
  if (tag === undefined) throw new Error(`${id} has no lxc cgroup`);
  return tag;
}

describe('host uids shown as the container’s users, by the map in its pct config', () => {
  it('a root holder of ct129 (unprivileged: 1, no lxc.idmap): host uid 100000 is its uid 0', async () => {
    const h = await fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 1000 }] });
    try {
      const r = await hostReadings(129);
      expect(r.uidMap).toEqual({ kind: 'default', ranges: [{ inside: 0, host: 100000, count: 65536 }] });
      // The container's own reading left out: the user comes from the host's reading alone.
      const mine = buildHolders(r, { holders: [], procs: [] }).holders.find((x) => x.process.hostPid === h.hostPid);
      expect(mine?.inTarget).toBe(true);
      expect(mine?.process).toMatchObject({ uid: 0, hostUid: 100000 });
    } finally {
      await fleet.endProcess(h);
    }
  });

  it('ct131 has its own map (lxc.idmap: u 0 200000 65536): a fleetuser holder’s host uid 200000 + uid is that uid', async () => {
    const uid = Number(execFileSync('id', ['-u', 'fleetuser'], { encoding: 'utf8' }).trim());
    const h = await fleet.spawnHolder('ct131', { gpus: [{ index: 0, mib: 1000 }], user: 'fleetuser' });
    try {
      const r = await hostReadings(131);
      expect(r.uidMap).toEqual({ kind: 'custom', ranges: [{ inside: 0, host: 200000, count: 65536 }] });
      const mine = buildHolders(r, { holders: [], procs: [] }).holders.find((x) => x.process.hostPid === h.hostPid);
      expect(mine?.process).toMatchObject({ uid, hostUid: 200000 + uid });
    } finally {
      await fleet.endProcess(h);
    }
  });
});

describe('a holder of the other container is not taken', () => {
  it('ct130’s holder on the same host is outside ct129', async () => {
    const other = await fleet.spawnHolder('ct130', { gpus: [{ index: 2, mib: 2000 }], title: 'python3 train.py' });
    const mine = await fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 1000 }], title: 'sglang::scheduler_TP0' });
    try {
      const holders = buildHolders(await hostReadings(129), { holders: [], procs: [] }).holders;
      expect(holders.filter((x) => x.inTarget).map((x) => x.process.hostPid)).toEqual([mine.hostPid]);
      expect(holders.find((x) => x.process.hostPid === other.hostPid)?.inTarget).toBe(false);
    } finally {
      await fleet.endProcess(other);
      await fleet.endProcess(mine);
    }
  });

  it('a process in ct129’s PID namespace but in ct130’s cgroup (lxc/130) is not ct129’s: outside, never a target', async () => {
    const moved = await fleet.spawnHolder('ct129', { gpus: [{ index: 1, mib: 3000 }], title: 'python3 moved.py' });
    try {
      const dirs = lxcCgroupDirs(cgroupTag('ct130'), 130);
      expect(dirs.length).toBeGreaterThan(0);
      for (const d of dirs) writeFileSync(`${d}/cgroup.procs`, String(moved.hostPid));
      const r = await hostReadings(129);
      const reading = r.procs.find((p) => p.pid === moved.hostPid);
      expect(reading?.pidNs).toBe(r.targetPidNs); // same PID namespace: only the cgroup tells
      expect(reading?.cgroup).toMatch(/\/lxc\/130\/ns$/m);
      const h = buildHolders(r, { holders: [], procs: [] }).holders.find((x) => x.process.hostPid === moved.hostPid);
      expect(h?.inTarget).toBe(false);

      // Through the whole read and diagnosis: GPU 1's memory is held outside ct129, nothing to signal.
      const ct = findMachine(inventory, 'ct129');
      const host = findMachine(inventory, 'kpro5');
      const routes = { container: routeFor(inventory, 'ct129'), host: hostRouteFor(inventory, 'kpro5') };
      if (ct?.kind !== 'container' || !host || !routes.container || !routes.host) throw new Error('inventory');
      const t = await readTarget(ct, host, { container: routes.container, host: routes.host }, deps());
      if (!t.ok) throw new Error(JSON.stringify(t.failures.map((f) => f.message)));
      const d = diagnoseReadings('ct129', 'kpro5', t.value, { containerExecUid: 0 });
      const gpu = d.gpus.find((g) => g.hostIndex === 1);
      expect(gpu?.kind).toBe('held_outside');
      expect(d.gpus.flatMap((g) => g.holders).map((x) => x.process.hostPid)).not.toContain(moved.hostPid);
    } finally {
      await fleet.endProcess(moved);
    }
  });
});
