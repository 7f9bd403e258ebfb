/** Who may do what. Pure: everything it needs is passed in. */
export interface AccessPolicy {
  /** Channel IDs where /gpu may be used; empty = any. */
  allowedChannels: readonly string[];
  /** User IDs who may request; empty = anyone in an allowed channel. */
  allowedUsers: readonly string[];
  /** User IDs who may approve host-level steps. */
  approvers: readonly string[];
  /** User IDs who alone may approve a host-level step past the blast-radius budget (a card frozen to them says so). */
  admins?: readonly string[];
  /** GPU_MEDIC_ESCALATION_APPROVERS: may also decide a card frozen to them, once it has escalated. */
  escalationApprovers?: readonly string[];
}

export type Decision = { ok: true } | { ok: false; reason: string };

export function canRequest(p: AccessPolicy, user: string, channel: string): Decision {
  if (p.allowedChannels.length > 0 && !p.allowedChannels.includes(channel))
    return { ok: false, reason: 'gpu-medic is not enabled in this channel' };
  if (p.allowedUsers.length > 0 && !p.allowedUsers.includes(user))
    return { ok: false, reason: 'you are not on the list of people who may use gpu-medic' };
  return { ok: true };
}
