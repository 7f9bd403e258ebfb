/**
 * Approvals that don't stall, on the test fleet with real SSH and Redis: the card schedules its
 * reminder (half its time to live), escalation (GPU_MEDIC_ESCALATE_AFTER_SEC) and expiry as
 * delayed jobs with fixed ids; a reminder is logged once however often its job runs; reminders and
 * escalations of a decided card do nothing and the process log says why; an escalation approver
 * can decide only from the escalation time, and the worker runs the step they approved.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDecisionJob, runEscalateJob, runRemindJob, runUnstickJob } from '../../workers/unstick.ts';
import { APPROVER, REQUESTER, TTL_MS, ofType, startRig, type Rig } from './rig.ts';

const ESCAL = 'U0ESCALAT1';
const AFTER_MS = 20_000;
let rig: Rig;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
});

afterAll(async () => {
  await rig?.stop();
});

const escalation = { approvers: [ESCAL, REQUESTER], afterMs: AFTER_MS };

/** A leak on GPU `gpu`: the unstick job asks for a host reset; returns the incident and its approval. */
let last: string | null = null;
async function pendingReset(gpu: number): Promise<{ id: string; approvalId: string }> {
  // Each test its own card: the earlier one's lock and leaks are let go.
  if (last !== null) await rig.lock.release('ct129', last);
  for (let g = 0; g < 4; g++) await rig.fleet.setLeak('kpro5', g, g === gpu ? 12_345 : 0);
  const id = await rig.newIncident('ct129');
  last = id;
  await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps({ escalation }));
  const req = ofType(await rig.events(id), 'approval_requested')[0];
  if (!req) throw new Error('no card');
  return { id, approvalId: req.approvalId };
}

