/**
 * Only what a person asked for, as the bot authenticated it, is acted on, whoever writes Redis. Each attack is
 * what a Redis writer with no secret can do (write meta, locks, jobs, approval hashes, streams,
 * delete keys), run on the real worker code, fleet, SSH and Redis; the fleet records every signal.
 * The rig's bot key signs what the bot would (rig.newIncident, rig.approvals.decide); nothing
 * else holds it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BlastBudget, BudgetMemory } from '../../src/approval/blast-budget.ts';
import { newKeyPair } from '../../src/auth/keys.ts';
import { botSigner } from '../../src/auth/signed-jobs.ts';
import type { AnyEvent, AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { runDecisionJob, runUnstickJob, type UnstickWorkerDeps } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { ADMIN, APPROVER, REQUESTER, TTL_MS, fleetuserInventory, ofType, startRig, type Rig, whereOf } from './rig.ts';

let rig: Rig;
let ex: Executor;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      { id: 'ct130', vmid: 130, host: 'kpro5' },
      { id: 'ct131', vmid: 131, host: 'kpro5', ownAddress: true },
    ],
  });
  ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
}, 120_000);

afterAll(async () => {
  await ex?.close();
  await rig?.stop();
}, 60_000);

const signalsOf = (p: FleetProcess): string[] =>
  rig.fleet
    .signals()
    .filter((s) => s.hostPid === p.hostPid)
    .map((s) => s.signal);

const hostDeps = (over: Partial<UnstickWorkerDeps> = {}) =>
  rig.deps({ inventory: fleetuserInventory(rig.fleet, ['ct129', 'ct131']), executor: ex, ...over });

async function freeLock(target: string): Promise<void> {
  const left = await rig.lock.holder(target);
  if (left) await rig.lock.release(target, left.incidentId);
}

async function done(p: FleetProcess): Promise<void> {
  try {
    process.kill(p.hostPid, 'SIGKILL');
  } catch {
    // already gone
  }
  await p.exited;
}

/** What a Redis writer does instead of a slash command: meta, lock, and the job, with no signature. */
async function forgedIncident(target: string, requester = REQUESTER): Promise<string> {
  await freeLock(target);
  const id = `inc_forged${Math.random().toString(36).slice(2, 10)}`;
  const createdAt = new Date().toISOString();
  await rig.log.create({
    id,
    kind: 'unstick',
    requester,
    channel: 'C0ONCALL01',
    targets: [target],
    text: `unstick ${target}`,
    reason: null,
    createdAt,
  });
  const got = await rig.lock.acquire(target, { incidentId: id, requester, since: createdAt }, 600_000);
  if (!got.ok) throw new Error('lock');
  return id;
}

/** A host_kill card on `target` (its container cannot stop the holder: fleetuser login). */
async function hostCard(
  target: 'ct129' | 'ct131',
  gpu: number,
  d: UnstickWorkerDeps = hostDeps(),
): Promise<{ id: string; holder: FleetProcess; approvalId: string }> {
  const holder = await rig.fleet.spawnHolder(target, {
    gpus: [{ index: gpu, mib: 20_000 }],
    title: 'sglang::scheduler_TP0',
  });
  await freeLock(target);
  const id = await rig.newIncident(target);
  await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: target }, d);
  const req = ofType(await rig.events(id), 'approval_requested')[0];
  if (req?.step.kind !== 'host_kill') throw new Error('no host_kill card');
  return { id, holder, approvalId: req.approvalId };
}

const errors = (ev: readonly AnyLoggedEvent[]) => ofType(ev, 'error').map((e) => e.code);

async function rewriteStream(id: string, keep: (e: AnyLoggedEvent) => boolean): Promise<void> {
  const events = await rig.events(id);
  await rig.redis.del(`${rig.prefix}:inc:${id}:events`);
  for (const e of events.filter(keep)) {
    const { id: _eid, ...rest } = e;
    await rig.log.append(id, rest as AnyEvent);
  }
}

