/**
 * GPUs identified by UUID end to end (indexes differ inside a container), on the test fleet with real SSH and
 * Redis. ct131 is given host GPUs 5 and 2 (`pct config 131`: `devN: /dev/nvidia5`, `/dev/nvidia2`) and, as on
 * real Proxmox, sees them renumbered from 0 in bus order: its GPU 0 is host GPU 2, its GPU 1 host GPU 5. The
 * host's own view decides which host GPU is read, reset and reported; a reset names the GPU by UUID and
 * re-checks that UUID at run time; a container that lies about a GPU's identity gets nothing done to any host
 * GPU.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import { readJson, type HostState } from '../harness/fleet/state.ts';
import { APPROVER, ofType, startRig, type Rig } from './rig.ts';

let rig: Rig;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 8 }],
    containers: [{ id: 'ct131', vmid: 131, host: 'kpro5', ownAddress: true, gpus: [5, 2] }],
  });
});

afterAll(async () => {
  await rig?.stop();
});

/** Host GPU UUIDs by host index, as the host's state has them now. */
function hostUuids(): string[] {
  const s = readJson<HostState>(join(rig.fleet.machine('kpro5').dir, 'state.json'));
  return [...s.gpus].sort((a, b) => a.index - b.index).map((g) => g.uuid);
}

/** The GPU resets that actually ran on kpro5 (its fleet tool log) from `since` (epoch ms) on. */
function hostResetsSince(since: number): string[] {
  return rig.fleet
    .commandLog('kpro5')
    .filter((c) => c.via === 'tool' && c.ts >= since && c.cmd.includes('--gpu-reset'))
    .map((c) => c.cmd);
}

async function clearLeaks(): Promise<void> {
  for (let i = 0; i < 8; i++) await rig.fleet.setLeak('kpro5', i, 0);
}

async function approveAndRun(incidentId: string): Promise<void> {
  const req = ofType(await rig.events(incidentId), 'approval_requested')[0];
  expect(
    await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'approved', now: Date.now() }),
  ).toMatchObject({ ok: true });
  await runDecisionJob({ kind: 'decision', incidentId, approvalId: req?.approvalId ?? '' }, rig.deps());
}

/** Denies whatever card the incident still waits on, so it finishes and frees the target. */
async function closeIncident(incidentId: string): Promise<void> {
  for (const req of ofType(await rig.events(incidentId), 'approval_requested')) {
    if ((await rig.approvals.get(req.approvalId))?.state !== 'pending') continue;
    await rig.approvals.decide(req.approvalId, { user: APPROVER, decision: 'denied', now: Date.now() });
    await runDecisionJob({ kind: 'decision', incidentId, approvalId: req.approvalId }, rig.deps());
  }
  expect(await rig.lock.holder('ct131')).toBeNull();
}

