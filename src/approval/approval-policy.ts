/**
 * Who may decide a tier-2 approval, and when. Pure: the clock is an argument (ms since epoch),
 * as bolt-js `verifySlackRequest` takes `nowMilliseconds`, so tests pass time in.
 */

export type ApprovalState = 'pending' | 'approved' | 'denied' | 'expired';
export type ApprovalDecision = 'approved' | 'denied';

/** The error codes of src/errors.ts a click can be refused with. */
export type DecideRefusalCode = 'self_approval' | 'not_approver' | 'approval_expired' | 'approval_decided' | 'budget_exhausted';

export interface ApprovalPolicy {
  /** Slack user IDs (not names) who may approve or deny host-level steps. */
  approvers: readonly string[];
  /** How long a card stays decidable. Default 15 minutes. */
  ttlMs?: number;
}

export const DEFAULT_APPROVAL_TTL_MS = 15 * 60 * 1000;

export interface DecideContext {
  requester: string;
  clicker: string;
  now: number;
  expiresAt: number;
  state: ApprovalState;
}

export type DecideCheck = { ok: true } | { ok: false; code: DecideRefusalCode; message: string };

export function approvalExpiresAt(policy: ApprovalPolicy, now: number): number {
  return now + (policy.ttlMs ?? DEFAULT_APPROVAL_TTL_MS);
}

/**
 * Order matters for what the clicker reads: a decided or expired card is final whoever clicks;
 * then the requester ban (even if the requester is also an approver); then the approvers list.
 * The Redis transition in approval-store.ts applies the same rules atomically.
 */
export function canDecide(policy: ApprovalPolicy, c: DecideContext): DecideCheck {
  if (c.state === 'approved' || c.state === 'denied')
    return { ok: false, code: 'approval_decided', message: `This request was already ${c.state}; nothing more will run from this card.` };
  if (c.state === 'expired' || c.now >= c.expiresAt)
    return { ok: false, code: 'approval_expired', message: 'This request expired and nothing was run. Ask for it again with `/gpu unstick` if it is still needed.' };
  if (c.clicker === c.requester)
    return { ok: false, code: 'self_approval', message: 'You asked for this step, so a second person must decide it. Nothing was run.' };
  if (!policy.approvers.includes(c.clicker))
    return { ok: false, code: 'not_approver', message: 'Only configured approvers may decide host-level steps. Nothing was run.' };
  return { ok: true };
}
