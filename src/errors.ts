/**
 * One list of error codes shared by workers (job failure reasons, incident events) and the
 * Slack renderer (what the user reads). Every user-facing error says what happened, what was
 * not done, and what to try.
 */
export const ErrorCode = {
  TargetUnknown: 'target_unknown',
  BadCommand: 'bad_command',
  NotAuthorized: 'not_authorized',
  HostKeyMismatch: 'host_key_mismatch',
  HostKeyUnpinned: 'host_key_unpinned',
  ConnectTimeout: 'connect_timeout',
  ConnectFailed: 'connect_failed',
  AuthFailed: 'auth_failed',
  ConnectionLost: 'connection_lost',
  CommandTimeout: 'command_timeout',
  CommandFailed: 'command_failed',
  OutputTooLarge: 'output_too_large',
  ParseFailed: 'parse_failed',
  QueueUnavailable: 'queue_unavailable',
  TargetLocked: 'target_locked',
  ApprovalExpired: 'approval_expired',
  SelfApproval: 'self_approval',
  NotApprover: 'not_approver',
  ApprovalDecided: 'approval_decided',
  PlanChanged: 'plan_changed',
  ApprovalNotFound: 'approval_not_found',
  ConfigInvalid: 'config_invalid',
  Internal: 'internal',
  /** Unstick stopped because a machine it must read could not be read (the machine's own error is logged beside it). */
  MachineError: 'machine_error',
  /** A job whose data names another target than its incident's record. */
  JobMismatch: 'job_mismatch',
  /** The host's blast-radius budget of destructive steps is spent for this hour. */
  BudgetExhausted: 'budget_exhausted',
  /** A decision job whose plan is not sealed by the worker, or whose seal does not verify. */
  PlanUnverified: 'plan_unverified',
  /** An escalation approver clicked before the escalation time. */
  EscalationNotDue: 'escalation_not_due',
  /** An unstick request without a valid bot signature (forged, altered, or signed with an unknown key). */
  RequestUnverified: 'request_unverified',
  /** A signed unstick request that waited past its expiry before a worker took it: nothing ran. */
  RequestLapsed: 'request_lapsed',
  /** A decision without a valid bot signature over this card's plan. */
  DecisionUnverified: 'decision_unverified',
  /** A decision made after the card's expiry, or one that waited past its own: nothing ran. */
  ApprovalLapsed: 'approval_lapsed',
  /** The machine's gpu-medic-agent refused the command (exit 126, `refused:`): nothing ran there. */
  AgentRefused: 'agent_refused',
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export class CodedError extends Error {
  readonly code: ErrorCode;
  /** Plain-words detail safe to show in Slack (never secrets). */
  readonly detail: Record<string, string | number | null>;
  constructor(
    code: ErrorCode,
    message: string,
    detail: Record<string, string | number | null> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'CodedError';
    this.code = code;
    this.detail = detail;
  }
}

export function isCodedError(e: unknown): e is CodedError {
  return e instanceof CodedError;
}

/** Wrap an unknown throw so callers always deal in codes; the original stays as `cause`. */
export function asCodedError(e: unknown): CodedError {
  if (e instanceof CodedError) return e;
  const message = e instanceof Error ? e.message : String(e);
  return new CodedError(ErrorCode.Internal, message, {}, { cause: e });
}
