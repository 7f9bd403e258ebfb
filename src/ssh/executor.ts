import { CodedError, ErrorCode } from '../errors.ts';
import { runChannel } from './channel-run.ts';
import { createConnectionPool, NotStarted, SessionRefused } from './connection-pool.ts';
import { unpinnedError, usablePins } from './host-key.ts';
import { AGENT_VERSION_LINE, agentBusy, agentRefusal, buildAgentCommand, type SshAccess } from './agent-line.ts';
import { buildRemoteCommand } from './remote-command.ts';
import { lostError, where } from './ssh-errors.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { ExecResult, Executor, Route, SshEndpoint, SshLogger } from './types.ts';

export type { SshLogger } from './types.ts';

export interface SshExecutorOptions {
  /**
   * `agent`: every command goes as a gpu-medic-agent line (its verb and args, src/ssh/agent-line.ts),
   * with its envelopes on stdin; an agent's refusal is an `agent_refused` error. `root-shell`: the
   * template's argv as an `exec timeout …` shell line (GPU_MEDIC_SSH_ACCESS=root-shell, opt-in). An
   * endpoint's own `access` wins.
   * @default 'agent'
   */
  access?: SshAccess;
  /**
   * Time allowed for TCP connect, SSH handshake, host-key check and authentication together.
   * @default 10000
   */
  connectTimeoutMs?: number;
  /**
   * Grace between the remote `timeout`'s SIGTERM and its SIGKILL (`timeout -k`).
   * @default 1000
   */
  killAfterMs?: number;
  /**
   * Extra wait after the last remote SIGKILL is due before the client gives up on its own:
   * it then sends `signal KILL` on the channel and closes it, and resolves with `timedOut`.
   * @default 1000
   */
  clientGraceMs?: number;
  /**
   * How long to wait for the server to confirm a channel close we asked for before the exec
   * resolves anyway.
   * @default 2000
   */
  channelCloseWaitMs?: number;
  /**
   * Output cap per stream when the CommandSpec does not set `maxOutputBytes`.
   * @default 1048576 (1 MiB)
   */
  maxOutputBytes?: number;
  /**
   * Concurrent channels per pooled connection; further execs queue. Keep it below the
   * server's `MaxSessions` (OpenSSH default 10).
   * @default 8
   */
  maxChannelsPerConnection?: number;
  /**
   * A pooled connection with no channel open for this long is closed. 0 keeps it until `close()`.
   * @default 300000 (5 min)
   */
  idleTimeoutMs?: number;
  /**
   * SSH keepalive interval, so a silently dead connection is noticed and dropped.
   * 0 disables.
   * @default 15000
   */
  keepaliveIntervalMs?: number;
  /**
   * Unanswered keepalives before the connection is considered dead.
   * @default 3
   */
  keepaliveCountMax?: number;
  /**
   * Logger for connects, refusals and command results. Never receives key material.
   * @default no logging
   */
  logger?: SshLogger;
  /**
   * Clock for `durationMs`.
   * @default Date.now
   */
  now?: () => number;
}

const NOOP_LOGGER: SshLogger = { debug() {}, info() {}, warn() {} };

/** Pauses (ms) before each new try of a line the agent answered busy: about 3 s in all, then the caller is told. */
const BUSY_RETRIES = [150, 400, 900, 1600] as const;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms + Math.floor(Math.random() * 50)));

