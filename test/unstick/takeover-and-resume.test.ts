/**
 * Takeover and resume never aim at the wrong process, on the real fleet, SSH and Redis: a later attempt of a
 * job waits for a live earlier one at least as long as the longest step the settings allow; a resumed job
 * aims tier 1 only at processes whose container PID is what this attempt read; a superseded attempt that
 * throws inside a reset leaves persistence mode to be restored by whoever finishes the step.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { longestAttemptMs } from '../../src/plan/unstick-plan.ts';
import { StepGuard } from '../../src/step-guard/step-guard.ts';
import { diagnoseReadings, readTarget } from '../../src/readings/unstick-readings.ts';
import { persistenceMode } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { findMachine, hostRouteFor, routeFor } from '../../src/config/machines.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { APPROVER, TIMING, fleetuserInventory, ofType, procStart, startRig, type Rig } from './rig.ts';

let rig: Rig;

beforeAll(async () => {
  rig = await startRig({
    // Host GPU 3 has persistence mode on (a reset must switch it off and back on).
    hosts: [{ id: 'kpro5', gpus: Array.from({ length: 4 }, (_, i) => ({ persistence: i === 3 })) }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
}, 120_000);

afterAll(async () => {
  await rig?.stop();
}, 60_000);

async function freshIncident(): Promise<string> {
  for (const p of rig.fleet.processes())
    if (procStart(p.hostPid) === p.startTime && p.containerPid !== 1) await rig.fleet.endProcess(p);
  const left = await rig.lock.holder('ct129');
  if (left) await rig.lock.release('ct129', left.incidentId);
  return rig.newIncident('ct129');
}

const signalsOf = (p: FleetProcess) =>
  rig.fleet
    .signals()
    .filter((s) => s.id === p.id)
    .map((s) => s.signal);

describe('takeover waits at least the longest step the settings allow (finding 8)', () => {
  it('is longer than the release timeout plus grace at their largest (1,800 s and 300 s)', () => {
    const most = { graceMs: 300_000, releaseTimeoutMs: 1_800_000, pollIntervalMs: 60_000, commandTimeoutMs: 20_000 };
    expect(longestAttemptMs({ ...most, connectTimeoutMs: 8_000 })).toBeGreaterThan(
      most.releaseTimeoutMs + most.graceMs + most.pollIntervalMs,
    );
  });

  it('a live first attempt inside its step keeps the fence after 31 minutes of the second waiting (release timeout 1,800 s); one SIGKILL, one end', async () => {
    const id = await freshIncident();
    const holder = await rig.fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 30_000 }], title: 'python3 a.py' });
    const inventory = fleetuserInventory(rig.fleet);
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps({ inventory }));
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    if (req?.step.kind !== 'host_kill') throw new Error('no host_kill card');
    expect(
      await rig.approvals.decide(req.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    const jobId = `${id}-decision-${req.approvalId}`;
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let held = false;
    const slow: Executor = {
      async exec(route, spec) {
        if (!held && (await rig.steps.stepState(id, req.stepId)).state === 'claimed') {
          held = true;
          await gate;
        }
        return rig.executor.exec(route, spec);
      },
      close: async () => undefined,
    };
    const job = { kind: 'decision' as const, incidentId: id, approvalId: req.approvalId };
    const long = { ...TIMING, releaseTimeoutMs: 1_800_000, graceMs: 300_000 };
    const first = runDecisionJob(
      job,
      rig.deps({ inventory, executor: slow, workerId: `h:1:${jobId}:1`, jobId, timing: long }),
    );
    await expect.poll(() => held, { timeout: 20_000 }).toBe(true);
    /** The second attempt's view of the fence: how often it looked. */
    class Counting extends StepGuard {
      looks = 0;
      override async fenceHolder(incidentId: string, j: string): Promise<string | null> {
        this.looks++;
        return super.fenceHolder(incidentId, j);
      }
    }
    const guard = new Counting(rig.redis, rig.prefix);
    // Its clock runs 31 minutes ahead after its first look: past the old fixed 30-minute wait.
    let reads = 0;
    const second = runDecisionJob(
      job,
      rig.deps({
        inventory,
        steps: guard,
        workerId: `h:2:${jobId}:2`,
        jobId,
        timing: long,
        now: () => new Date(Date.now() + (reads++ > 0 ? 31 * 60_000 : 0)),
      }),
    );
    await expect.poll(() => guard.looks, { timeout: 20_000 }).toBeGreaterThanOrEqual(3);
    expect(await rig.steps.fenceHolder(id, jobId)).toBe(`h:1:${jobId}:1`);
    expect(ofType(await rig.events(id), 'finished')).toEqual([]);
    release();
    await Promise.all([first, second]);
    const ev = await rig.events(id);
    expect(signalsOf(holder)).toEqual(['SIGKILL']);
    expect(
      ofType(ev, 'step_finished')
        .filter((s) => s.stepId === req.stepId)
        .map((s) => s.outcome),
    ).toEqual(['done']);
    expect(ofType(ev, 'finished')).toHaveLength(1);
  }, 90_000);
});

