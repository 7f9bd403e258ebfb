import { AGENT_LIMITS, AGENT_PROTOCOL, AGENT_VERSION, DESTRUCTIVE_VERBS } from '../agent-grammar/arg-types.ts';
import { CodedError, ErrorCode } from '../errors.ts';
import type { RemoteCommand } from './remote-command.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { ExecResult, Route } from './types.ts';

/**
 * The line the worker sends in `agent` access mode (agent/PROTOCOL.md), so that a stolen worker key
 * can run only the agent's fixed verbs, never a shell: the host's forced command, gpu-medic-agent, receives it as SSH_ORIGINAL_COMMAND and runs the grammar's argv
 * for the verb under its own timeout. No shell reads it: every word is a verb, a type-checked
 * argument or a number. Pure; throws `bad_command` (nothing was run) for what the agent would refuse.
 *
 *   gpu-medic 1 <timeout_ms> host <verb> [args...]
 *   gpu-medic 1 <timeout_ms> ct <vmid> <verb> [args...]
 */
export type SshAccess = 'agent' | 'root-shell';

const WORD = /^[A-Za-z0-9_.:+-]{1,128}$/;
const MAX_LINE = 4096;
const MAX_TIMEOUT_MS = 600_000;
/** The agent's SIGKILL after its SIGTERM, and the extra time it gives `pct exec` over the inner timeout. */
const AGENT_KILL_AFTER_MS = 1000;
const AGENT_PCT_EXTRA_MS = 2000;

export function buildAgentCommand(route: Route, spec: CommandSpec): RemoteCommand {
  const call = spec.agent;
  if (call === undefined)
    throw new CodedError(
      ErrorCode.BadCommand,
      `\`${spec.argv[0] ?? '?'}\` is no agent verb (its template names none), and this worker speaks only the agent's grammar; nothing was run.`,
    );
  if (!Number.isFinite(spec.timeoutMs) || spec.timeoutMs <= 0)
    throw new CodedError(
      ErrorCode.BadCommand,
      `Command timeout must be a positive number of ms, got ${spec.timeoutMs}; nothing was run.`,
    );
  const timeoutMs = Math.min(MAX_TIMEOUT_MS, Math.ceil(spec.timeoutMs));
  if (!DESTRUCTIVE_VERBS.includes(call.verb) && timeoutMs > AGENT_LIMITS.readTimeoutMs)
    throw new CodedError(
      ErrorCode.BadCommand,
      `The read ${call.verb} asks for ${timeoutMs} ms, over the agent's ${AGENT_LIMITS.readTimeoutMs} ms for reads; nothing was run.`,
    );
  let where: string[];
  let lastRemoteKillMs = timeoutMs + AGENT_KILL_AFTER_MS;
  if (route.kind === 'direct') where = ['host'];
  else {
    if (!Number.isInteger(route.vmid) || route.vmid <= 0)
      throw new CodedError(
        ErrorCode.BadCommand,
        `Container id must be a positive integer, got ${route.vmid}; nothing was run.`,
      );
    where = ['ct', String(route.vmid)];
    lastRemoteKillMs += AGENT_PCT_EXTRA_MS;
  }
  const words = ['gpu-medic', String(AGENT_PROTOCOL), String(timeoutMs), ...where, call.verb, ...call.args];
  const bad = words.find((w) => !WORD.test(w));
  if (bad !== undefined)
    throw new CodedError(
      ErrorCode.BadCommand,
      `The agent verb ${call.verb} has a word the agent would refuse (${JSON.stringify(bad.slice(0, 40))}); nothing was run.`,
    );
  const command = words.join(' ');
  if (command.length > MAX_LINE)
    throw new CodedError(
      ErrorCode.BadCommand,
      `The agent line for ${call.verb} is ${command.length} bytes, over the agent's ${MAX_LINE}; nothing was run.`,
    );
  return { command, lastRemoteKillMs };
}

const REFUSED = /^gpu-medic-agent: refused: (.{1,300})$/m;

/** The agent's own status for "too many runs on this host at once": nothing ran, try again (agent/PROTOCOL.md). */
const AGENT_BUSY_STATUS = 75;

/** True when the agent answered busy (its status and its one stderr line): nothing ran. */
export function agentBusy(r: Pick<ExecResult, 'code' | 'stderr'>): boolean {
  return r.code === AGENT_BUSY_STATUS && /^gpu-medic-agent: busy: /m.test(r.stderr);
}

/** What the worker asks an agent that did not know a verb (agent/PROTOCOL.md: `version` first). */
export const AGENT_VERSION_LINE = `gpu-medic ${AGENT_PROTOCOL} version`;

/**
 * The agent refused the line (exit 126 and its one stderr line): nothing ran. An agent older than
 * the verb answers `unknown verb`: the message names the version this worker needs.
 */
export function agentRefusal(
  r: Pick<ExecResult, 'code' | 'stderr' | 'command' | 'machineId'>,
  /** The agent's own `version` line, when it was read after an `unknown verb`. */
  versionLine: string | null = null,
): CodedError | null {
  if (r.code !== 126) return null;
  const m = REFUSED.exec(r.stderr);
  if (!m) return null;
  const reason = (m[1] ?? '').trim();
  // An agent older than this worker's: a verb it does not know, or envelopes newer than it reads.
  const older = /^unknown verb\b|^the signed text is not a (request|decision)$/.test(reason);
  const installed =
    versionLine === null ? null : (/^gpu-medic-agent (\S{1,32}) protocol /m.exec(versionLine)?.[1] ?? null);
  return new CodedError(
    ErrorCode.AgentRefused,
    older
      ? `The gpu-medic agent on ${r.machineId}${installed ? ` (${installed})` : ''} does not know this verb (${reason}): it is older than this worker needs. Install gpu-medic-agent ${AGENT_VERSION} there (agent/install.sh upgrade); nothing was run.`
      : `The gpu-medic agent on ${r.machineId} refused \`${r.command}\`: ${reason}. Nothing was run.`,
    {
      machineId: r.machineId,
      command: r.command,
      reason,
      ...(older ? { needVersion: AGENT_VERSION, installedVersion: installed } : {}),
    },
  );
}
