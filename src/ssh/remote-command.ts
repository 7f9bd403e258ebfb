import { CodedError, ErrorCode } from '../errors.ts';
import { shellJoin } from '../text/shell-quote.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { Route } from './types.ts';

export interface RemoteCommand {
  /** The literal line sent in the SSH `exec` request. */
  command: string;
  /** Ms after start by which every remote `timeout` layer has sent its final SIGKILL. */
  lastRemoteKillMs: number;
}

/** `timeout` takes decimal seconds; never 0, which would mean "no timeout". */
function seconds(ms: number): string {
  const whole = Math.max(1, Math.ceil(ms));
  return (whole / 1000).toFixed(3).replace(/\.?0+$/, '');
}

/**
 * Wraps argv in the remote-side timeout(s). The line starts with `exec` so the login shell
 * sshd runs it with is replaced by `timeout`: the exit status or signal sshd reports is the
 * command's own (dash would otherwise turn a SIGKILL into exit 137), and no shell sits
 * between a channel signal and the command. Pure; throws `bad_command` for specs that must
 * not run.
 *
 * Direct: `timeout -k K T argv...`. GNU timeout makes itself a process-group leader and
 * signals the whole group, so children of the command die too.
 *
 * pct: `timeout -k K T+K+1 pct exec <vmid> -- timeout -k K T argv...`. The inner timeout runs
 * inside the container's PID namespace: that is the one that kills the command, because
 * killing `pct exec` (lxc-attach) on the host can leave the attached process running in the
 * container. It fires first, so the exit status and output come back through pct as usual
 * (124 after TERM, 137 after KILL). The outer one is only a backstop for an attach that
 * itself hangs (frozen container, stuck lxc-attach); it starts 1 s after the inner KILL.
 */
export function buildRemoteCommand(route: Route, spec: CommandSpec, killAfterMs: number): RemoteCommand {
  if (spec.argv.length === 0) {
    throw new CodedError(ErrorCode.BadCommand, 'Empty command; nothing was run.');
  }
  if (!Number.isFinite(spec.timeoutMs) || spec.timeoutMs <= 0) {
    throw new CodedError(
      ErrorCode.BadCommand,
      `Command timeout must be a positive number of ms, got ${spec.timeoutMs}; nothing was run.`,
    );
  }
  const k = seconds(killAfterMs);
  const inner = ['timeout', '-k', k, seconds(spec.timeoutMs), ...spec.argv];
  if (route.kind === 'direct') {
    return { command: `exec ${shellJoin(inner)}`, lastRemoteKillMs: spec.timeoutMs + killAfterMs };
  }
  if (!Number.isInteger(route.vmid) || route.vmid <= 0) {
    throw new CodedError(
      ErrorCode.BadCommand,
      `Container id must be a positive integer, got ${route.vmid}; nothing was run.`,
    );
  }
  const outerMs = spec.timeoutMs + killAfterMs + 1000;
  const outer = ['timeout', '-k', k, seconds(outerMs), 'pct', 'exec', String(route.vmid), '--', ...inner];
  return { command: `exec ${shellJoin(outer)}`, lastRemoteKillMs: outerMs + killAfterMs };
}