describe('a pending card is not left to wait in silence', () => {
  it('schedules reminder at half its time, escalation after the delay and expiry, each under a fixed job id; the escalation group (without the requester) is frozen into the approval and the card', async () => {
    const { id, approvalId } = await pendingReset(1);
    const jobs = rig.enqueued.filter((e) => 'approvalId' in e.data && e.data.approvalId === approvalId);
    expect(jobs.map((j) => [j.data.kind, j.jobId, j.delayMs]).sort()).toEqual(
      [
        ['escalate', `escalate-${approvalId}`, AFTER_MS],
        ['expire', `expire-${approvalId}`, TTL_MS],
        ['remind', `remind-${approvalId}`, TTL_MS / 2],
      ].sort(),
    );
    const a = await rig.approvals.get(approvalId);
    expect(a?.escalation).toEqual({ approvers: [ESCAL], at: (a?.createdAt ?? 0) + AFTER_MS });
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(req?.escalation).toEqual({ approvers: [ESCAL], at: new Date((a?.createdAt ?? 0) + AFTER_MS).toISOString() });
    expect(req?.approvers).toEqual(a?.approvers);
  });

  it('the reminder is logged once, pinging the approvers, however often its job runs (a retry, a second worker)', async () => {
    const { id, approvalId } = await pendingReset(2);
    const job = { kind: 'remind' as const, incidentId: id, approvalId };
    rig.clockOffsetMs = TTL_MS / 2;
    try {
      await runRemindJob(job, rig.deps({ escalation }));
      await runRemindJob(job, rig.deps({ escalation }));
      await runRemindJob(job, rig.deps({ escalation, workerId: 'w-other' }));
    } finally {
      rig.clockOffsetMs = 0;
    }
    const reminded = ofType(await rig.events(id), 'approval_reminded');
    expect(reminded).toHaveLength(1);
    // Half the time is past the escalation delay (30 s > 20 s): the escalation group is pinged too.
    expect(reminded[0]?.pinged).toEqual([APPROVER, 'U0APPROVE2', ESCAL]);
    expect(rig.logText()).toMatch(/already reminded/);
    expect(ofType(await rig.events(id), 'finished')).toEqual([]);
  });

  it('a reminder or escalation for a decided card posts nothing and logs why', async () => {
    const { id, approvalId } = await pendingReset(3);
    expect(
      await rig.approvals.decide(approvalId, { user: APPROVER, decision: 'denied', now: Date.now() }),
    ).toMatchObject({ ok: true });
    const n = (await rig.events(id)).length;
    rig.clockOffsetMs = TTL_MS / 2;
    try {
      await runRemindJob({ kind: 'remind', incidentId: id, approvalId }, rig.deps({ escalation }));
      await runEscalateJob({ kind: 'escalate', incidentId: id, approvalId }, rig.deps({ escalation }));
    } finally {
      rig.clockOffsetMs = 0;
    }
    expect(await rig.events(id)).toHaveLength(n);
    expect(rig.logText()).toMatch(/reminder: the approval is denied, nothing to remind of/);
    expect(rig.logText()).toMatch(/escalation: the approval is denied, nothing to escalate/);
  });

  it('a reminder or escalation that fires after the card ran out of time posts nothing and logs why', async () => {
    const { id, approvalId } = await pendingReset(2);
    const n = (await rig.events(id)).length;
    rig.clockOffsetMs = TTL_MS;
    try {
      await runRemindJob({ kind: 'remind', incidentId: id, approvalId }, rig.deps({ escalation }));
      await runEscalateJob({ kind: 'escalate', incidentId: id, approvalId }, rig.deps({ escalation }));
    } finally {
      rig.clockOffsetMs = 0;
    }
    expect(await rig.events(id)).toHaveLength(n);
    expect(rig.logText()).toMatch(/reminder: the approval has run out of time/);
    expect(rig.logText()).toMatch(/escalation: the approval has run out of time/);
  });

  it('the escalation approver is refused before the escalation, pinged at it, and the step they approve then runs on the host', async () => {
    const { id, approvalId } = await pendingReset(0);
    const a = await rig.approvals.get(approvalId);
    const at = a?.escalation?.at ?? 0;
    expect(
      await rig.approvals.decide(approvalId, {
        user: ESCAL,
        decision: 'approved',
        now: at - 1,
        liveApprovers: [APPROVER],
        liveEscalation: [ESCAL],
      }),
    ).toMatchObject({
      ok: false,
      code: 'escalation_not_due',
    });
    rig.clockOffsetMs = AFTER_MS;
    try {
      await runEscalateJob({ kind: 'escalate', incidentId: id, approvalId }, rig.deps({ escalation }));
      await runEscalateJob({ kind: 'escalate', incidentId: id, approvalId }, rig.deps({ escalation }));
      const esc = ofType(await rig.events(id), 'approval_escalated');
      expect(esc.map((e) => e.pinged)).toEqual([[ESCAL]]);
      expect(
        await rig.approvals.decide(approvalId, {
          user: ESCAL,
          decision: 'approved',
          now: at,
          liveApprovers: [APPROVER],
          liveEscalation: [ESCAL],
        }),
      ).toMatchObject({ ok: true });
      await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, rig.deps({ escalation }));
    } finally {
      rig.clockOffsetMs = 0;
    }
    const ev = await rig.events(id);
    expect(ofType(ev, 'approval_refused')).toEqual([]);
    expect(ofType(ev, 'step_started').map((s) => s.kind)).toEqual(['host_reset']);
    expect(ofType(ev, 'verdict')[0]?.verdict.kind).toBe('recovered');
    expect(rig.fleet.gpuMemory('kpro5')[0]?.usedMiB).toBe(0);
  });

  it('the worker refuses an escalation approver whom its own live escalation list no longer names: nothing runs', async () => {
    const { id, approvalId } = await pendingReset(1);
    const at = (await rig.approvals.get(approvalId))?.escalation?.at ?? 0;
    expect(await rig.approvals.decide(approvalId, { user: ESCAL, decision: 'approved', now: at })).toMatchObject({
      ok: true,
    });
    rig.clockOffsetMs = AFTER_MS;
    try {
      await runDecisionJob(
        { kind: 'decision', incidentId: id, approvalId },
        rig.deps({ escalation: { approvers: [], afterMs: AFTER_MS } }),
      );
    } finally {
      rig.clockOffsetMs = 0;
    }
    const ev = await rig.events(id);
    expect(ofType(ev, 'approval_refused').map((e) => [e.by, e.reason])).toEqual([[ESCAL, 'not_approver']]);
    expect(ofType(ev, 'step_started')).toEqual([]);
    expect(rig.fleet.gpuMemory('kpro5')[1]?.usedMiB).toBe(12_345);
  });
});