describe('finding 0: a request the bot did not sign runs nothing', () => {
  it('meta, lock and unstick job written to Redis with no slash command: nothing signalled, the thread says why', async () => {
    const h = await rig.fleet.spawnHolder('ct130', { gpus: [{ index: 0, mib: 30_000 }], title: 'python3 train.py' });
    const id = await forgedIncident('ct130');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct130' }, rig.deps());
    expect(signalsOf(h)).toEqual([]);
    const ev = await rig.events(id);
    expect(ofType(ev, 'step_started')).toEqual([]);
    expect(errors(ev)).toContain('request_unverified');
    expect(ofType(ev, 'error').find((e) => e.code === 'request_unverified')?.message).toMatch(/not one the bot signed/);
    expect(rig.logText()).toMatch(/request_refused/);
    await done(h);
  }, 60_000);

  it('a request signed with another key, or the genuine signature moved to another incident: nothing signalled', async () => {
    const h = await rig.fleet.spawnHolder('ct130', { gpus: [{ index: 1, mib: 30_000 }], title: 'python3 train.py' });
    const mallory = botSigner(newKeyPair().privateKey);
    const id = await forgedIncident('ct130');
    await rig.redis.set(
      `${rig.prefix}:inc:${id}:request`,
      JSON.stringify(
        mallory.request(
          {
            incidentId: id,
            target: 'ct130',
            ...whereOf(rig.inventory, 'ct130'),
            requester: REQUESTER,
            channel: 'C0ONCALL01',
          },
          Date.now(),
        ),
      ),
    );
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct130' }, rig.deps());
    // A genuine request of one incident copied onto another.
    const genuine = rig.signer.request(
      {
        incidentId: 'inc_other',
        target: 'ct130',
        ...whereOf(rig.inventory, 'ct130'),
        requester: REQUESTER,
        channel: 'C0ONCALL01',
      },
      Date.now(),
    );
    const id2 = await forgedIncident('ct130');
    await rig.redis.set(`${rig.prefix}:inc:${id2}:request`, JSON.stringify(genuine));
    await runUnstickJob({ kind: 'unstick', incidentId: id2, machineId: 'ct130' }, rig.deps());
    expect(signalsOf(h)).toEqual([]);
    expect(errors(await rig.events(id))).toContain('request_unverified');
    expect(errors(await rig.events(id2))).toContain('request_unverified');
    await done(h);
  }, 60_000);

  it('a genuine request replayed after Redis was emptied of everything but it: the worker that ran it signals nothing again', async () => {
    const h1 = await rig.fleet.spawnHolder('ct130', { gpus: [{ index: 2, mib: 30_000 }], title: 'python3 train.py' });
    await freeLock('ct130');
    const id = await rig.newIncident('ct130');
    const d = rig.deps();
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct130' }, d);
    expect(signalsOf(h1)).toEqual(['SIGTERM']);
    const meta = await rig.redis.get(`${rig.prefix}:inc:${id}:meta`);
    const request = await rig.redis.get(`${rig.prefix}:inc:${id}:request`);
    // Everything the worker wrote is gone: the stream, the step records, the finish latch, the nonce.
    const keys = await rig.redis.keys(`${rig.prefix}:*`);
    await rig.redis.del(...keys);
    await rig.redis.set(`${rig.prefix}:inc:${id}:meta`, meta ?? '');
    await rig.redis.set(`${rig.prefix}:inc:${id}:request`, request ?? '');
    const h2 = await rig.fleet.spawnHolder('ct130', { gpus: [{ index: 3, mib: 30_000 }], title: 'python3 train.py' });
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct130' }, rig.deps());
    expect(signalsOf(h2)).toEqual([]);
    expect(rig.logText()).toMatch(/a signed request used before: nothing run/);
    await done(h1);
    await done(h2);
  }, 60_000);
});

