import { describe, expect, it } from 'vitest';
import {
  DEFAULT_APPROVAL_TTL_MS,
  approvalExpiresAt,
  canDecide,
  escalationOf,
} from '../../src/approval/approval-policy.ts';

const policy = { approvers: ['U0APPROV1', 'U0APPROV2', 'U0REQUEST'] };
const now = Date.parse('2026-11-30T09:20:00Z');
const base = { requester: 'U0REQUEST', clicker: 'U0APPROV1', now, expiresAt: now + 60_000, state: 'pending' as const };

describe('canDecide', () => {
  it('lets a configured approver other than the requester decide a pending, unexpired request', () => {
    expect(canDecide(policy, base)).toEqual({ ok: true });
  });
  it('refuses the requester even when they are an approver', () => {
    expect(canDecide(policy, { ...base, clicker: 'U0REQUEST' })).toMatchObject({ ok: false, code: 'self_approval' });
  });
  it('refuses someone not on the approvers list (by user ID)', () => {
    expect(canDecide(policy, { ...base, clicker: 'U0BYSTAND' })).toMatchObject({ ok: false, code: 'not_approver' });
  });
  it('refuses at and after the expiry instant, and an expired state', () => {
    expect(canDecide(policy, { ...base, now: base.expiresAt - 1 })).toEqual({ ok: true });
    expect(canDecide(policy, { ...base, now: base.expiresAt })).toMatchObject({ ok: false, code: 'approval_expired' });
    expect(canDecide(policy, { ...base, state: 'expired' })).toMatchObject({ ok: false, code: 'approval_expired' });
  });
  it('refuses a decided request first, whoever clicks', () => {
    expect(canDecide(policy, { ...base, state: 'approved' })).toMatchObject({ ok: false, code: 'approval_decided' });
    expect(
      canDecide(policy, { ...base, state: 'denied', clicker: 'U0REQUEST', now: base.expiresAt + 1 }),
    ).toMatchObject({ ok: false, code: 'approval_decided' });
  });
  it('messages say nothing was run', () => {
    const r = canDecide(policy, { ...base, clicker: 'U0REQUEST' });
    expect(r.ok === false && r.message).toMatch(/Nothing was run/);
  });
  it('expiry defaults to 15 minutes', () => {
    expect(approvalExpiresAt(policy, now)).toBe(now + 15 * 60 * 1000);
    expect(DEFAULT_APPROVAL_TTL_MS).toBe(900_000);
    expect(approvalExpiresAt({ ...policy, ttlMs: 1000 }, now)).toBe(now + 1000);
  });
});

describe('canDecide with an escalation group', () => {
  const created = now - 60_000;
  const esc = { ...policy, escalation: { approvers: ['U0ESCAL01', 'U0REQUEST'], afterMs: 5 * 60_000 } };
  const at = created + 5 * 60_000;
  const ctx = { ...base, clicker: 'U0ESCAL01', createdAt: created, expiresAt: created + 15 * 60_000 };
  it('refuses an escalation approver before the escalation time, saying when they may decide', () => {
    const r = canDecide(esc, { ...ctx, now: at - 1 });
    expect(r).toMatchObject({ ok: false, code: 'escalation_not_due' });
    expect(r.ok === false && r.message).toMatch(/Nothing was run/);
  });
  it('accepts an escalation approver from the escalation time on', () => {
    expect(canDecide(esc, { ...ctx, now: at })).toEqual({ ok: true });
    expect(canDecide(esc, { ...ctx, now: at + 60_000 })).toEqual({ ok: true });
  });
  it('still refuses the requester when they are in the escalation group', () => {
    expect(canDecide(esc, { ...ctx, clicker: 'U0REQUEST', now: at + 1 })).toMatchObject({
      ok: false,
      code: 'self_approval',
    });
  });
  it('lets the first approvers decide before the escalation time as today', () => {
    expect(canDecide(esc, { ...ctx, clicker: 'U0APPROV1', now: created + 1 })).toEqual({ ok: true });
  });
  it('an escalation time at or after the expiry means no escalation: the group stays refused', () => {
    const late = { ...policy, escalation: { approvers: ['U0ESCAL01'], afterMs: 15 * 60_000 } };
    expect(escalationOf(late, 'U0REQUEST', created, created + 15 * 60_000)).toBeNull();
    expect(canDecide(late, { ...ctx, now: created + 15 * 60_000 - 1 })).toMatchObject({
      ok: false,
      code: 'not_approver',
    });
  });
  it('escalationOf freezes the group without the requester, at creation + delay; none when the delay is 0 or the group empty', () => {
    expect(escalationOf(esc, 'U0REQUEST', created, created + 15 * 60_000)).toEqual({ approvers: ['U0ESCAL01'], at });
    expect(
      escalationOf(
        { ...policy, escalation: { approvers: ['U0ESCAL01'], afterMs: 0 } },
        'U0REQUEST',
        created,
        created + 900_000,
      ),
    ).toBeNull();
    expect(
      escalationOf(
        { ...policy, escalation: { approvers: [], afterMs: 60_000 } },
        'U0REQUEST',
        created,
        created + 900_000,
      ),
    ).toBeNull();
    expect(escalationOf(policy, 'U0REQUEST', created, created + 900_000)).toBeNull();
  });
});
