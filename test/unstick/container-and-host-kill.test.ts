/**
 * The unstick runners on the test fleet: S2 (tier 1 from the container), S3 (container cannot,
 * host kill after a second person's approval), S7 (bystanders never signalled), PID reuse
 * between plan and approval, and a destructive step that never runs twice.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import { hostRouteFor, routeFor } from '../../src/config/machines.ts';
import { recheckTarget } from '../../src/gpu/holders.ts';
import { findMachine } from '../../src/config/machines.ts';
import { planUnstick } from '../../src/plan/unstick-plan.ts';
import { diagnoseReadings, readProcsOn, readTarget } from '../../src/readings/unstick-readings.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { isSignalCommand } from '../../src/agent-grammar/templates/signal.ts';
import {
  APPROVER,
  REQUESTER,
  TIMING,
  inventoryOf,
  ofType,
  procStart,
  signalTail,
  startDeviceMonitor,
  startRig,
  type DeviceMonitor,
  type Rig,
} from './rig.ts';

let rig: Rig;
let monitor: DeviceMonitor;
const bystanders: FleetProcess[] = [];
/** Host PIDs a test meant to be signalled; any other signal fails the suite. */
const targets = new Set<number>();

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 8 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      { id: 'ct130', vmid: 130, host: 'kpro5' },
    ],
  });
  // S7: a monitor with the device nodes open (real python3), a python3 bystander, another
  // container's GPU job on the same host, and the host's own GPU job and daemon.
  monitor = await startDeviceMonitor(rig.fleet, 'ct129');
  bystanders.push(await rig.fleet.spawnBystander('ct129', { title: 'python3 /opt/monitor/monitor.py' }));
  bystanders.push(
    await rig.fleet.spawnHolder('ct130', { gpus: [{ index: 5, mib: 40_211 }], title: 'python3 train.py --epochs 3' }),
  );
  bystanders.push(
    await rig.fleet.spawnHolder('kpro5', { gpus: [{ index: 6, mib: 2_048 }], title: 'python3 /srv/host_job.py' }),
  );
  bystanders.push(await rig.fleet.spawnBystander('kpro5', { title: 'nvidia-persistenced --user nvidia' }));
});

afterAll(async () => {
  monitor?.stop();
  await rig?.stop();
});

function assertOnlyTargetsSignalled(): void {
  const stray = rig.fleet.signals().filter((s) => !targets.has(s.hostPid));
  expect(stray).toEqual([]);
  for (const b of bystanders) expect(procStart(b.hostPid)).toBe(b.startTime);
  expect(monitor.alive()).toBe(true);
}

function signalsOf(p: FleetProcess): string[] {
  return rig.fleet
    .signals()
    .filter((s) => s.hostPid === p.hostPid)
    .map((s) => s.signal);
}

