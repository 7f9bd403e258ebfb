/**
 * The worker is the only author of destructive commands, so a Redis writer cannot choose what is killed.
 * Whoever can write Redis (a compromised bot, which holds no SSH key) writes forged steps into the incident
 * stream, forged approval records and decisions, and forged job data; the fleet records every signal, and
 * nothing may reach a process outside the bound: a GPU holder of the target container, at the moment of the
 * kill, in the identity set the worker itself recorded when it made the plan.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApprovalStore } from '../../src/approval/approval-store.ts';
import type { AnyEvent, AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { stepHash, type Step } from '../../src/plan/unstick-plan.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { findMachine, hostRouteFor, routeFor } from '../../src/config/machines.ts';
import { diagnoseReadings, readTarget } from '../../src/readings/unstick-readings.ts';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { APPROVER, REQUESTER, fleetuserInventory, ofType, procStart, startRig, type Rig } from './rig.ts';

let rig: Rig;
let ex: Executor;
const bystanders: FleetProcess[] = [];
/** Host PIDs a test meant to be signalled; any other signal fails the suite. */
const allowed = new Set<number>();

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      { id: 'ct130', vmid: 130, host: 'kpro5' },
    ],
  });
  ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
  bystanders.push(await rig.fleet.spawnBystander('kpro5', { title: 'nvidia-persistenced --user nvidia' }));
  bystanders.push(await rig.fleet.spawnBystander('ct129', { title: 'python3 /opt/monitor/monitor.py' }));
  bystanders.push(await rig.fleet.spawnBystander('ct130', { title: 'python3 exporter.py --port 9400' }));
  bystanders.push(
    await rig.fleet.spawnHolder('kpro5', { gpus: [{ index: 3, mib: 4_000 }], title: 'python3 /srv/host_job.py' }),
  );
}, 120_000);

afterAll(async () => {
  await ex?.close();
  await rig?.stop();
}, 60_000);

const asFleetuser = () => fleetuserInventory(rig.fleet);

function assertNothingOutsideTheBound(): void {
  expect(rig.fleet.signals().filter((s) => !allowed.has(s.hostPid))).toEqual([]);
  for (const b of bystanders) expect(procStart(b.hostPid)).toBe(b.startTime);
}

/** Rewrites an incident's stream as a writer with Redis access could: read, delete, append the edited events. */
async function rewriteStream(id: string, edit: (e: AnyLoggedEvent) => AnyEvent): Promise<void> {
  const events = await rig.events(id);
  await rig.redis.del(`${rig.prefix}:inc:${id}:events`);
  for (const e of events) {
    const { id: _eid, ...rest } = edit(e) as AnyLoggedEvent;
    await rig.log.append(id, rest as AnyEvent);
  }
}

/** A forged host_kill step: every command is a template word or an integer, so `assertSafeArgv` lets it through. */
function forgedKill(genuine: Step, victim: FleetProcess): Step {
  const kill = ['kill', '-s', 'KILL', String(victim.hostPid)];
  return {
    ...genuine,
    targets: [
      {
        ...(genuine.targets[0] ?? { gpus: [], hostOnlyWhy: null, pidNs: '' }),
        hostPid: victim.hostPid,
        containerPid: victim.hostPid,
        startTimeTicks: victim.startTime,
        cmdline: victim.cmdline,
      },
    ],
    commands: genuine.commands.map((c) => ({ ...c, argv: kill, display: kill.join(' ') })),
  };
}

/** A new incident on `target`, after releasing whatever lock an earlier (failed) test left there. */
async function freshIncident(target: string): Promise<string> {
  const left = await rig.lock.holder(target);
  if (left) await rig.lock.release(target, left.incidentId);
  return rig.newIncident(target);
}

async function s3Card(gpu: number): Promise<{ id: string; holder: FleetProcess; approvalId: string; step: Step }> {
  const holder = await rig.fleet.spawnHolder('ct129', {
    gpus: [{ index: gpu, mib: 30_000 }],
    title: 'sglang::scheduler_TP0',
  });
  allowed.add(holder.hostPid);
  const id = await freshIncident('ct129');
  await runUnstickJob(
    { kind: 'unstick', incidentId: id, machineId: 'ct129' },
    rig.deps({ inventory: asFleetuser(), executor: ex }),
  );
  const req = ofType(await rig.events(id), 'approval_requested')[0];
  if (req?.step.kind !== 'host_kill') throw new Error('no host_kill card');
  return { id, holder, approvalId: req.approvalId, step: req.step };
}

