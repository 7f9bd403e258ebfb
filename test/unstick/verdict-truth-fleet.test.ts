/**
 * Every word of a verdict is true, on the test fleet (real sshd, namespaces, processes; real Redis): two
 * concurrent unsticks on neighbour containers each claim only their own memory; a leak beside
 * another container's live job gets no reset card; a lost GPU never ends green; after a denied
 * host kill the advice is what is really left and who can do it. And a neighbour's unstick
 * that frees its GPUs while the target's after-view is being read never changes the target's verdict.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import { APPROVER, inventoryOf, ofType, startRig, type Rig } from './rig.ts';

let rig: Rig;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 8 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      { id: 'ct130', vmid: 130, host: 'kpro5' },
    ],
  });
});

afterAll(async () => {
  await rig?.stop();
});

async function threadText(id: string): Promise<string> {
  const meta = await rig.log.meta(id);
  if (!meta) throw new Error('no meta');
  return renderUnstick(meta, await rig.events(id))
    .map((v) => v.text)
    .join('\n');
}

describe('finding 1: concurrent unsticks on neighbour containers', () => {
  it('each claims only its own holders’ memory; ct129’s verdict reports ct130’s as freed outside this incident', async () => {
    const mine = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 50_000 }],
      title: 'sglang::scheduler_TP0',
    });
    const theirs = await rig.fleet.spawnHolder('ct130', {
      gpus: [{ index: 1, mib: 60_000 }],
      title: 'sglang::scheduler_TP1',
    });
    const a = await rig.newIncident('ct129');
    const b = await rig.newIncident('ct130');
    // ct130's whole unstick runs while ct129's waits out its grace after SIGTERM: between ct129's
    // before and after snapshots, as two on-call engineers at once would make it.
    let neighbour: Promise<void> | null = null;
    const depsA = rig.deps({
      sleep: async (ms: number) => {
        if (neighbour === null) {
          neighbour = runUnstickJob({ kind: 'unstick', incidentId: b, machineId: 'ct130' }, rig.deps());
          await neighbour;
        }
        await new Promise<void>((r) => setTimeout(r, ms));
      },
    });
    await runUnstickJob({ kind: 'unstick', incidentId: a, machineId: 'ct129' }, depsA);
    expect(neighbour).not.toBeNull();
    await mine.exited;
    await theirs.exited;

    const va = ofType(await rig.events(a), 'verdict').at(-1)?.verdict;
    const vb = ofType(await rig.events(b), 'verdict').at(-1)?.verdict;
    expect(va?.kind).toBe('recovered');
    expect(va?.totalFreedMiB).toBe(50_000);
    expect(va?.gpus.find((g) => g.index === 1)).toMatchObject({
      beforeMiB: 60_000,
      afterMiB: 0,
      heldMiB: 0,
      freedMiB: 0,
      othersFreedMiB: 60_000,
    });
    expect(va?.outside).toEqual(['GPU 1: 60,000 MiB freed outside this incident.']);
    expect(vb?.kind).toBe('recovered');
    expect(vb?.totalFreedMiB).toBe(60_000);
    expect(await threadText(a)).toContain('Recovered* · 50,000 MiB freed');
  });
});

describe('finding 2: a leak beside another container’s live job', () => {
  it('is diagnosed with its unaccounted MiB and the job beside it; no reset card is offered; the verdict says when a reset can run', async () => {
    const job = await rig.fleet.spawnHolder('ct130', {
      gpus: [{ index: 5, mib: 40_960 }],
      title: 'python3 train.py --epochs 3',
    });
    await rig.fleet.setLeak('kpro5', 5, 8_192);
    try {
      const id = await rig.newIncident('ct129');
      await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
      const ev = await rig.events(id);
      const g5 = ofType(ev, 'diagnosis')[0]?.diagnosis.gpus.find((g) => g.index === 5);
      expect(g5).toMatchObject({ kind: 'leak_beside_holders', usedMiB: 49_152, unaccountedMiB: 8_192 });
      expect(g5?.sentence).toContain(`8,192 MiB of the 49,152 MiB in use is held by no process anywhere on kpro5`);
      expect(g5?.sentence).toContain(`host PID ${job.hostPid}`);
      expect(ofType(ev, 'approval_requested')).toEqual([]);
      const v = ofType(ev, 'verdict').at(-1)?.verdict;
      expect(v?.kind).toBe('still_stuck');
      expect(v?.nextStep).toMatch(/^GPU 5: 8,192 MiB is held by no process, beside processes outside ct129/);
      expect(v?.nextStep).not.toMatch(/host-level GPU reset on kpro5, approved/);
      expect(rig.fleet.signals().filter((s) => s.hostPid === job.hostPid)).toEqual([]);
    } finally {
      await rig.fleet.setLeak('kpro5', 5, 0);
      process.kill(job.hostPid, 'SIGKILL');
      await job.exited;
    }
  });
});

describe('finding 3: a lost GPU never ends green', () => {
  it('nvidia-smi answering "GPU is lost": GPU error with its own next step, outcome failed, no green mark, nothing signalled', async () => {
    const held = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 96_413 }],
      title: 'sglang::scheduler_TP0',
    });
    await rig.fleet.setGpuError('kpro5', 'gpu_lost', 3);
    try {
      const t0 = Date.now();
      const id = await rig.newIncident('ct129');
      await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
      const ev = await rig.events(id);
      expect(ofType(ev, 'diagnosis')[0]?.diagnosis.error?.kind).toBe('gpu_lost');
      const v = ofType(ev, 'verdict').at(-1)?.verdict;
      expect(v?.kind).toBe('gpu_error');
      expect(v?.nextStep).toMatch(
        /A reset will not help and nothing was signalled: drain kpro5, reboot it and check the hardware/,
      );
      expect(ofType(ev, 'finished').at(-1)?.outcome).toBe('failed');
      const text = await threadText(id);
      expect(text).not.toContain(':white_check_mark:');
      expect(text).not.toMatch(/Nothing was stuck|Recovered/);
      expect(rig.fleet.signals().filter((s) => s.ts >= t0)).toEqual([]);
      expect(rig.fleet.gpuMemory('kpro5')[0]?.usedMiB).toBe(96_413);
    } finally {
      await rig.fleet.setGpuError('kpro5', null);
      process.kill(held.hostPid, 'SIGKILL');
      await held.exited;
    }
  });
});

describe('finding 4: advice after a denied host kill', () => {
  let ex: Executor;
  beforeAll(() => {
    ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
  });
  afterAll(async () => {
    await ex.close();
  });

  it('the container’s kill failed (not permitted) and the host kill was denied: says only a host-level kill can free it, who denied it and who else can approve; no loop back to /gpu unstick', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 2, mib: 30_000 }],
      title: 'sglang::scheduler_TP2',
    });
    try {
      const inventory = inventoryOf(rig.fleet, (inv) => {
        const c = inv.containers.find((x) => x.id === 'ct129');
        if (c) c.user = 'fleetuser';
      });
      const deps = rig.deps({ inventory, executor: ex });
      const id = await rig.newIncident('ct129');
      await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, deps);
      const req = ofType(await rig.events(id), 'approval_requested')[0];
      expect(req?.step.kind).toBe('host_kill');
      const approvalId = req?.approvalId ?? '';
      expect((await rig.approvals.decide(approvalId, { user: APPROVER, decision: 'denied', now: Date.now() })).ok).toBe(
        true,
      );
      await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, deps);

      const ev = await rig.events(id);
      const last = ofType(ev, 'diagnosis')
        .at(-1)
        ?.diagnosis.gpus.find((g) => g.index === 2);
      expect(last?.kind).toBe('held_host_only');
      expect(last?.sentence).not.toContain('The container can stop');
      const v = ofType(ev, 'verdict').at(-1)?.verdict;
      expect(v?.kind).toBe('still_stuck');
      expect(v?.nextStep).toContain(
        `GPU 2: only a host-level kill on kpro5 can free it (host PID ${h.hostPid}); that kill was denied by <@${APPROVER}>. If it is still needed, ask another approver (<@U0APPROVE2>) to approve a new \`/gpu unstick ct129\`.`,
      );
      expect(v?.nextStep).not.toMatch(/container can stop|run `\/gpu unstick ct129` again/);
      expect(rig.fleet.signals().filter((s) => s.hostPid === h.hostPid)).toEqual([]);
    } finally {
      process.kill(h.hostPid, 'SIGKILL');
      await h.exited;
    }
  });
});

describe('a neighbour frees its GPUs while the target’s after-view is read', () => {
  it('the target’s own holder fully freed → Recovered, no next step; GPUs 0 and 2 are said as outside this incident', async () => {
    // ct129's ranks on GPUs 0 and 2 (incident A), ct130's job on GPU 5 (incident B, the target);
    // every container sees all eight GPUs.
    const tp0 = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 50_000 }],
      title: 'sglang::scheduler_TP0',
    });
    const tp2 = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 2, mib: 50_000 }],
      title: 'sglang::scheduler_TP2',
    });
    const job = await rig.fleet.spawnHolder('ct130', { gpus: [{ index: 5, mib: 40_211 }], title: 'python3 train.py' });
    const a = await rig.newIncident('ct129');
    const b = await rig.newIncident('ct130');
    // B's after-view starts with the host's batch (nvidia-smi lists A's ranks on GPUs 0 and 2);
    // before B reads their /proc entries, A's whole unstick runs: the interleaving forced, not timed.
    let signalled = false;
    let raced: { listed: boolean } | null = null;
    const raceExecutor: Executor = {
      exec: async (route, spec) => {
        const r = await rig.executor.exec(route, spec);
        if (spec.agent?.verb === 'signal') signalled = true;
        else if (signalled && raced === null && route.kind === 'direct' && spec.agent?.verb === 'batch') {
          // The batch's parts are base64 (src/ssh batch framing); the apps part names the PIDs.
          const parts = r.stdout
            .split('\n')
            .map((l) => Buffer.from(l.trim().split(' ').at(-1) ?? '', 'base64').toString('utf8'))
            .join('\n');
          raced = { listed: [tp0, tp2].every((p) => parts.includes(`, ${p.hostPid}, `)) };
          await runUnstickJob({ kind: 'unstick', incidentId: a, machineId: 'ct129' }, rig.deps());
          await tp0.exited;
          await tp2.exited;
        }
        return r;
      },
      close: () => rig.executor.close(),
    };
    await runUnstickJob({ kind: 'unstick', incidentId: b, machineId: 'ct130' }, rig.deps({ executor: raceExecutor }));
    await job.exited;
    // The race happened: B's host read listed A's ranks, and A finished in the middle of B's read.
    expect(raced).toEqual({ listed: true });
    expect(ofType(await rig.events(a), 'verdict').at(-1)?.verdict.kind).toBe('recovered');

    const vb = ofType(await rig.events(b), 'verdict').at(-1)?.verdict;
    // What B's after-view saw on A's GPUs: listed by nvidia-smi, gone from /proc.
    expect(vb?.gpus.filter((g) => g.index === 0 || g.index === 2).map((g) => [g.before, g.after])).toEqual([
      ['held_outside', 'unidentified'],
      ['held_outside', 'unidentified'],
    ]);
    expect(vb?.kind).toBe('recovered');
    expect(vb?.nextStep).toBeNull();
    expect(vb?.totalFreedMiB).toBe(40_211);
    expect(vb?.outside.join(' ')).toMatch(/GPU 0: .*outside this incident/);
    expect(vb?.outside.join(' ')).toMatch(/GPU 2: .*outside this incident/);
    const text = await threadText(b);
    expect(text).not.toContain('holders changed while we looked');
    expect(text).not.toContain('Partially recovered');
  }, 120_000);
});