describe('finding 1: a decision the bot did not sign runs nothing', () => {
  it('state=approved and decidedBy written into a pending approval (a real approver, an admin, a stranger): nothing runs', async () => {
    for (const decidedBy of [APPROVER, ADMIN, 'U0MALLORY1']) {
      const { id, holder, approvalId } = await hostCard('ct129', 0);
      await rig.redis.hset(`${rig.prefix}:approval:${approvalId}`, {
        state: 'approved',
        decidedBy,
        decidedAt: String(Date.now()),
      });
      await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, hostDeps());
      const ev = await rig.events(id);
      expect(signalsOf(holder)).toEqual([]);
      expect(ofType(ev, 'step_started').filter((e) => e.tier === 2)).toEqual([]);
      expect(errors(ev)).toContain('decision_unverified');
      expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('still_stuck');
      await done(holder);
    }
  }, 120_000);

  it("a genuine approval's signature moved to another card, or with its decision rewritten: nothing runs", async () => {
    const a = await hostCard('ct129', 1);
    const b = await hostCard('ct131', 1);
    expect(
      await rig.approvals.decide(a.approvalId, { user: APPROVER, decision: 'denied', now: Date.now() }),
    ).toMatchObject({
      ok: true,
    });
    const signed = await rig.redis.hmget(`${rig.prefix}:approval:${a.approvalId}`, 'decisionBody', 'decisionSig');
    // The denial of A, turned into an approval of A by editing the signed text; and copied onto B.
    await rig.redis.hset(`${rig.prefix}:approval:${a.approvalId}`, {
      state: 'approved',
      decisionBody: (signed[0] ?? '').replace('decision=denied', 'decision=approved'),
    });
    await rig.redis.hset(`${rig.prefix}:approval:${b.approvalId}`, {
      state: 'approved',
      decidedBy: APPROVER,
      decidedAt: String(Date.now()),
      decisionBody: signed[0] ?? '',
      decisionSig: signed[1] ?? '',
    });
    await runDecisionJob({ kind: 'decision', incidentId: a.id, approvalId: a.approvalId }, hostDeps());
    await runDecisionJob({ kind: 'decision', incidentId: b.id, approvalId: b.approvalId }, hostDeps());
    expect(signalsOf(a.holder)).toEqual([]);
    expect(signalsOf(b.holder)).toEqual([]);
    expect(errors(await rig.events(a.id))).toContain('decision_unverified');
    expect(errors(await rig.events(b.id))).toContain('decision_unverified');
    await done(a.holder);
    await done(b.holder);
  }, 120_000);

  it("a decision the bot signed for someone this worker's own lists refuse (the requester, a stranger): refused with the reason logged", async () => {
    for (const [decider, reason] of [
      [REQUESTER, 'self_approval'],
      ['U0MALLORY1', 'not_approver'],
    ] as const) {
      const { id, holder, approvalId } = await hostCard('ct129', 2);
      const seal = await rig.redis.hget(`${rig.prefix}:approval:${approvalId}`, 'sealBody');
      const { planDigest } = await import('../../src/plan/plan-seal.ts');
      const env = rig.signer.decision(
        {
          approvalId,
          incidentId: id,
          planDigest: planDigest({ body: seal ?? '' }),
          decision: 'approved',
          decider,
          channel: 'C0ONCALL01',
        },
        Date.now(),
      );
      await rig.redis.hset(`${rig.prefix}:approval:${approvalId}`, {
        state: 'approved',
        decidedBy: APPROVER,
        decidedAt: String(Date.now()),
        decisionBody: env.body,
        decisionSig: env.sig,
      });
      await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, hostDeps());
      const ev = await rig.events(id);
      expect(signalsOf(holder)).toEqual([]);
      // The signed decider is the one checked (Redis's decidedBy is not).
      expect(ofType(ev, 'approval_refused').map((e) => [e.by, e.reason])).toEqual([[decider, reason]]);
      await done(holder);
    }
    expect(rig.logText()).toMatch(/approved by someone who may not approve it/);
  }, 120_000);
});