describe('a container that sees a renumbered subset of the host GPUs', () => {
  it("reads, resets and reports host GPU 2 for the container's GPU 0: matched by the host's view, reset by UUID", async () => {
    const u = hostUuids();
    await rig.fleet.setLeak('kpro5', 2, 30_000); // ct131's GPU 0
    await rig.fleet.setLeak('kpro5', 0, 12_000); // host GPU 0: not ct131's (its GPU 0 is a different GPU)
    const holder = await rig.fleet.spawnHolder('ct131', {
      gpus: [{ index: 1, mib: 50_000 }],
      title: 'python3 serve.py',
    }); // host GPU 5
    const id = await rig.newIncident('ct131');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct131' }, rig.deps());
    let ev = await rig.events(id);
    // The container's own table: two GPUs, numbered 0 and 1, which are host GPUs 2 and 5.
    const ctSnap = ofType(ev, 'snapshot').find(
      (e) => e.label === 'before' && e.snapshot.machineId === 'ct131',
    )?.snapshot;
    expect(ctSnap?.gpus.map((g) => [g.index, g.uuid, g.memoryUsedMiB])).toEqual([
      [0, u[2], 30_000],
      [1, u[5], 50_000],
    ]);
    const d = ofType(ev, 'diagnosis')[0]?.diagnosis;
    expect(d?.gpus.map((g) => [g.index, g.hostIndex, g.uuid, g.kind])).toEqual([
      [0, 2, u[2], 'orphaned_memory'],
      [1, 5, u[5], 'held_in_container'],
    ]);
    // Tier 1 stopped the holder on host GPU 5 from inside the container.
    expect(
      rig.fleet
        .signals()
        .filter((x) => x.hostPid === holder.hostPid)
        .map((x) => x.signal),
    ).toEqual(['SIGTERM']);
    const req = ofType(ev, 'approval_requested')[0];
    expect(req?.step.kind).toBe('host_reset');
    expect(req?.step.gpus.map((g) => [g.index, g.hostIndex, g.uuid])).toEqual([[0, 2, u[2]]]);
    // Every reset command names the GPU by UUID, never by an index.
    for (const c of req?.step.commands ?? []) expect(c.argv.slice(-2)).toEqual(['-i', u[2]]);

    const t0 = Date.now();
    await approveAndRun(id);
    ev = await rig.events(id);
    const reset = ofType(ev, 'command').filter((c) => c.role === 'reset');
    // The worker asked kpro5's agent to reset that UUID, and that is the one reset that ran there.
    expect(reset.map((c) => c.record.command)).toEqual([
      `gpu-medic 1 10000 host reset ${u[2]} ${id} ${req?.approvalId}`,
    ]);
    expect(hostResetsSince(t0)).toEqual([expect.stringMatching(new RegExp(`nvidia-smi --gpu-reset -i ${u[2]}$`))]);
    const mem = rig.fleet.gpuMemory('kpro5');
    expect([mem[2]?.usedMiB, mem[0]?.usedMiB, mem[5]?.usedMiB]).toEqual([0, 12_000, 0]);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    await closeIncident(id);
    await clearLeaks();
  });

  it("the host renumbers its GPUs between plan and approval: the planned GPU is no longer ct131's, so kpro5's agent refuses its reset and no GPU is reset", async () => {
    const u = hostUuids();
    await rig.fleet.setLeak('kpro5', 2, 30_000);
    const id = await rig.newIncident('ct131');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct131' }, rig.deps());
    expect(ofType(await rig.events(id), 'approval_requested')[0]?.step.gpus.map((g) => [g.hostIndex, g.uuid])).toEqual([
      [2, u[2]],
    ]);
    // Re-enumeration (a reboot, a GPU back on the bus): host GPUs 2 and 3 trade indices and device
    // minors, so ct131's /dev/nvidia2 is now the other GPU, which holds memory of its own.
    await rig.fleet.renumberHostGpus('kpro5', [0, 1, 3, 2, 4, 5, 6, 7]);
    try {
      expect(hostUuids().slice(2, 4)).toEqual([u[3], u[2]]);
      await rig.fleet.setLeak('kpro5', 2, 9_000);
      const t0 = Date.now();
      await approveAndRun(id);
      const ev = await rig.events(id);
      // The worker asked for the planned UUID; the host checked it against ct131's pct config now.
      expect(
        ofType(ev, 'step_finished')
          .map((e) => e.message)
          .join('\n'),
      ).toContain(`refused \`gpu-medic 1 10000 host reset ${u[2]} ${id} apr_`);
      expect(ofType(ev, 'step_finished').at(-1)?.message).toContain(
        `GPU ${u[2]} is not passed to container 131 by its pct config on this host. Nothing was run.`,
      );
      expect(hostResetsSince(t0)).toEqual([]);
      const mem = rig.fleet.gpuMemory('kpro5');
      expect([mem[3]?.usedMiB, mem[2]?.usedMiB]).toEqual([30_000, 9_000]);
      await closeIncident(id);
    } finally {
      await rig.fleet.renumberHostGpus('kpro5', [0, 1, 3, 2, 4, 5, 6, 7]);
      await clearLeaks();
    }
    expect(hostUuids()).toEqual(u);
  });

  it('a UUID the host no longer lists at run time is not reset, and the thread says why', async () => {
    const u = hostUuids();
    await rig.fleet.setLeak('kpro5', 2, 30_000);
    const id = await rig.newIncident('ct131');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct131' }, rig.deps());
    await rig.fleet.setGpuError('kpro5', 'gpu_lost', 2);
    await approveAndRun(id);
    const ev = await rig.events(id);
    expect(ofType(ev, 'command').filter((c) => c.role === 'reset' || c.role === 'persistence_off')).toEqual([]);
    expect(ofType(ev, 'step_finished').at(-1)?.message).toMatch(
      new RegExp(`${u[2]}\\): skipped, kpro5 no longer lists that UUID \\(exit 15`),
    );
    await closeIncident(id);
    await rig.fleet.setGpuError('kpro5', null, 2);
    await clearLeaks();
  });

  it("a container whose nvidia-smi claims another host GPU's UUID gets nothing done to that GPU, and is told why", async () => {
    const u = hostUuids();
    await rig.fleet.setLeak('kpro5', 0, 40_000); // host GPU 0: not passed to ct131
    await rig.fleet.spoofGpuIdentity('ct131', 0, 0); // ct131 says its GPU 0 is host GPU 0
    try {
      const id = await rig.newIncident('ct131');
      await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct131' }, rig.deps());
      const ev = await rig.events(id);
      const ctSnap = ofType(ev, 'snapshot').find((e) => e.snapshot.machineId === 'ct131')?.snapshot;
      expect(ctSnap?.gpus[0]?.uuid).toBe(u[0]);
      const g0 = ofType(ev, 'diagnosis')[0]?.diagnosis.gpus[0];
      expect([g0?.hostIndex, g0?.uuid, g0?.kind]).toEqual([null, null, 'gpu_error']);
      expect(g0?.sentence).toContain(
        `the container reports GPU 0 as ${u[0]}, which is not one of the GPUs kpro5 passes to container 131`,
      );
      expect(ofType(ev, 'approval_requested')).toEqual([]);
      expect(ofType(ev, 'step_started')).toEqual([]);
      expect(rig.fleet.gpuMemory('kpro5')[0]?.usedMiB).toBe(40_000);
      expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).not.toBe('recovered');
      await closeIncident(id);
    } finally {
      await rig.fleet.spoofGpuIdentity('ct131', 0, null);
      await clearLeaks();
    }
  });
});