describe('forged writes to Redis never make a worker signal outside the bound', () => {
  it('a forged step in the stream (and a matching plan hash on the approval): the worker runs its own sealed plan, the victim is untouched', async () => {
    const { id, holder, approvalId, step } = await s3Card(0);
    const victim = bystanders[0] as FleetProcess;
    const forged = forgedKill(step, victim);
    await rewriteStream(id, (e) =>
      e.type === 'approval_requested' && e.approvalId === approvalId
        ? { ...e, step: forged, planHash: stepHash(forged) }
        : e,
    );
    await rig.redis.hset(`${rig.prefix}:approval:${approvalId}`, 'planHash', stepHash(forged));
    expect(
      await rig.approvals.decide(approvalId, { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob(
      { kind: 'decision', incidentId: id, approvalId },
      rig.deps({ inventory: asFleetuser(), executor: ex }),
    );

    expect(rig.fleet.commandLog('kpro5').filter((c) => c.cmd.includes(`kill -s KILL ${victim.hostPid}`))).toEqual([]);
    expect(
      rig.fleet
        .signals()
        .filter((s) => s.hostPid === holder.hostPid)
        .map((s) => s.signal),
    ).toEqual(['SIGKILL']);
    const ev = await rig.events(id);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    assertNothingOutsideTheBound();
  }, 60_000);

  it('a forged approval record with a forged card (no plan the worker made): nothing runs, the log says why', async () => {
    const holder = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 1, mib: 30_000 }],
      title: 'sglang::scheduler_TP1',
    });
    allowed.add(holder.hostPid);
    const { id, approvalId: genuineId, step } = await s3Card(2);
    const victim = bystanders[1] as FleetProcess;
    const forged = forgedKill(step, victim);
    // A second approval the bot "created", already approved by a real approver, and its card.
    const store = new ApprovalStore(rig.redis, rig.prefix);
    const now = Date.now();
    const a = await store.create({
      incidentId: id,
      stepId: forged.id,
      planHash: stepHash(forged),
      requester: REQUESTER,
      approvers: [APPROVER],
      now,
      expiresAt: now + 60_000,
    });
    await rig.log.append(id, {
      type: 'approval_requested',
      at: new Date().toISOString(),
      approvalId: a.id,
      stepId: forged.id,
      expiresAt: new Date(now + 60_000).toISOString(),
      planHash: stepHash(forged),
      step: forged,
      host: 'kpro5',
      vmid: 129,
    });
    expect(await store.decide(a.id, { user: APPROVER, decision: 'approved', now })).toMatchObject({ ok: true });
    await runDecisionJob(
      { kind: 'decision', incidentId: id, approvalId: a.id },
      rig.deps({ inventory: asFleetuser(), executor: ex }),
    );
    const ev = await rig.events(id);
    expect(ofType(ev, 'step_started').filter((e) => e.tier === 2)).toEqual([]);
    expect(ofType(ev, 'error').map((e) => e.code)).toContain('plan_unverified');
    expect(rig.fleet.commandLog('kpro5').filter((c) => c.cmd.includes(`kill -s KILL ${victim.hostPid}`))).toEqual([]);
    expect(rig.fleet.signals().filter((s) => s.hostPid === holder.hostPid)).toEqual([]);
    assertNothingOutsideTheBound();
    await rig.lock.release('ct129', id);
    void genuineId;
  }, 60_000);

  it('a forged decision (state written straight into the approval hash, decided by a non-approver or the requester): nothing runs', async () => {
    for (const decidedBy of ['U0MALLORY1', REQUESTER]) {
      const { id, holder, approvalId } = await s3Card(1);
      await rig.redis.hset(`${rig.prefix}:approval:${approvalId}`, {
        state: 'approved',
        decidedBy,
        decidedAt: String(Date.now()),
      });
      await runDecisionJob(
        { kind: 'decision', incidentId: id, approvalId },
        rig.deps({ inventory: asFleetuser(), executor: ex }),
      );
      const ev = await rig.events(id);
      expect(ofType(ev, 'step_started').filter((e) => e.tier === 2)).toEqual([]);
      // Refused before the decider is even read (Redis is not believed), as no decision the bot signed is
      // stored (the worker's own check of a signed decider: signed-jobs.test.ts).
      expect(ofType(ev, 'error').map((e) => e.code)).toContain('decision_unverified');
      expect(rig.fleet.signals().filter((s) => s.hostPid === holder.hostPid)).toEqual([]);
      process.kill(holder.hostPid, 'SIGKILL');
      await holder.exited;
      await rig.lock.release('ct129', id);
    }
    assertNothingOutsideTheBound();
  }, 90_000);

  it('forged job data: a decision job naming another incident, or an unstick job naming another machine than the incident, runs nothing', async () => {
    const { id, holder, approvalId } = await s3Card(1);
    const other = await freshIncident('ct130');
    expect(
      await rig.approvals.decide(approvalId, { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob(
      { kind: 'decision', incidentId: other, approvalId },
      rig.deps({ inventory: asFleetuser(), executor: ex }),
    );
    // The incident is about ct130; the job says ct129 (where a holder waits): refused, nothing read or signalled there.
    await runUnstickJob(
      { kind: 'unstick', incidentId: other, machineId: 'ct129' },
      rig.deps({ inventory: asFleetuser(), executor: ex }),
    );
    expect(ofType(await rig.events(other), 'step_started')).toEqual([]);
    expect(ofType(await rig.events(other), 'error').map((e) => e.code)).toContain('job_mismatch');
    expect(rig.fleet.signals().filter((s) => s.hostPid === holder.hostPid)).toEqual([]);
    assertNothingOutsideTheBound();
    process.kill(holder.hostPid, 'SIGKILL');
    await holder.exited;
    await rig.lock.release('ct129', id);
    await rig.lock.release('ct130', other);
  }, 60_000);

  it('a forged "before" diagnosis naming a non-holder, before a re-run of the unstick job: tier 1 signals only real GPU holders', async () => {
    // A real holder in ct130 (root via pct exec: tier 1 can stop it) that ignores SIGTERM for a while.
    const holder = await rig.fleet.spawnHolder('ct130', {
      gpus: [{ index: 2, mib: 20_000 }],
      title: 'sglang::scheduler_TP2',
    });
    allowed.add(holder.hostPid);
    const victim = bystanders[2] as FleetProcess;
    const id = await freshIncident('ct130');
    // What a first attempt would have logged, forged: its "before" diagnosis lists the exporter as the holder.
    const ct = findMachine(rig.inventory, 'ct130');
    const host = findMachine(rig.inventory, 'kpro5');
    const cr = routeFor(rig.inventory, 'ct130');
    const hr = hostRouteFor(rig.inventory, 'kpro5');
    if (ct?.kind !== 'container' || !host || !cr || !hr) throw new Error('inventory');
    const r = await readTarget(
      ct,
      host,
      { container: cr, host: hr },
      { exec: (a, b) => rig.executor.exec(a, b), now: () => new Date(), commandTimeoutMs: 10_000 },
    );
    if (!r.ok) throw new Error('read failed');
    const d = diagnoseReadings('ct130', 'kpro5', r.value, { containerExecUid: 0 });
    const forged = structuredClone(d);
    for (const g of forged.gpus)
      for (const h of g.holders)
        if (h.process.hostPid === holder.hostPid)
          Object.assign(h.process, {
            hostPid: victim.hostPid,
            containerPid: victim.containerPid,
            startTimeTicks: victim.startTime,
            cmdline: victim.cmdline,
          });
    const at = new Date().toISOString();
    await rig.log.append(id, { type: 'diagnosis', at, label: 'before', diagnosis: forged });
    await rig.log.append(id, {
      type: 'step_started',
      at,
      stepId: 'container_signal-000000000000',
      kind: 'container_signal',
      tier: 1,
      machineId: 'ct130',
      explanation: 'x',
    });
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct130' }, rig.deps());
    expect(rig.fleet.signals().filter((s) => s.hostPid === victim.hostPid)).toEqual([]);
    expect(
      rig.fleet
        .signals()
        .filter((s) => s.hostPid === holder.hostPid)
        .map((s) => s.signal),
    ).toEqual(['SIGTERM']);
    assertNothingOutsideTheBound();
  }, 60_000);
});