describe('finding 2: the blast-radius budget is not lifted from Redis', () => {
  it('over the budget: a forged admin decidedBy runs nothing; the budget key deleted does not give back what this worker spent', async () => {
    const budget = new BlastBudget(rig.redis, rig.prefix, { limit: 1, memory: new BudgetMemory() });
    const d = () => hostDeps({ budget });
    await rig.redis.del(`${rig.prefix}:budget:kpro5`);
    const a = await hostCard('ct129', 3, d());
    const c = await hostCard('ct131', 3, d());
    await rig.approvals.decide(a.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() });
    await runDecisionJob({ kind: 'decision', incidentId: a.id, approvalId: a.approvalId }, d());
    expect(signalsOf(a.holder)).toEqual(['SIGKILL']);
    // The budget is spent; C was asked for within it and approved by an approver; the key is deleted.
    await rig.approvals.decide(c.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() });
    await rig.redis.del(`${rig.prefix}:budget:kpro5`);
    await runDecisionJob({ kind: 'decision', incidentId: c.id, approvalId: c.approvalId }, d());
    expect(signalsOf(c.holder)).toEqual([]);
    expect(errors(await rig.events(c.id))).toContain('budget_exhausted');
    // A card made past the budget (admin only), "approved by an admin" in Redis alone.
    const b = await hostCard('ct131', 0, d());
    expect((await rig.approvals.get(b.approvalId))?.approvers).toEqual([ADMIN]);
    await rig.redis.del(`${rig.prefix}:budget:kpro5`);
    await rig.redis.hset(`${rig.prefix}:approval:${b.approvalId}`, {
      state: 'approved',
      decidedBy: ADMIN,
      decidedAt: String(Date.now()),
    });
    await runDecisionJob({ kind: 'decision', incidentId: b.id, approvalId: b.approvalId }, d());
    expect(signalsOf(b.holder)).toEqual([]);
    expect(errors(await rig.events(b.id))).toContain('decision_unverified');
    await done(c.holder);
    await done(b.holder);
  }, 120_000);
});

describe('finding 3: a denied card of a finished incident cannot be replayed', () => {
  it('stream rewound without verdict/finished, latch deleted, approval flipped to approved an hour after expiry: nothing runs', async () => {
    const { id, holder, approvalId } = await hostCard('ct129', 1);
    await rig.approvals.decide(approvalId, { user: APPROVER, decision: 'denied', now: Date.now() });
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, hostDeps());
    expect(ofType(await rig.events(id), 'finished')).toHaveLength(1);
    const a = await rig.approvals.get(approvalId);
    await rewriteStream(id, (e) => e.type !== 'verdict' && e.type !== 'finished');
    await rig.redis.del(`${rig.prefix}:steps:${id}`);
    const stepKeys = await rig.redis.keys(`${rig.prefix}:*${id}*`);
    for (const k of stepKeys.filter((k) => !k.endsWith(':meta') && !k.endsWith(':events') && !k.endsWith(':request')))
      await rig.redis.del(k);
    await rig.redis.hset(`${rig.prefix}:approval:${approvalId}`, {
      state: 'approved',
      decidedBy: APPROVER,
      decidedAt: String((a?.expiresAt ?? 0) + 3600_000),
    });
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, hostDeps());
    expect(signalsOf(holder)).toEqual([]);
    expect(ofType(await rig.events(id), 'step_started').filter((e) => e.tier === 2)).toEqual([]);
    await done(holder);
  }, 120_000);
});

