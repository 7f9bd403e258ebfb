/**
 * The blast-radius budget (a bad run cannot kill a whole fleet): at most N host-level destructive steps per
 * host per hour. Past it the card says so and is frozen to the admins; a card approved within the budget that
 * finds it spent when it is about to run is refused unless an admin approved it. Real fleet, SSH and Redis;
 * the budget is 1 here.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BlastBudget } from '../../src/approval/blast-budget.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { ADMIN, APPROVER, fleetuserInventory, ofType, startRig, type Rig } from './rig.ts';

let rig: Rig;
let ex: Executor;
let budget: BlastBudget;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      { id: 'ct131', vmid: 131, host: 'kpro5', ownAddress: true },
    ],
  });
  ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
  budget = new BlastBudget(rig.redis, rig.prefix, { limit: 1 });
}, 120_000);

afterAll(async () => {
  await ex?.close();
  await rig?.stop();
}, 60_000);

const deps = () =>
  rig.deps({
    inventory: fleetuserInventory(rig.fleet, ['ct129', 'ct131']),
    executor: ex,
    budget,
  });

async function card(target: string, gpu: number): Promise<{ id: string; holder: FleetProcess; approvalId: string }> {
  const holder = await rig.fleet.spawnHolder(target, {
    gpus: [{ index: gpu, mib: 20_000 }],
    title: 'sglang::scheduler_TP0',
  });
  const id = await rig.newIncident(target);
  await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: target }, deps());
  const req = ofType(await rig.events(id), 'approval_requested')[0];
  if (req?.step.kind !== 'host_kill') throw new Error('no host_kill card');
  return { id, holder, approvalId: req.approvalId };
}

const signalsOf = (p: FleetProcess) =>
  rig.fleet
    .signals()
    .filter((s) => s.hostPid === p.hostPid)
    .map((s) => s.signal);

describe('blast-radius budget: 1 host-level destructive step per host per hour', () => {
  it('the first kill runs; a card approved within the budget but run after it is refused; the next card says so and only an admin can approve it', async () => {
    const a = await card('ct129', 0);
    const c = await card('ct131', 1);
    // Both cards were posted within the budget: frozen to the approvers, no budget note.
    expect((await rig.approvals.get(c.approvalId))?.approvers).toEqual([APPROVER, 'U0APPROVE2']);

    expect(
      await rig.approvals.decide(a.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob({ kind: 'decision', incidentId: a.id, approvalId: a.approvalId }, deps());
    expect(signalsOf(a.holder)).toEqual(['SIGKILL']);
    expect(await budget.used('kpro5', Date.now())).toBe(1);

    // C was approved by an approver, but the budget is spent by the time it would run.
    expect(
      await rig.approvals.decide(c.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob({ kind: 'decision', incidentId: c.id, approvalId: c.approvalId }, deps());
    let ev = await rig.events(c.id);
    expect(signalsOf(c.holder)).toEqual([]);
    expect(ofType(ev, 'step_started').filter((s) => s.tier === 2)).toEqual([]);
    expect(ofType(ev, 'approval_refused').map((e) => [e.by, e.reason])).toEqual([[APPROVER, 'budget_exhausted']]);
    expect(ofType(ev, 'error').find((e) => e.code === 'budget_exhausted')?.message).toMatch(/only an admin/);
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(await budget.used('kpro5', Date.now())).toBe(1);

    // A new card on the same host: it says the budget is spent and only the admins may decide it.
    const b = await card('ct131', 1);
    ev = await rig.events(b.id);
    const req = ofType(ev, 'approval_requested')[0];
    expect(req?.step.explanation).toMatch(
      /Blast-radius budget: kpro5 already had 1 host-level destructive step\(s\) in the last hour \(limit 1\), so only an admin/,
    );
    expect((await rig.approvals.get(b.approvalId))?.approvers).toEqual([ADMIN]);
    const meta = await rig.log.meta(b.id);
    if (!meta) throw new Error('no meta');
    expect(
      renderUnstick(meta, ev)
        .map((v) => v.text)
        .join('\n'),
    ).toMatch(/only an admin/);
    expect(
      await rig.approvals.decide(b.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: false, code: 'not_approver' });
    expect(
      await rig.approvals.decide(b.approvalId, { user: ADMIN, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob({ kind: 'decision', incidentId: b.id, approvalId: b.approvalId }, deps());
    expect(signalsOf(b.holder)).toEqual(['SIGKILL']);
    expect(ofType(await rig.events(b.id), 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    expect(await budget.used('kpro5', Date.now())).toBe(2);
  }, 120_000);
});