describe('S2 + S7: holders visible in the container', () => {
  it('TERMs exactly the holders from inside the container, KILLs the one that ignores TERM, memory back to 0, Recovered, no approval', async () => {
    const tp0 = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 96_413 }],
      title: 'sglang::scheduler_TP0',
    });
    const tp2 = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 2, mib: 96_417 }],
      title: 'sglang::scheduler_TP2',
      ignoreTerm: true,
      dieDelayMs: 1500,
    });
    targets.add(tp0.hostPid).add(tp2.hostPid);
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());

    expect(signalsOf(tp0)).toEqual(['SIGTERM']);
    expect(signalsOf(tp2)).toEqual(['SIGTERM', 'SIGKILL']);
    // Sent from inside the container's namespace (a sender PID the container sees), not from the host.
    const term = rig.fleet.signals().find((s) => s.hostPid === tp0.hostPid);
    expect(term?.by).not.toBe(0);
    const mem = rig.fleet.gpuMemory('kpro5');
    expect(mem[0]?.usedMiB).toBe(0);
    expect(mem[2]?.usedMiB).toBe(0);
    expect(mem[5]?.usedMiB).toBe(40_211);

    const ev = await rig.events(id);
    const types = ev.map((e) => e.type);
    expect(types[0]).toBe('started');
    expect(types).not.toContain('approval_requested');
    expect(ofType(ev, 'snapshot').map((s) => `${s.label}:${s.snapshot.machineId}`)).toEqual([
      'before:ct129',
      'before:kpro5',
      'after:ct129',
      'after:kpro5',
    ]);
    const before = ofType(ev, 'diagnosis')[0]?.diagnosis;
    expect(before?.gpus.filter((g) => g.kind === 'held_in_container').map((g) => g.index)).toEqual([0, 2]);
    expect(before?.deviceOnly.map((d) => d.containerPid)).toContain(monitor.containerPid);
    const cmds = ofType(ev, 'command');
    const termCmd = cmds.find((c) => c.role === 'term');
    expect(termCmd?.on).toBe('container');
    expect(termCmd?.record.machineId).toBe('ct129');
    const byHostPid = [tp0, tp2]
      .sort((a, b) => a.hostPid - b.hostPid)
      .map((p) => ({ pid: p.containerPid ?? 0, start: p.startTime }));
    expect(termCmd?.record.command).toMatch(new RegExp(signalTail('container', 'TERM', byHostPid)));
    const killCmd = cmds.find((c) => c.role === 'kill');
    expect(killCmd?.record.command).toMatch(
      new RegExp(signalTail('container', 'KILL', [{ pid: tp2.containerPid ?? 0, start: tp2.startTime }])),
    );
    for (const c of cmds) expect(typeof c.record.durationMs).toBe('number');
    expect(cmds.every((c) => c.record.code !== null)).toBe(true);
    const sig = ofType(ev, 'signalled');
    expect(sig.map((s) => `${s.signal}:${s.hostPid}:${s.result}`).sort()).toEqual(
      [`TERM:${tp0.hostPid}:sent`, `TERM:${tp2.hostPid}:sent`, `KILL:${tp2.hostPid}:sent`].sort(),
    );
    expect(ofType(ev, 'step_finished')[0]?.outcome).toBe('done');
    expect(ofType(ev, 'verdict')[0]?.verdict.kind).toBe('recovered');
    expect(ofType(ev, 'verdict')[0]?.verdict.totalFreedMiB).toBe(96_413 + 96_417);
    expect(types.at(-1)).toBe('finished');
    expect(await rig.lock.holder('ct129')).toBeNull();
    assertOnlyTargetsSignalled();
  });
});

