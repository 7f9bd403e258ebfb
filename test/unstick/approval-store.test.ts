import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { canDecide, type ApprovalState } from '../../src/approval/approval-policy.ts';
import { ApprovalStore, type CreateApproval } from '../../src/approval/approval-store.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';

// Real time: the record's Redis TTL is counted from the real clock (a fixed date made the TTL check fail a day later).
const T0 = Date.now();
const TTL = 15 * 60 * 1000;
const input: CreateApproval = {
  incidentId: 'inc_20261130_092000_k3x9q2',
  stepId: 'host_kill-3f9a0c1b2d4e',
  planHash: 'a'.repeat(64),
  requester: 'U0REQUEST',
  approvers: ['U0APPROV1', 'U0APPROV2', 'U0REQUEST'],
  now: T0,
  expiresAt: T0 + TTL,
};

describe('ApprovalStore on real Redis', () => {
  let redis: Redis;
  let prefix: string;
  let store: ApprovalStore;
  beforeAll(() => {
    redis = newRedis();
  });
  afterAll(async () => {
    await redis.quit();
  });
  beforeEach(() => {
    prefix = randomPrefix();
    store = new ApprovalStore(redis, prefix);
  });
  afterEach(async () => {
    await removePrefix(redis, prefix);
  });

  it('creates a pending approval under an unguessable id and reads it back', async () => {
    const a = await store.create(input);
    expect(a.id).toMatch(/^apr_[A-Za-z0-9_-]{22}$/);
    expect((await store.create(input)).id).not.toBe(a.id);
    const { now: _now, ...fields } = input;
    expect(await store.get(a.id)).toEqual({
      ...fields,
      id: a.id,
      createdAt: T0,
      state: 'pending',
      decidedBy: null,
      decidedAt: null,
      seal: null,
      signedDecision: null,
    });
    const ttl = await redis.pttl(`${prefix}:approval:${a.id}`);
    expect(ttl).toBeGreaterThan(6 * 24 * 3600 * 1000);
  });

  it('first decision wins; a double click says who decided', async () => {
    const a = await store.create(input);
    const first = await store.decide(a.id, { user: 'U0APPROV1', decision: 'approved', now: T0 + 1000 });
    expect(first).toMatchObject({
      ok: true,
      approval: { state: 'approved', decidedBy: 'U0APPROV1', decidedAt: T0 + 1000 },
    });
    const again = await store.decide(a.id, { user: 'U0APPROV1', decision: 'approved', now: T0 + 1200 });
    expect(again).toMatchObject({
      ok: false,
      code: 'approval_decided',
      approval: { decidedBy: 'U0APPROV1', state: 'approved' },
    });
    const other = await store.decide(a.id, { user: 'U0APPROV2', decision: 'denied', now: T0 + 1500 });
    expect(other).toMatchObject({
      ok: false,
      code: 'approval_decided',
      approval: { decidedBy: 'U0APPROV1', decidedAt: T0 + 1000, state: 'approved' },
    });
  });

  it('refuses the requester and non-approvers, leaving it pending', async () => {
    const a = await store.create(input);
    expect(await store.decide(a.id, { user: 'U0REQUEST', decision: 'approved', now: T0 + 1 })).toMatchObject({
      ok: false,
      code: 'self_approval',
    });
    expect(await store.decide(a.id, { user: 'U0BYSTAND', decision: 'approved', now: T0 + 1 })).toMatchObject({
      ok: false,
      code: 'not_approver',
    });
    expect((await store.get(a.id))?.state).toBe('pending');
    expect(await store.decide(a.id, { user: 'U0APPROV2', decision: 'denied', now: T0 + 2 })).toMatchObject({
      ok: true,
      approval: { state: 'denied', decidedBy: 'U0APPROV2' },
    });
  });

  it('enforces expiry in the transition; expire() runs once and then nothing can be decided', async () => {
    const a = await store.create(input);
    expect(await store.expire(a.id, T0 + TTL - 1)).toMatchObject({ expired: false, reason: 'not_due' });
    expect(await store.decide(a.id, { user: 'U0APPROV1', decision: 'approved', now: T0 + TTL })).toMatchObject({
      ok: false,
      code: 'approval_expired',
    });
    expect(await store.expire(a.id, T0 + TTL)).toMatchObject({
      expired: true,
      approval: { state: 'expired', decidedAt: T0 + TTL },
    });
    expect(await store.expire(a.id, T0 + TTL + 5)).toMatchObject({ expired: false, reason: 'already_expired' });
    expect(await store.decide(a.id, { user: 'U0APPROV1', decision: 'approved', now: T0 + 5 })).toMatchObject({
      ok: false,
      code: 'approval_expired',
    });
  });

  it('expire() does not touch a decided approval', async () => {
    const a = await store.create(input);
    await store.decide(a.id, { user: 'U0APPROV1', decision: 'approved', now: T0 + 1 });
    expect(await store.expire(a.id, T0 + TTL)).toMatchObject({
      expired: false,
      reason: 'decided',
      approval: { state: 'approved' },
    });
  });

  it('refuses an approver frozen on the card but no longer on the live list, leaving it pending; one on both lists decides', async () => {
    const a = await store.create(input);
    expect(
      await store.decide(a.id, { user: 'U0APPROV2', decision: 'approved', now: T0 + 1, liveApprovers: ['U0APPROV1'] }),
    ).toMatchObject({ ok: false, code: 'not_approver' });
    // On the live list but not frozen on the card: refused too (both lists must name the user).
    expect(
      await store.decide(a.id, { user: 'U0NEWAPPR', decision: 'approved', now: T0 + 1, liveApprovers: ['U0NEWAPPR'] }),
    ).toMatchObject({ ok: false, code: 'not_approver' });
    expect((await store.get(a.id))?.state).toBe('pending');
    expect(
      await store.decide(a.id, { user: 'U0APPROV1', decision: 'approved', now: T0 + 2, liveApprovers: ['U0APPROV1'] }),
    ).toMatchObject({ ok: true });
  });

  it('treats forged or unknown ids as not found without touching Redis keys outside the prefix', async () => {
    expect(
      await store.decide('apr_AAAAAAAAAAAAAAAAAAAAAA', { user: 'U0APPROV1', decision: 'approved', now: T0 }),
    ).toEqual({ ok: false, code: 'approval_not_found', approval: null });
    expect(await store.decide('*', { user: 'U0APPROV1', decision: 'approved', now: T0 })).toEqual({
      ok: false,
      code: 'approval_not_found',
      approval: null,
    });
    expect(await store.get('../x')).toBeNull();
  });

  it('20 parallel decides on 20 connections: exactly one wins, the rest read the winner', async () => {
    const approvers = Array.from({ length: 20 }, (_, i) => `U0APPR${String(i).padStart(3, '0')}`);
    const a = await store.create({ ...input, approvers });
    const clients = approvers.map(() => newRedis());
    try {
      const results = await Promise.all(
        approvers.map((user, i) =>
          new ApprovalStore(clients[i] as Redis, prefix).decide(a.id, {
            user,
            decision: i % 2 === 0 ? 'approved' : 'denied',
            now: T0 + 10,
          }),
        ),
      );
      const winners = results.filter((r) => r.ok);
      expect(winners).toHaveLength(1);
      const winner = winners[0]?.approval?.decidedBy;
      for (const r of results.filter((x) => !x.ok))
        expect(r).toMatchObject({ ok: false, code: 'approval_decided', approval: { decidedBy: winner } });
    } finally {
      await Promise.all(clients.map((c) => c.quit()));
    }
  });

  it('the Lua transition and canDecide agree on every case (property)', async () => {
    const users = ['U0REQUEST', 'U0APPROV1', 'U0BYSTAND'];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom<ApprovalState>('pending', 'approved', 'denied', 'expired'),
        fc.constantFrom(...users),
        fc.integer({ min: -2, max: 2 }),
        async (state, clicker, offset) => {
          const a = await store.create(input);
          if (state === 'approved' || state === 'denied')
            await store.decide(a.id, { user: 'U0APPROV2', decision: state, now: T0 });
          if (state === 'expired') await store.expire(a.id, a.expiresAt);
          const now = a.expiresAt + offset;
          const expected = canDecide(
            { approvers: input.approvers },
            { requester: input.requester, clicker, now, expiresAt: a.expiresAt, state },
          );
          const got = await store.decide(a.id, { user: clicker, decision: 'approved', now });
          expect(got.ok).toBe(expected.ok);
          if (!got.ok && !expected.ok) expect(got.code).toBe(expected.code);
        },
      ),
      { numRuns: 60 },
    );
  });

  describe('with an escalation group frozen into the approval', () => {
    const escAt = T0 + 5 * 60_000;
    const withEsc: CreateApproval = { ...input, escalation: { approvers: ['U0ESCAL01'], at: escAt } };
    it('stores the group and its time, and reads them back', async () => {
      const a = await store.create(withEsc);
      expect((await store.get(a.id))?.escalation).toEqual({ approvers: ['U0ESCAL01'], at: escAt });
      expect((await store.get((await store.create(input)).id))?.escalation).toBeUndefined();
    });
    it('refuses an escalation approver before the escalation time (escalation_not_due), leaving it pending; accepts them from then on', async () => {
      const a = await store.create(withEsc);
      expect(await store.decide(a.id, { user: 'U0ESCAL01', decision: 'approved', now: escAt - 1 })).toMatchObject({
        ok: false,
        code: 'escalation_not_due',
        approval: { state: 'pending' },
      });
      expect(await store.decide(a.id, { user: 'U0ESCAL01', decision: 'approved', now: escAt })).toMatchObject({
        ok: true,
        approval: { state: 'approved', decidedBy: 'U0ESCAL01' },
      });
    });
    it('checks the escalation approver against the live escalation list: removed since the card was posted, refused', async () => {
      const a = await store.create(withEsc);
      const live = { liveApprovers: ['U0APPROV1'], liveEscalation: ['U0ESCAL02'] };
      expect(
        await store.decide(a.id, { user: 'U0ESCAL01', decision: 'approved', now: escAt + 1, ...live }),
      ).toMatchObject({ ok: false, code: 'not_approver' });
      // On the live approvers list but not frozen into either list of the card: refused as well.
      expect(
        await store.decide(a.id, { user: 'U0ESCAL02', decision: 'approved', now: escAt + 1, ...live }),
      ).toMatchObject({ ok: false, code: 'not_approver' });
      expect(
        await store.decide(a.id, {
          user: 'U0ESCAL01',
          decision: 'approved',
          now: escAt + 1,
          liveApprovers: ['U0APPROV1'],
          liveEscalation: ['U0ESCAL01'],
        }),
      ).toMatchObject({ ok: true });
    });
    it('never lets the requester decide through the escalation group', async () => {
      const a = await store.create({ ...input, escalation: { approvers: ['U0REQUEST'], at: escAt } });
      expect(await store.decide(a.id, { user: 'U0REQUEST', decision: 'approved', now: escAt + 1 })).toMatchObject({
        ok: false,
        code: 'self_approval',
      });
    });
    it('the Lua transition and canDecide agree with an escalation group (property)', async () => {
      const users = ['U0REQUEST', 'U0APPROV1', 'U0ESCAL01', 'U0BYSTAND'];
      const afterMs = 5 * 60_000;
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...users), fc.integer({ min: -2, max: 2 }), async (clicker, offset) => {
          const a = await store.create(withEsc);
          const now = escAt + offset;
          const policy = { approvers: input.approvers, escalation: { approvers: ['U0ESCAL01'], afterMs } };
          const expected = canDecide(policy, {
            requester: input.requester,
            clicker,
            now,
            createdAt: T0,
            expiresAt: a.expiresAt,
            state: 'pending',
          });
          const got = await store.decide(a.id, { user: clicker, decision: 'approved', now });
          expect(got.ok).toBe(expected.ok);
          if (!got.ok && !expected.ok) expect(got.code).toBe(expected.code);
        }),
        { numRuns: 40 },
      );
    });
  });
});
