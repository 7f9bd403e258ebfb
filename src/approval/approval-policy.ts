import type { ErrorCode } from '../errors.ts';

/**
 * Who may decide a tier-2 approval, and when. Pure: the clock is an argument (ms since epoch),
 * as bolt-js `verifySlackRequest` takes `nowMilliseconds`, so tests pass time in.
 */

export type ApprovalState = 'pending' | 'approved' | 'denied' | 'expired';
export type ApprovalDecision = 'approved' | 'denied';

/** The error codes of src/errors.ts a click can be refused with. */
export type DecideRefusalCode = (typeof ErrorCode)[
  | 'SelfApproval'
  | 'NotApprover'
  | 'EscalationNotDue'
  | 'ApprovalExpired'
  | 'ApprovalDecided'
  | 'BudgetExhausted'];

export interface ApprovalPolicy {
  /** Slack user IDs (not names) who may approve or deny host-level steps. */
  approvers: readonly string[];
  /** How long a card stays decidable. Default 15 minutes. */
  ttlMs?: number;
  /**
   * A second group (GPU_MEDIC_ESCALATION_APPROVERS) who may ALSO decide once a card has waited
   * `afterMs` (GPU_MEDIC_ESCALATE_AFTER_SEC), never before. Absent, empty or 0: no escalation.
   */
  escalation?: { approvers: readonly string[]; afterMs: number };
}

/** An approval's escalation as frozen into it: who, and from when (ms since epoch). */
export interface Escalation {
  approvers: string[];
  at: number;
}

export const DEFAULT_APPROVAL_TTL_MS = 15 * 60 * 1000;

export interface DecideContext {
  requester: string;
  clicker: string;
  now: number;
  expiresAt: number;
  state: ApprovalState;
  /** When the card was posted: the escalation time is counted from it. */
  createdAt?: number;
}

export type DecideCheck = { ok: true } | { ok: false; code: DecideRefusalCode; message: string };

export function approvalExpiresAt(policy: ApprovalPolicy, now: number): number {
  return now + (policy.ttlMs ?? DEFAULT_APPROVAL_TTL_MS);
}

/**
 * The escalation to freeze into an approval created at `createdAt`: the group without the
 * requester, from `createdAt + afterMs`. Null when none is configured, the group is empty, or the
 * card would expire first (an escalation nobody can use is not offered).
 */
export function escalationOf(
  policy: ApprovalPolicy,
  requester: string,
  createdAt: number,
  expiresAt: number,
): Escalation | null {
  const e = policy.escalation;
  if (!e || e.afterMs <= 0) return null;
  const approvers = e.approvers.filter((a) => a !== requester);
  const at = createdAt + e.afterMs;
  return approvers.length === 0 || at >= expiresAt ? null : { approvers, at };
}

function hhmm(ms: number): string {
  return `${new Date(ms).toISOString().slice(11, 16)} UTC`;
}

/**
 * Order matters for what the clicker reads: a decided or expired card is final whoever clicks;
 * then the requester ban (even if the requester is also an approver); then the approvers list.
 * The Redis transition in approval-store.ts applies the same rules atomically.
 */
export function canDecide(policy: ApprovalPolicy, c: DecideContext): DecideCheck {
  if (c.state === 'approved' || c.state === 'denied')
    return {
      ok: false,
      code: 'approval_decided',
      message: `This request was already ${c.state}; nothing more will run from this card.`,
    };
  if (c.state === 'expired' || c.now >= c.expiresAt)
    return {
      ok: false,
      code: 'approval_expired',
      message: 'This request expired and nothing was run. Ask for it again with `/gpu unstick` if it is still needed.',
    };
  if (c.clicker === c.requester)
    return {
      ok: false,
      code: 'self_approval',
      message: 'You asked for this step, so a second person must decide it. Nothing was run.',
    };
  if (policy.approvers.includes(c.clicker)) return { ok: true };
  // The escalation group decides as well, from the escalation time on (never before it).
  const esc = c.createdAt === undefined ? null : escalationOf(policy, c.requester, c.createdAt, c.expiresAt);
  if (esc?.approvers.includes(c.clicker)) {
    if (c.now < esc.at)
      return {
        ok: false,
        code: 'escalation_not_due',
        message: `You are in the escalation group: you may decide this card from ${hhmm(esc.at)}, if nobody has by then. Nothing was run.`,
      };
    return { ok: true };
  }
  return {
    ok: false,
    code: 'not_approver',
    message: 'Only configured approvers may decide host-level steps. Nothing was run.',
  };
}