export function createSshExecutor(options: SshExecutorOptions = {}): Executor {
  const connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
  const killAfterMs = options.killAfterMs ?? 1000;
  const clientGraceMs = options.clientGraceMs ?? 1000;
  const channelCloseWaitMs = options.channelCloseWaitMs ?? 2000;
  const defaultMaxOutput = options.maxOutputBytes ?? 1024 * 1024;
  const maxChannels = Math.max(1, options.maxChannelsPerConnection ?? 8);
  const idleTimeoutMs = options.idleTimeoutMs ?? 300_000;
  const keepaliveIntervalMs = options.keepaliveIntervalMs ?? 15_000;
  const keepaliveCountMax = options.keepaliveCountMax ?? 3;
  const log = options.logger ?? NOOP_LOGGER;
  const access = options.access ?? 'agent';
  const now = options.now ?? Date.now;

  const pool = createConnectionPool({
    connectTimeoutMs,
    maxChannels,
    idleTimeoutMs,
    keepaliveIntervalMs,
    keepaliveCountMax,
    log,
  });
  const channelRun = { pool, log, now, defaultMaxOutput, channelCloseWaitMs };
  let shutDown = false;

  async function exec(route: Route, spec: CommandSpec): Promise<ExecResult> {
    if (shutDown) throw new CodedError(ErrorCode.Internal, 'The SSH executor is closed; nothing was run.');
    const endpoint = route.kind === 'direct' ? route.endpoint : route.host;
    const agent = (endpoint.access ?? access) === 'agent';
    const { command, lastRemoteKillMs } = agent
      ? buildAgentCommand(route, spec)
      : buildRemoteCommand(route, spec, killAfterMs);
    // Only the agent reads stdin (a destructive verb's envelopes); a root shell's line is left as it always was.
    let r = await send(endpoint, command, lastRemoteKillMs, spec, agent ? (spec.stdin ?? '') : null);
    // A busy host ran nothing: the same line again after a short, growing pause, a few times.
    for (let i = 0; agent && agentBusy(r) && i < BUSY_RETRIES.length; i++) {
      log.info({ machineId: endpoint.machineId, command, attempt: i + 1 }, 'the agent is busy: trying again');
      await sleep(BUSY_RETRIES[i] ?? 0);
      r = await send(endpoint, command, lastRemoteKillMs, spec, agent ? (spec.stdin ?? '') : null);
    }
    if (agent && agentBusy(r))
      throw new CodedError(
        ErrorCode.AgentRefused,
        `The gpu-medic agent on ${endpoint.machineId} was busy (its max_runs reads at once) through ${BUSY_RETRIES.length + 1} tries; nothing was run. Try again in a minute.`,
        { machineId: endpoint.machineId, command, reason: 'busy' },
      );
    const refused = agent ? agentRefusal(r) : null;
    if (refused === null) return r;
    log.warn({ machineId: endpoint.machineId, command, reason: refused.detail.reason }, 'the agent refused');
    if (refused.detail.needVersion === undefined) throw refused;
    // An older agent: its own version, so the message says what is there and what to install.
    const v = await send(endpoint, AGENT_VERSION_LINE, 5000, { argv: [], timeoutMs: 5000 }, '').catch(() => null);
    throw agentRefusal(r, v !== null && v.code === 0 ? v.stdout : null) ?? refused;
  }

  async function probeLine(endpoint: SshEndpoint, line: string, timeoutMs: number): Promise<ExecResult> {
    if (shutDown) throw new CodedError(ErrorCode.Internal, 'The SSH executor is closed; nothing was run.');
    return send(endpoint, line, timeoutMs, { argv: [], timeoutMs }, '');
  }

  async function send(
    endpoint: SshEndpoint,
    command: string,
    lastRemoteKillMs: number,
    spec: CommandSpec,
    stdin: string | null,
  ): Promise<ExecResult> {
    if (usablePins(endpoint.hostKeyFingerprints).length === 0) {
      throw unpinnedError(endpoint.machineId, endpoint.host, endpoint.port);
    }
    const deadlineMs = lastRemoteKillMs + clientGraceMs;
    const refusalsUntil = now() + deadlineMs;
    let refusals = 0;
    // One retry for a pooled connection found dead before our command started on it; retries
    // within the command deadline for sessions the server refused (nothing ran either way).
    for (let attempt = 0; ; attempt++) {
      const conn = pool.getConnection(endpoint);
      await conn.ready;
      try {
        await pool.acquire(conn);
      } catch (e) {
        if (e instanceof NotStarted && attempt === 0 && !shutDown) continue;
        throw lostError(endpoint, e instanceof Error ? e.message : String(e));
      }
      try {
        return await runChannel(channelRun, conn, command, spec, deadlineMs, stdin);
      } catch (e) {
        if (!(e instanceof SessionRefused)) throw e;
        refusals++;
        // The server holds no more sessions than the others still open: wait below that. When
        // none was open it may still be freeing closed ones; the pause lets it.
        conn.limit = Math.max(1, Math.min(conn.limit, e.othersOpen));
        const pauseMs = Math.min(500, 25 * 2 ** Math.min(refusals, 5));
        log.debug(
          { machineId: endpoint.machineId, command, refusals, limit: conn.limit },
          'ssh server refused a session; waiting for a slot',
        );
        if (shutDown || now() + pauseMs >= refusalsUntil) {
          throw new CodedError(
            ErrorCode.CommandFailed,
            `${where(endpoint)} refused every session for \`${command}\` (${refusals} tries in ${((now() - refusalsUntil + deadlineMs) / 1000).toFixed(1)} s: ${e.message}); nothing was run. The server's MaxSessions may be 0, or other clients hold its sessions.`,
            { machineId: endpoint.machineId, command },
          );
        }
        await new Promise((r) => setTimeout(r, pauseMs));
      }
    }
  }

  async function close(): Promise<void> {
    shutDown = true;
    await pool.close();
  }

  return { exec, probeLine, close, access };
}
