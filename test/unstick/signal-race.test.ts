/**
 * Check and signal are one act (a reused PID is never signalled), on the real sshd fleet: a target's PID is
 * handed to a new process in the same container (same host PID, same container PID, holding a
 * GPU too: only the start time tells them apart) between the plan and the kill, and between the
 * check and the kill (the executor is hooked so that, right before the signal command runs, the
 * target ends and the new process takes its PID through ns_last_pid in both PID namespaces).
 * The new process must survive, and the log must say "skipped: PID reused".
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Executor } from '../../src/ssh/types.ts';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { APPROVER, inventoryOf, ofType, procStart, startRig, type Rig } from './rig.ts';

let rig: Rig;
let ex: Executor;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 8 }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
  ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
});

/** Every process a test started ends with it, whatever it asserted. */
afterEach(async () => {
  for (const p of rig.fleet.processes())
    if (procStart(p.hostPid) === p.startTime && p.containerPid !== 1) await rig.fleet.endProcess(p);
  for (const id of ['ct129']) {
    const holder = await rig.lock.holder(id);
    if (holder) await rig.lock.release(id, holder.incidentId);
  }
});

afterAll(async () => {
  await ex?.close();
  await rig?.stop();
});

const signalsOf = (p: FleetProcess): string[] =>
  rig.fleet
    .signals()
    .filter((s) => s.id === p.id)
    .map((s) => s.signal);

/** The non-root container login: tier 1 cannot stop a root holder, so the host kill is asked for. */
const asFleetuser = () =>
  inventoryOf(rig.fleet, (inv) => {
    const c = inv.containers.find((x) => x.id === 'ct129');
    if (c) c.user = 'fleetuser';
  });

/** Ends `target` and starts a GPU-holding newcomer on its host PID and container PID. */
async function reuse(target: FleetProcess, gpu: number): Promise<FleetProcess> {
  await rig.fleet.endProcess(target);
  const at = { hostPid: target.hostPid, containerPid: target.containerPid ?? 0 };
  return rig.fleet.takePid('ct129', at, { title: 'python3 /srv/innocent_job.py', gpus: [{ index: gpu, mib: 2_000 }] });
}

/** An executor that runs `before` once, right before the first command that signals `signal` on that side. */
function hooked(
  base: Executor,
  side: 'host' | 'container',
  signal: 'TERM' | 'KILL',
  before: () => Promise<void>,
): Executor {
  let fired = false;
  return {
    async exec(route, spec) {
      const onHost = route.kind === 'direct' && route.endpoint.machineId === 'kpro5';
      if (!fired && onHost === (side === 'host') && spec.argv.includes(signal) && !spec.argv.includes('nvidia-smi')) {
        fired = true;
        await before();
      }
      return base.exec(route, spec);
    },
    close: () => base.close(),
  };
}

describe('host kill', () => {
  it('PID reused in the container between the check and the kill: the new process survives, the log says "skipped: PID reused"', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 1, mib: 50_000 }],
      title: 'sglang::scheduler_TP1',
    });
    const id = await rig.newIncident('ct129');
    const inventory = asFleetuser();
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps({ inventory, executor: ex }));
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(req?.step.targets.map((t) => [t.hostPid, t.startTimeTicks])).toEqual([[h.hostPid, h.startTime]]);
    expect(
      (await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'approved', now: Date.now() })).ok,
    ).toBe(true);

    let newcomer: FleetProcess | null = null;
    const executor = hooked(ex, 'host', 'KILL', async () => {
      newcomer = await reuse(h, 1);
    });
    await runDecisionJob(
      { kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' },
      rig.deps({ inventory, executor }),
    );
    const n = newcomer as FleetProcess | null;
    if (n === null) throw new Error('the signal command never ran');
    expect([n.hostPid, n.containerPid]).toEqual([h.hostPid, h.containerPid]);
    expect(n.startTime).not.toBe(h.startTime);

    expect(procStart(n.hostPid)).toBe(n.startTime);
    expect(signalsOf(n)).toEqual([]);
    const ev = await rig.events(id);
    const kill = ofType(ev, 'signalled').filter((s) => s.signal === 'KILL');
    expect(kill.map((s) => [s.hostPid, s.startTimeTicks, s.result])).toEqual([[h.hostPid, h.startTime, 'skipped']]);
    expect(kill[0]?.reason).toMatch(/^PID reused/);
    expect(kill[0]?.check).toBe('pidfd');
    // The signal command did run on the host (this is the check at the moment of the kill, not an earlier one).
    expect(
      ofType(ev, 'command')
        .filter((c) => c.role === 'kill')
        .map((c) => [c.on, c.record.machineId, c.record.code]),
    ).toEqual([['host', 'kpro5', 0]]);
  });

  it('PID reused in the container between the plan and the kill: the new process survives, the log says "skipped: PID reused"', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 2, mib: 50_000 }],
      title: 'sglang::scheduler_TP2',
    });
    const id = await rig.newIncident('ct129');
    const deps = rig.deps({ inventory: asFleetuser(), executor: ex });
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, deps);
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(req?.step.targets.map((t) => t.hostPid)).toEqual([h.hostPid]);

    const n = await reuse(h, 2);
    expect(
      (await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'approved', now: Date.now() })).ok,
    ).toBe(true);
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' }, deps);

    expect(procStart(n.hostPid)).toBe(n.startTime);
    expect(signalsOf(n)).toEqual([]);
    const kill = ofType(await rig.events(id), 'signalled').filter((s) => s.signal === 'KILL');
    expect(kill.map((s) => [s.hostPid, s.result])).toEqual([[h.hostPid, 'skipped']]);
    expect(kill[0]?.reason).toMatch(/^PID reused/);
  });
});

describe('tier 1 inside the container', () => {
  it('container PID reused between the check and the SIGTERM: the new process gets nothing, the log says "skipped: PID reused"', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 3, mib: 30_000 }],
      title: 'sglang::scheduler_TP3',
    });
    const id = await rig.newIncident('ct129');
    let newcomer: FleetProcess | null = null;
    const executor = hooked(ex, 'container', 'TERM', async () => {
      newcomer = await reuse(h, 3);
    });
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps({ executor }));
    const n = newcomer as FleetProcess | null;
    if (n === null) throw new Error('the signal command never ran');
    expect([n.hostPid, n.containerPid]).toEqual([h.hostPid, h.containerPid]);

    expect(procStart(n.hostPid)).toBe(n.startTime);
    expect(signalsOf(n)).toEqual([]);
    const ev = await rig.events(id);
    const term = ofType(ev, 'signalled').filter((s) => s.signal === 'TERM');
    expect(term.map((s) => [s.containerPid, s.startTimeTicks, s.result])).toEqual([
      [h.containerPid, h.startTime, 'skipped'],
    ]);
    expect(term[0]?.reason).toMatch(/^PID reused/);
    expect(term[0]?.check).toBe('pidfd');
    expect(ofType(ev, 'signalled').filter((s) => s.result === 'sent')).toEqual([]);
  });
});