describe('a destructive step never runs twice', () => {
  it('a step already claimed by a worker that died is reported interrupted and sends nothing', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 3, mib: 10_000 }],
      title: 'sglang::scheduler_TP3',
      ignoreTerm: true,
    });
    targets.add(h.hostPid);
    const id = await rig.newIncident('ct129');
    // The plan a worker would make for this incident right now; a dead worker claimed its step.
    const d = rig.deps();
    const ct = findMachine(rig.inventory, 'ct129');
    const host = findMachine(rig.inventory, 'kpro5');
    const cr = routeFor(rig.inventory, 'ct129');
    const hr = hostRouteFor(rig.inventory, 'kpro5');
    if (ct?.kind !== 'container' || !host || !cr || !hr) throw new Error('inventory');
    const r = await readTarget(
      ct,
      host,
      { container: cr, host: hr },
      { exec: (a, b) => rig.executor.exec(a, b), now: d.now, commandTimeoutMs: 10_000 },
    );
    if (!r.ok) throw new Error('read failed');
    const plan = planUnstick(diagnoseReadings('ct129', 'kpro5', r.value, { containerExecUid: 0 }), {
      incidentId: id,
      vmid: 129,
      ...TIMING,
    });
    const step = plan.steps[0];
    expect(step?.kind).toBe('container_signal');
    expect(await rig.steps.claimStep(id, step?.id ?? '', 'w-dead', Date.now())).toBe(true);

    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, d);
    const ev = await rig.events(id);
    expect(ofType(ev, 'step_finished').map((s) => [s.stepId, s.outcome])).toEqual([[step?.id, 'interrupted']]);
    expect(ofType(ev, 'signalled')).toEqual([]);
    expect(ofType(ev, 'command').filter((c) => c.role === 'term' || c.role === 'kill')).toEqual([]);
    expect(signalsOf(h)).toEqual([]);
    expect(rig.fleet.gpuMemory('kpro5')[3]?.usedMiB).toBe(10_000);
    expect(ofType(ev, 'verdict')[0]?.verdict.kind).toBe('still_stuck');
  });

  it('a job re-run after its worker died mid-step finds the step claimed: one SIGTERM in total, no SIGKILL', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 4, mib: 12_000 }],
      title: 'sglang::scheduler_TP4',
      ignoreTerm: true,
    });
    targets.add(h.hostPid);
    const id = await rig.newIncident('ct129');
    // The first attempt's connection dies right after the SIGTERM went out.
    const dying: Executor = {
      async exec(route, spec) {
        const res = await rig.executor.exec(route, spec);
        if (isSignalCommand(spec.argv)) throw new Error('connection lost (worker died)');
        return res;
      },
      close: async () => undefined,
    };
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps({ executor: dying }));
    expect(signalsOf(h)).toEqual(['SIGTERM']);
    const first = await rig.events(id);
    expect(ofType(first, 'step_finished')[0]?.outcome).toBe('failed');
    // Nothing host-level is offered for processes the container step never finished with.
    expect(ofType(first, 'approval_requested')).toEqual([]);

    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    const ev = await rig.events(id);
    // The step already logged its end: the re-run does not start it again (no second step message).
    expect(ofType(ev, 'step_finished').map((s) => s.outcome)).toEqual(['failed']);
    expect(ofType(ev, 'step_started')).toHaveLength(1);
    expect(signalsOf(h)).toEqual(['SIGTERM']);
    expect(ofType(ev, 'finished')).toHaveLength(1);
  });

  it('a fresh incident clears what the two above left (and only that)', async () => {
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    const ev = await rig.events(id);
    expect(ofType(ev, 'verdict')[0]?.verdict.kind).toBe('recovered');
    expect(rig.fleet.gpuMemory('kpro5')[3]?.usedMiB).toBe(0);
    expect(rig.fleet.gpuMemory('kpro5')[4]?.usedMiB).toBe(0);
    assertOnlyTargetsSignalled();
  });
});