describe('a resumed job matches the container PID too (finding 7)', () => {
  it('a stored first diagnosis whose holder names another container PID: tier 1 is aimed at no process but what this attempt read', async () => {
    const id = await freshIncident();
    const holder = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 1, mib: 20_000 }],
      title: 'python3 job.py',
    });
    const bystander = await rig.fleet.spawnBystander('ct129', { title: 'python3 /srv/notebook.py' });
    // The first attempt's record as Redis holds it: its before diagnosis (rewritten so that the
    // holder's container PID is the bystander's) and the start of its container step.
    const container = findMachine(rig.inventory, 'ct129');
    const host = findMachine(rig.inventory, 'kpro5');
    const routes = { container: routeFor(rig.inventory, 'ct129'), host: hostRouteFor(rig.inventory, 'kpro5') };
    if (container?.kind !== 'container' || !host || !routes.container || !routes.host) throw new Error('no ct129');
    const r = await readTarget(
      container,
      host,
      { container: routes.container, host: routes.host },
      {
        exec: (route, spec) => rig.executor.exec(route, spec),
        now: () => new Date(),
        commandTimeoutMs: TIMING.commandTimeoutMs,
      },
    );
    if (!r.ok) throw new Error('read failed');
    const d = diagnoseReadings('ct129', 'kpro5', r.value, { containerExecUid: 0 });
    const forged = JSON.parse(JSON.stringify(d)) as typeof d;
    for (const g of forged.gpus)
      for (const h of g.holders)
        if (h.process.hostPid === holder.hostPid) h.process.containerPid = bystander.containerPid ?? 0;
    expect(JSON.stringify(forged)).toContain(`"containerPid":${bystander.containerPid}`);
    await rig.log.append(id, { type: 'diagnosis', at: new Date().toISOString(), label: 'before', diagnosis: forged });
    await rig.log.append(id, {
      type: 'step_started',
      at: new Date().toISOString(),
      stepId: 'container_signal-000000000000',
      kind: 'container_signal',
      tier: 1,
      machineId: 'ct129',
      explanation: 'x',
    });
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    const ev = await rig.events(id);
    const term = ofType(ev, 'command').filter((c) => c.role === 'term' && c.on === 'container');
    expect(term).toHaveLength(1);
    const words = term[0]?.record.command.split(' ') ?? [];
    expect(words.slice(-3)).toEqual([String(holder.containerPid), String(holder.startTime), '0']);
    expect(ofType(ev, 'signal_intent').flatMap((e) => e.targets.map((t) => t.containerPid))).toEqual([
      holder.containerPid,
    ]);
    expect(signalsOf(bystander)).toEqual([]);
    expect(signalsOf(holder)).toEqual(['SIGTERM']);
  }, 60_000);
});

