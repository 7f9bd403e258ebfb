/**
 * Two attempts of the same job never act at once, and a later one takes over a dead one. BullMQ
 * re-runs a job once its lock lapsed, whether the first attempt died or is only slow (a stalled
 * event loop). A later attempt never finishes the incident or releases the target lock while the
 * first is still running its step; when the first is gone, the later one finishes the approved
 * step itself, and no process is signalled twice. Real fleet, SSH and Redis (rig.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StepGuard } from '../../src/step-guard/step-guard.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { APPROVER, fleetuserInventory, ofType, startRig, type Rig } from './rig.ts';

let rig: Rig;
let ex: Executor;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
  ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
}, 120_000);

afterAll(async () => {
  await ex?.close();
  await rig?.stop();
}, 60_000);

const asFleetuser = () => fleetuserInventory(rig.fleet);

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function approvedCard(
  gpu: number,
): Promise<{ id: string; holder: FleetProcess; approvalId: string; stepId: string }> {
  const holder = await rig.fleet.spawnHolder('ct129', {
    gpus: [{ index: gpu, mib: 30_000 }],
    title: 'sglang::scheduler_TP0',
  });
  const left = await rig.lock.holder('ct129');
  if (left) await rig.lock.release('ct129', left.incidentId);
  const id = await rig.newIncident('ct129');
  await runUnstickJob(
    { kind: 'unstick', incidentId: id, machineId: 'ct129' },
    rig.deps({ inventory: asFleetuser(), executor: ex }),
  );
  const req = ofType(await rig.events(id), 'approval_requested')[0];
  if (req?.step.kind !== 'host_kill') throw new Error('no host_kill card');
  expect(
    await rig.approvals.decide(req.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() }),
  ).toMatchObject({ ok: true });
  return { id, holder, approvalId: req.approvalId, stepId: req.stepId };
}

const signalsOf = (p: FleetProcess) =>
  rig.fleet
    .signals()
    .filter((s) => s.hostPid === p.hostPid)
    .map((s) => s.signal);

describe('two attempts of one decision job', () => {
  it('the first is still running its step (held before its first host command) when the second starts: the second neither finishes nor releases until the first is done; one SIGKILL, one end', async () => {
    const { id, holder, approvalId, stepId } = await approvedCard(0);
    const jobId = `${id}-decision-${approvalId}`;
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let held = false;
    // Attempt 1's executor stops at the step's first command until the test lets it go (a slow host, a stalled loop).
    const slow: Executor = {
      async exec(route, spec) {
        if (!held && (await rig.steps.stepState(id, stepId)).state === 'claimed') {
          held = true;
          await gate;
        }
        return ex.exec(route, spec);
      },
      close: async () => undefined,
    };
    const job = { kind: 'decision' as const, incidentId: id, approvalId };
    const first = runDecisionJob(
      job,
      rig.deps({ inventory: asFleetuser(), executor: slow, workerId: `h:1:${jobId}:1`, jobId }),
    );
    await expect.poll(() => held, { timeout: 20_000 }).toBe(true);
    const second = runDecisionJob(
      job,
      rig.deps({ inventory: asFleetuser(), executor: ex, workerId: `h:2:${jobId}:2`, jobId }),
    );
    // Give the second attempt ample time to do whatever it would do.
    await sleep(3000);
    let ev = await rig.events(id);
    expect(ofType(ev, 'finished')).toEqual([]);
    expect(ofType(ev, 'step_finished').filter((s) => s.stepId === stepId)).toEqual([]);
    expect((await rig.lock.holder('ct129'))?.incidentId).toBe(id);
    release();
    await Promise.all([first, second]);
    ev = await rig.events(id);
    expect(signalsOf(holder)).toEqual(['SIGKILL']);
    expect(
      ofType(ev, 'step_finished')
        .filter((s) => s.stepId === stepId)
        .map((s) => s.outcome),
    ).toEqual(['done']);
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    // The end comes after the step's last word.
    const at = (t: string) => ev.findIndex((e) => e.type === t);
    expect(at('finished')).toBeGreaterThan(ev.findIndex((e) => e.type === 'step_finished' && e.stepId === stepId));
    expect(await rig.lock.holder('ct129')).toBeNull();
  }, 90_000);

  it('the first claimed the step and died before signalling: the second takes over the approved kill, once; Recovered', async () => {
    const { id, holder, approvalId, stepId } = await approvedCard(1);
    const jobId = `${id}-decision-${approvalId}`;
    const dead = `h:1:${jobId}:1`;
    // What a SIGKILLed attempt leaves: its claim of the step, its fence, no heartbeat.
    await rig.log.append(id, {
      type: 'step_started',
      at: new Date().toISOString(),
      stepId,
      kind: 'host_kill',
      tier: 2,
      machineId: 'kpro5',
      explanation: 'x',
    });
    expect(await rig.steps.claimStep(id, stepId, dead, Date.now())).toBe(true);
    await rig.redis.set(`${rig.prefix}:attempt:${id}:${jobId}`, dead, 'PX', 60_000);
    await runDecisionJob(
      { kind: 'decision', incidentId: id, approvalId },
      rig.deps({ inventory: asFleetuser(), executor: ex, workerId: `h:2:${jobId}:2`, jobId }),
    );
    const ev = await rig.events(id);
    expect(signalsOf(holder)).toEqual(['SIGKILL']);
    expect(
      ofType(ev, 'step_finished')
        .filter((s) => s.stepId === stepId)
        .map((s) => s.outcome),
    ).toEqual(['done']);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(await rig.lock.holder('ct129')).toBeNull();
  }, 60_000);

  it('the first had sent the kill and logged it, then died: the second sends nothing again and finishes', async () => {
    const { id, holder, approvalId, stepId } = await approvedCard(2);
    const jobId = `${id}-decision-${approvalId}`;
    const dead = `h:1:${jobId}:1`;
    await rig.log.append(id, {
      type: 'step_started',
      at: new Date().toISOString(),
      stepId,
      kind: 'host_kill',
      tier: 2,
      machineId: 'kpro5',
      explanation: 'x',
    });
    expect(await rig.steps.claimStep(id, stepId, dead, Date.now())).toBe(true);
    await rig.redis.set(`${rig.prefix}:attempt:${id}:${jobId}`, dead, 'PX', 60_000);
    // It sent the SIGKILL (the test does, as that attempt would have) and logged it.
    process.kill(holder.hostPid, 'SIGKILL');
    await holder.exited;
    const before = rig.fleet.signals().filter((s) => s.hostPid === holder.hostPid).length;
    await rig.log.append(id, {
      type: 'signalled',
      at: new Date().toISOString(),
      stepId,
      hostPid: holder.hostPid,
      containerPid: holder.containerPid ?? 0,
      signal: 'KILL',
      cmdline: holder.cmdline,
      result: 'sent',
      reason: null,
    });
    await runDecisionJob(
      { kind: 'decision', incidentId: id, approvalId },
      rig.deps({ inventory: asFleetuser(), executor: ex, workerId: `h:2:${jobId}:2`, jobId }),
    );
    const ev = await rig.events(id);
    expect(rig.fleet.signals().filter((s) => s.hostPid === holder.hostPid)).toHaveLength(before);
    expect(ofType(ev, 'command').filter((c) => c.role === 'kill')).toEqual([]);
    expect(ofType(ev, 'signalled').filter((s) => s.stepId === stepId && s.result === 'sent')).toHaveLength(1);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(await rig.lock.holder('ct129')).toBeNull();
  }, 60_000);

  it('the first stalls mid-step (no heartbeat) and wakes after the second took over: it runs nothing more and writes nothing after the end', async () => {
    const { id, holder, approvalId, stepId } = await approvedCard(3);
    const jobId = `${id}-decision-${approvalId}`;
    /** Attempt 1's view of Redis: its heartbeat stops once it stalls (what a blocked event loop does). */
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
        if (!guard.stalled && (await rig.steps.stepState(id, stepId)).state === 'claimed') {
          guard.stalled = true;
          await woken;
        }
        return ex.exec(route, spec);
      },
      close: async () => undefined,
    };
    const job = { kind: 'decision' as const, incidentId: id, approvalId };
    const first = runDecisionJob(
      job,
      rig.deps({
        inventory: asFleetuser(),
        executor: stall,
        steps: guard,
        workerId: `h:1:${jobId}:1`,
        jobId,
        aliveMs: 600,
      }),
    );
    await expect.poll(() => guard.stalled, { timeout: 20_000 }).toBe(true);
    await runDecisionJob(
      job,
      rig.deps({ inventory: asFleetuser(), executor: ex, workerId: `h:2:${jobId}:2`, jobId, aliveMs: 600 }),
    );
    let ev = await rig.events(id);
    expect(signalsOf(holder)).toEqual(['SIGKILL']);
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(await rig.lock.holder('ct129')).toBeNull();
    const n = ev.length;
    wake();
    await first;
    ev = await rig.events(id);
    // Woken, it found the fence taken: no command, no signal, not a line more in the incident.
    expect(signalsOf(holder)).toEqual(['SIGKILL']);
    expect(ev).toHaveLength(n);
    expect(ev.at(-1)?.type).toBe('finished');
    expect(rig.logText()).toMatch(/a later attempt of this job/);
  }, 90_000);
});