describe('S3: the container cannot stop the holder (non-root container login)', () => {
  let ex: Executor;
  const asFleetuser = () =>
    inventoryOf(rig.fleet, (inv) => {
      const c = inv.containers.find((x) => x.id === 'ct129');
      if (c) c.user = 'fleetuser';
    });
  beforeAll(() => {
    ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
  });
  afterAll(async () => {
    await ex.close();
  });

  it('tier 1 fails → approval card with the host PIDs → a different approver approves → host kill of exactly that PID → Recovered', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 1, mib: 50_000 }],
      title: 'sglang::scheduler_TP1',
    });
    targets.add(h.hostPid);
    const id = await rig.newIncident('ct129');
    const deps = rig.deps({ inventory: asFleetuser(), executor: ex });
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, deps);

    let ev = await rig.events(id);
    const refused = ofType(ev, 'signalled').find((s) => s.signal === 'TERM');
    expect(refused?.result).toBe('skipped');
    expect(refused?.reason).toMatch(/not permitted/i);
    expect(signalsOf(h)).toEqual([]);
    const req = ofType(ev, 'approval_requested')[0];
    expect(req?.step.kind).toBe('host_kill');
    expect(req?.host).toBe('kpro5');
    expect(req?.vmid).toBe(129);
    expect(req?.step.targets.map((t) => [t.hostPid, t.containerPid, t.startTimeTicks])).toEqual([
      [h.hostPid, h.containerPid, h.startTime],
    ]);
    expect(req?.step.targets[0]?.hostOnlyWhy).toMatch(/could not stop it/);
    expect(ofType(ev, 'finished')).toEqual([]);
    expect((await rig.lock.holder('ct129'))?.incidentId).toBe(id);
    const exp = rig.enqueued.find((e) => e.data.kind === 'expire' && e.data.approvalId === req?.approvalId);
    expect(exp).toMatchObject({ site: 'default', delayMs: 60_000, jobId: `expire-${req?.approvalId}` });

    const approvalId = req?.approvalId ?? '';
    expect(
      (await rig.approvals.decide(approvalId, { user: REQUESTER, decision: 'approved', now: Date.now() })).ok,
    ).toBe(false);
    expect((await rig.approvals.decide(approvalId, { user: APPROVER, decision: 'approved', now: Date.now() })).ok).toBe(
      true,
    );
    // What the bot's button handler appends before it enqueues the decision job.
    await rig.log.append(id, {
      type: 'approval_decided',
      at: new Date().toISOString(),
      approvalId,
      stepId: req?.stepId ?? '',
      decision: 'approved',
      by: APPROVER,
    });
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, deps);

    expect(signalsOf(h)).toEqual(['SIGKILL']);
    expect(rig.fleet.gpuMemory('kpro5')[1]?.usedMiB).toBe(0);
    ev = await rig.events(id);
    const hostKill = ofType(ev, 'command').filter((c) => c.role === 'kill');
    expect(hostKill.map((c) => [c.on, c.record.machineId])).toEqual([['host', 'kpro5']]);
    expect(hostKill[0]?.record.command).toMatch(
      new RegExp(signalTail('host', 'KILL', [{ pid: h.hostPid, start: h.startTime, ctPid: h.containerPid }])),
    );
    expect(hostKill[0]?.record.command).not.toContain('pct');
    // Asked of kpro5's agent for this incident under this approval (its envelopes must match both).
    expect(hostKill[0]?.record.command).toMatch(
      new RegExp(`^gpu-medic 1 \\d+ host signal host KILL \\d+ ${id} ${approvalId} `),
    );
    expect(
      ofType(ev, 'signalled')
        .filter((s) => s.result === 'sent')
        .map((s) => [s.signal, s.hostPid]),
    ).toEqual([['KILL', h.hostPid]]);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    expect(ev.at(-1)?.type).toBe('finished');
    expect(await rig.lock.holder('ct129')).toBeNull();
    assertOnlyTargetsSignalled();

    // The thread renders from these events: the refused container step, the card, the host kill, the verdict.
    const meta = await rig.log.meta(id);
    if (!meta) throw new Error('no meta');
    const text = renderUnstick(meta, ev)
      .map((v) => v.text)
      .join('\n');
    expect(text).toMatch(/Recovered/);
    expect(text).toMatch(new RegExp(`host KILL \\d+ ${h.hostPid} ${h.startTime} ${h.containerPid}`));
    // The EPERM is said as "not permitted" (as in the summary and /gpu history: one word for one fact), not
    // as a re-check refusal.
    expect(text).toMatch(new RegExp(`SIGTERM PID ${h.containerPid} \\(host PID ${h.hostPid}\\).*not permitted`));
    expect(text).toContain(`Approved by <@${APPROVER}>`);
  });

  it('an approved host kill already claimed by a worker that died is not run again', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 1, mib: 5_000 }],
      title: 'sglang::scheduler_TP1',
    });
    targets.add(h.hostPid);
    const id = await rig.newIncident('ct129');
    const deps = rig.deps({ inventory: asFleetuser(), executor: ex });
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, deps);
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(req?.step.kind).toBe('host_kill');
    expect(await rig.steps.claimStep(id, req?.stepId ?? '', 'w-dead', Date.now())).toBe(true);
    expect(
      await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' }, deps);
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' }, deps);
    const ev = await rig.events(id);
    expect(ofType(ev, 'step_finished').map((s) => s.outcome)).toEqual(['failed', 'interrupted']);
    expect(ofType(ev, 'command').filter((c) => c.role === 'kill' && c.on === 'host')).toEqual([]);
    expect(signalsOf(h)).toEqual([]);
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('still_stuck');
    process.kill(h.hostPid, 'SIGKILL');
    await h.exited;
  });

  it('a PID reused between plan and approval is skipped: the new process is not signalled', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 7, mib: 20_000 }],
      title: 'sglang::scheduler_TP7',
    });
    targets.add(h.hostPid);
    const id = await rig.newIncident('ct129');
    const deps = rig.deps({ inventory: asFleetuser(), executor: ex });
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, deps);
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(req?.step.targets.map((t) => t.hostPid)).toEqual([h.hostPid]);

    // Between the card and the click the target exits and its PID goes to a new process.
    process.kill(h.hostPid, 'SIGKILL');
    await h.exited;
    const reuse = respawnOnPid(h.hostPid);
    try {
      expect(
        await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'approved', now: Date.now() }),
      ).toMatchObject({ ok: true });
      await runDecisionJob({ kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' }, deps);
      const ev = await rig.events(id);
      const s = ofType(ev, 'signalled').filter((x) => x.signal === 'KILL');
      expect(s.map((x) => [x.hostPid, x.result])).toEqual([[h.hostPid, 'skipped']]);
      expect(ofType(ev, 'command').filter((c) => c.role === 'kill')).toEqual([]);
      expect(rig.fleet.commandLog('kpro5').some((c) => new RegExp(` host KILL \\d+ ${h.hostPid} `).test(c.cmd))).toBe(
        false,
      );
      if (reuse.pid === h.hostPid) {
        expect(s[0]?.reason).toMatch(/different process|start time/);
        expect(procStart(reuse.pid)).toBe(reuse.startTime);
      } else {
        // The PID could not be forced: the target is gone, or some other process of the machine took
        // its PID meanwhile; either is said, and nothing was signalled (above).
        expect(s[0]?.reason).toMatch(/exited|no longer|different process|start time/);
      }
    } finally {
      reuse.stop();
    }
    assertOnlyTargetsSignalled();
  });

  it('recheckTarget on real /proc readings refuses a changed start time', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 7, mib: 1_000 }],
      title: 'sglang::scheduler_TP7',
    });
    targets.add(h.hostPid);
    const hr = hostRouteFor(rig.inventory, 'kpro5');
    if (!hr) throw new Error('no host route');
    const read = await readProcsOn(hr, [h.hostPid], {
      exec: (a, b) => rig.executor.exec(a, b),
      now: () => new Date(),
      commandTimeoutMs: 10_000,
    });
    const reading = read?.readings[0];
    const ns = reading?.pidNs ?? '';
    const planned = {
      hostPid: h.hostPid,
      containerPid: h.containerPid ?? 0,
      startTimeTicks: h.startTime,
      cmdline: h.cmdline,
      pidNs: ns,
    };
    expect(
      recheckTarget(planned, { reading, view: 'host', targetPidNs: ns, gpuHostPids: new Set([h.hostPid]) }),
    ).toBeNull();
    expect(
      recheckTarget(
        { ...planned, startTimeTicks: h.startTime - 1 },
        { reading, view: 'host', targetPidNs: ns, gpuHostPids: new Set([h.hostPid]) },
      ),
    ).toBe('pid_reused');
    expect(
      recheckTarget(planned, { reading, view: 'host', targetPidNs: 'pid:[1]', gpuHostPids: new Set([h.hostPid]) }),
    ).toBe('left_namespace');
    expect(recheckTarget(planned, { reading, view: 'host', targetPidNs: ns, gpuHostPids: new Set() })).toBe(
      'no_gpu_memory',
    );
    process.kill(h.hostPid, 'SIGKILL');
    await h.exited;
  });
});

/**
 * Starts `sleep` on host PID `pid` if the kernel lets us (ns_last_pid, root in the initial PID
 * namespace); something else may take the PID first, so a few tries.
 */
function respawnOnPid(pid: number): { pid: number | null; startTime: number | null; stop(): void } {
  for (let i = 0; i < 20; i++) {
    try {
      writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
    } catch {
      break;
    }
    const c = spawn('sleep', ['600'], { stdio: 'ignore' });
    if (c.pid === pid) return { pid, startTime: procStart(pid), stop: () => c.kill('SIGKILL') };
    c.kill('SIGKILL');
  }
  return { pid: null, startTime: null, stop: () => undefined };
}
