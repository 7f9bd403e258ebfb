import type { DecideRefusalCode } from './approval-policy.ts';

/**
 * The worker's own check of who decided a card (Redis is not believed), before anything from it runs: from the
 * bot's signed decision (who, when) and the worker's signed plan (requester, frozen approvers,
 * admin-only, escalation), against the worker's OWN live lists. Nothing here comes from Redis
 * unsigned. Pure.
 */
export interface DeciderFacts {
  /** From the signed decision. */
  decider: string;
  decidedAt: number;
  /** The signed plan's requester, and the incident meta's (either one is refused as decider). */
  requesters: readonly string[];
  /** From the signed plan. */
  frozenApprovers: readonly string[];
  adminOnly: boolean;
  escalation: { approvers: readonly string[]; at: number } | null;
}

export interface LiveLists {
  approvers: readonly string[];
  admins: readonly string[];
  escalation: readonly string[];
}

export type DeciderCheck = { ok: true } | { ok: false; code: DecideRefusalCode; why: string };

export function checkDecider(f: DeciderFacts, live: LiveLists): DeciderCheck {
  if (f.requesters.includes(f.decider))
    return { ok: false, code: 'self_approval', why: 'the requester cannot approve their own request' };
  if (f.adminOnly)
    return live.admins.includes(f.decider)
      ? { ok: true }
      : {
          ok: false,
          code: 'budget_exhausted',
          why: "the card was asked for past the host's blast-radius budget, and only an admin (GPU_MEDIC_ADMINS) may approve it",
        };
  if (f.frozenApprovers.includes(f.decider) && (live.approvers.includes(f.decider) || live.admins.includes(f.decider)))
    return { ok: true };
  const esc = f.escalation;
  if (esc?.approvers.includes(f.decider) && live.escalation.includes(f.decider)) {
    if (f.decidedAt < esc.at)
      return { ok: false, code: 'escalation_not_due', why: 'an escalation approver decided before the card escalated' };
    return { ok: true };
  }
  return { ok: false, code: 'not_approver', why: 'not a configured approver' };
}
