import type { DestructiveIds } from '../agent-grammar/arg-types.ts';
import { CodedError, ErrorCode } from '../errors.ts';
import { pidIn, type ProcessIdentity } from '../gpu/process-ref.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { ExecResult } from '../ssh/types.ts';
import {
  outcomeText,
  parseSignalReport,
  signalCommand,
  signalTargetOf,
  type SignalName,
  type SignalOutcome,
  type SignalSide,
} from '../agent-grammar/templates/signal.ts';

/**
 * The one place gpu-medic signals processes. It runs the check-and-signal template for a set
 * of planned identities and says, per identity, what happened at the moment of the signal and
 * against which identity (PID, start time, namespace) that was checked. No other code sends a
 * signal: the runner decides *whom* (from its own re-checks), this decides nothing and adds no
 * PID of its own.
 */

export interface SignalledTarget {
  identity: ProcessIdentity;
  signal: SignalName;
  /** `sent`, `gone` (exited before it), `skipped` (identity check refused), `failed` (the kernel refused). */
  result: 'sent' | 'gone' | 'skipped' | 'failed';
  outcome: SignalOutcome;
  /** Plain words for the log, naming the checked identity; null when sent race-free. */
  reason: string | null;
  /** How the identity was checked: `pidfd` (one race-free act) or `shell` (check then kill: not race-free). */
  check: 'pidfd' | 'shell' | null;
}

export interface SendDeps {
  /** Runs and logs one command (the step runner's logged exec). */
  exec(spec: CommandSpec): Promise<ExecResult>;
  commandTimeoutMs: number;
}

export interface SendRequest {
  side: SignalSide;
  signal: SignalName;
  /** The target container's PID namespace as read now (`pid:[N]`); host side: required. */
  pidNs: string | null;
  targets: readonly ProcessIdentity[];
  /** The step's incident and approval (`none`: tier 1): the agent's checks and audit line name them. */
  ids: DestructiveIds;
}

const NOT_RACE_FREE =
  'checked then signalled in one shell (no perl or python3 ≥ 3.9 in the container): the check was not race-free';

export async function sendSignals(req: SendRequest, deps: SendDeps): Promise<SignalledTarget[]> {
  if (req.targets.length === 0) return [];
  const pidOf = (t: ProcessIdentity): number => pidIn(t, req.side);
  const spec = signalCommand(
    req.side,
    req.signal,
    req.pidNs,
    req.targets.map((t) => signalTargetOf(t, req.side)),
    { timeoutMs: deps.commandTimeoutMs, ...req.ids },
  );
  const r = await deps.exec(spec);
  if (r.timedOut)
    throw new CodedError(
      ErrorCode.CommandTimeout,
      `the ${req.signal} signal command did not return in time; what it sent is unknown`,
    );
  const report = parseSignalReport(req.targets.map(pidOf), r.stdout);
  return req.targets.map((identity, i): SignalledTarget => {
    const outcome = report.outcomes[i] ?? {
      pid: pidOf(identity),
      result: 'failed',
      reason: 'other',
      message: 'no answer',
    };
    const who = `${req.side === 'host' ? 'host ' : ''}PID ${pidOf(identity)} started at ${identity.startTimeTicks} ticks`;
    const reason =
      outcome.result === 'sent'
        ? report.method === 'shell'
          ? `${who}: ${NOT_RACE_FREE}`
          : null
        : `${outcomeText(outcome)} (checked ${who}${report.method === 'shell' ? `; ${NOT_RACE_FREE}` : ''})`;
    return { identity, signal: req.signal, result: outcome.result, outcome, reason, check: report.method };
  });
}