/** A reset card for host GPU 3 (persistence on), approved; and the host's persistence mode of that GPU. */
async function approvedReset() {
  const id = await freshIncident();
  await rig.fleet.setLeak('kpro5', 3, 20_000);
  await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
  const req = ofType(await rig.events(id), 'approval_requested')[0];
  if (req?.step.kind !== 'host_reset') throw new Error('no host_reset card');
  const uuid = req.step.gpus[0]?.uuid ?? '?';
  expect(req.step.persistence).toEqual([{ uuid, on: true }]);
  expect(
    await rig.approvals.decide(req.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() }),
  ).toMatchObject({ ok: true });
  const host = hostRouteFor(rig.inventory, 'kpro5');
  if (!host) throw new Error('no kpro5');
  const mode = async () => (await rig.executor.exec(host, persistenceMode(uuid, { timeoutMs: 10_000 }))).stdout.trim();
  return { id, req, mode };
}

/**
 * Attempt 1 runs the approved reset until the command whose argv contains `at` has run, then
 * stalls there (its heartbeat stops) before it can log it; attempt 2 takes over and finishes.
 */
async function supersededAt(at: string) {
  const { id, req, mode } = await approvedReset();
  const jobId = `${id}-decision-${req.approvalId}`;
  class Stalling extends StepGuard {
    stalled = false;
    override async beat(attempt: string, ttlMs: number): Promise<void> {
      if (!this.stalled) await super.beat(attempt, ttlMs);
    }
  }
  const guard = new Stalling(rig.redis, rig.prefix);
  let wake: () => void = () => undefined;
  const woken = new Promise<void>((r) => {
    wake = r;
  });
  const stall: Executor = {
    async exec(route, spec) {
      const r = await rig.executor.exec(route, spec);
      if (!guard.stalled && spec.argv.join(' ').includes(at)) {
        guard.stalled = true;
        await woken;
      }
      return r;
    },
    close: async () => undefined,
  };
  const job = { kind: 'decision' as const, incidentId: id, approvalId: req.approvalId };
  const first = runDecisionJob(
    job,
    rig.deps({ executor: stall, steps: guard, workerId: `h:1:${jobId}:1`, jobId, aliveMs: 600 }),
  );
  await expect.poll(() => guard.stalled, { timeout: 20_000 }).toBe(true);
  const modeWhileStalled = await mode();
  await runDecisionJob(job, rig.deps({ workerId: `h:2:${jobId}:2`, jobId, aliveMs: 600 }));
  wake();
  await first;
  return { id, modeWhileStalled, modeAfter: await mode(), events: await rig.events(id) };
}

describe('a superseded reset restores the sealed persistence mode (finding 8)', () => {
  it('the first attempt switched persistence off and stalled before logging it; the second runs the reset and switches persistence back on, as the seal says it was', async () => {
    const r = await supersededAt('-pm 0');
    expect(r.modeWhileStalled).toBe('3, Disabled');
    expect(r.modeAfter).toBe('3, Enabled');
    expect(rig.fleet.gpuMemory('kpro5')[3]?.usedMiB).toBe(0);
    expect(ofType(r.events, 'command').filter((c) => c.role === 'persistence_on' && c.record.code === 0)).toHaveLength(
      1,
    );
    expect(ofType(r.events, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    expect(ofType(r.events, 'finished')).toHaveLength(1);
  }, 90_000);

  it('the first stalled right after its reset (persistence off logged): the second does not reset again and restores persistence', async () => {
    const r = await supersededAt('--gpu-reset');
    expect(r.modeWhileStalled).toBe('3, Disabled');
    expect(r.modeAfter).toBe('3, Enabled');
    expect(ofType(r.events, 'command').filter((c) => c.role === 'reset')).toEqual([]);
    expect(ofType(r.events, 'command').filter((c) => c.role === 'persistence_on' && c.record.code === 0)).toHaveLength(
      1,
    );
    expect(ofType(r.events, 'finished')).toHaveLength(1);
  }, 90_000);
});