describe('finding 9: an approval has an age limit', () => {
  it('a decision job that waited past its expiry (workers down): refused, the thread says it lapsed and how to get a new card, nothing ran', async () => {
    const { id, holder, approvalId } = await hostCard('ct131', 2);
    await rig.approvals.decide(approvalId, { user: APPROVER, decision: 'approved', now: Date.now() });
    // The workers come back 10 minutes later (the signed decision is good for 5).
    rig.clockOffsetMs = 10 * 60_000;
    try {
      await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, hostDeps());
    } finally {
      rig.clockOffsetMs = 0;
    }
    const ev = await rig.events(id);
    expect(signalsOf(holder)).toEqual([]);
    expect(ofType(ev, 'step_started').filter((e) => e.tier === 2)).toEqual([]);
    expect(errors(ev)).toContain('approval_lapsed');
    const advice = JSON.stringify(ofType(ev, 'verdict').at(-1)?.verdict);
    expect(advice).toMatch(/lapsed/);
    expect(advice).toMatch(/\/gpu unstick ct131/);
    expect(ofType(ev, 'finished')).toHaveLength(1);
    await done(holder);
  }, 60_000);

  it('a request that waited past its expiry: refused, the thread says it lapsed, nothing signalled', async () => {
    const h = await rig.fleet.spawnHolder('ct130', { gpus: [{ index: 0, mib: 30_000 }], title: 'python3 train.py' });
    await freeLock('ct130');
    const id = await rig.newIncident('ct130');
    rig.clockOffsetMs = 10 * 60_000;
    try {
      await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct130' }, rig.deps());
    } finally {
      rig.clockOffsetMs = 0;
    }
    const ev = await rig.events(id);
    expect(signalsOf(h)).toEqual([]);
    expect(ofType(ev, 'error').find((e) => e.code === 'request_lapsed')?.message).toMatch(
      /lapsed.*Nothing was run.*\/gpu unstick ct130/,
    );
    expect(await rig.lock.holder('ct130')).toBeNull();
    await done(h);
  }, 60_000);

  it('a decision signed after the card expired (the seal carries the expiry): refused', async () => {
    const { id, holder, approvalId } = await hostCard('ct129', 0);
    const seal = await rig.redis.hget(`${rig.prefix}:approval:${approvalId}`, 'sealBody');
    const { planDigest } = await import('../../src/plan/plan-seal.ts');
    const late = Date.now() + TTL_MS + 1000;
    const env = rig.signer.decision(
      {
        approvalId,
        incidentId: id,
        planDigest: planDigest({ body: seal ?? '' }),
        decision: 'approved',
        decider: APPROVER,
        channel: 'C0ONCALL01',
      },
      late,
    );
    await rig.redis.hset(`${rig.prefix}:approval:${approvalId}`, {
      state: 'approved',
      decidedBy: APPROVER,
      decidedAt: String(late),
      decisionBody: env.body,
      decisionSig: env.sig,
    });
    rig.clockOffsetMs = TTL_MS + 2000;
    try {
      await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, hostDeps());
    } finally {
      rig.clockOffsetMs = 0;
    }
    expect(signalsOf(holder)).toEqual([]);
    expect(ofType(await rig.events(id), 'approval_refused').map((e) => e.reason)).toEqual(['approval_expired']);
    await done(holder);
  }, 60_000);
});

describe('key rotation: pending cards survive it', () => {
  it('a card signed with the previous worker key, approved with the previous bot key, runs once on a worker that moved to new keys and still lists the previous ones', async () => {
    const { id, holder, approvalId } = await hostCard('ct131', 3);
    await rig.approvals.decide(approvalId, { user: APPROVER, decision: 'approved', now: Date.now() });
    // Both keys rotated while the card was pending: the worker signs with a new key and accepts the previous ones.
    const newWorker = newKeyPair();
    const newBot = newKeyPair();
    const rotated = hostDeps({
      keys: {
        signing: newWorker.privateKey,
        workerPublic: [newWorker.publicKey, rig.workerKeys.publicKey],
        botPublic: [newBot.publicKey, rig.botKeys.publicKey],
      },
    });
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, rotated);
    expect(signalsOf(holder)).toEqual(['SIGKILL']);
    // Once the overlap is over (previous keys dropped), a card of the old keys is refused.
    const b = await hostCard('ct129', 3);
    await rig.approvals.decide(b.approvalId, { user: APPROVER, decision: 'approved', now: Date.now() });
    await runDecisionJob(
      { kind: 'decision', incidentId: b.id, approvalId: b.approvalId },
      hostDeps({
        keys: { signing: newWorker.privateKey, workerPublic: [newWorker.publicKey], botPublic: [newBot.publicKey] },
      }),
    );
    expect(signalsOf(b.holder)).toEqual([]);
    expect(errors(await rig.events(b.id))).toContain('plan_unverified');
    await done(b.holder);
  }, 90_000);
});
