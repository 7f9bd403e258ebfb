import type { ClientChannel } from 'ssh2';
import { CodedError, ErrorCode } from '../errors.ts';
import { type Connection, type ConnectionPool, isOpenFailure, SessionRefused } from './connection-pool.ts';
import { lostError, where } from './ssh-errors.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { ExecResult, SshLogger } from './types.ts';

/**
 * One command on one SSH channel of a pooled connection: from the exec request to its result,
 * with the output caps, the client-side deadline and the channel's close.
 */

export interface ChannelRunOptions {
  pool: ConnectionPool;
  log: SshLogger;
  now: () => number;
  /** Output cap per stream when the CommandSpec does not set one. */
  defaultMaxOutput: number;
  /** How long to wait for the server to confirm a channel close we asked for. */
  channelCloseWaitMs: number;
}

/** A channel run: what it was given (read-only) and what it has seen so far. */
interface ChannelRunState {
  readonly o: ChannelRunOptions;
  readonly conn: Connection;
  readonly command: string;
  readonly spec: CommandSpec;
  /** Output cap per stream. */
  readonly cap: number;
  readonly started: number;
  readonly resolve: (r: ExecResult) => void;
  readonly reject: (e: Error) => void;
  /** The run's listener in `conn.onLost`, there while it runs. */
  readonly lost: (e: CodedError) => void;
  out: { stdout: Buffer[]; stderr: Buffer[] };
  size: { stdout: number; stderr: number };
  code: number | null;
  signal: string | null;
  timedOut: boolean;
  truncated: boolean;
  finished: boolean;
  channel: ClientChannel | undefined;
  deadline: NodeJS.Timeout | undefined;
  closeWait: NodeJS.Timeout | undefined;
  channelClosed: boolean;
}

function cleanup(s: ChannelRunState): void {
  s.finished = true;
  if (s.deadline) clearTimeout(s.deadline);
  if (s.closeWait) clearTimeout(s.closeWait);
  s.conn.onLost.delete(s.lost);
  s.o.pool.release(s.conn);
}

function finish(s: ChannelRunState): void {
  if (s.finished) return;
  if (s.closeWait && !s.channelClosed) {
    // sshd keeps a session whose process is still alive: it still counts against
    // MaxSessions there, so send new work over a fresh connection.
    s.o.pool.retire(s.conn);
  }
  cleanup(s);
  const { command, spec, conn } = s;
  const endpoint = conn.endpoint;
  const durationMs = s.o.now() - s.started;
  // `timeout` exits 124 after its TERM; its -k KILL goes to its whole process group, itself
  // included (SIGKILL, or 137 where a shell sits above it). Ending so before the time is up
  // is the command's own doing, not a timeout.
  const endedLikeTimeout = s.code === 124 || s.code === 137 || s.signal === 'SIGKILL';
  if (endedLikeTimeout && durationMs >= spec.timeoutMs) s.timedOut = true;
  const result: ExecResult = {
    command,
    machineId: endpoint.machineId,
    code: s.code,
    signal: s.signal,
    stdout: Buffer.concat(s.out.stdout).toString('utf8'),
    stderr: Buffer.concat(s.out.stderr).toString('utf8'),
    durationMs,
    timedOut: s.timedOut,
    truncated: s.truncated,
  };
  s.o.log.debug(
    {
      machineId: endpoint.machineId,
      command,
      code: s.code,
      signal: s.signal,
      durationMs,
      timedOut: s.timedOut,
      truncated: s.truncated,
    },
    'ssh exec done',
  );
  s.resolve(result);
}

function onLost(s: ChannelRunState, e: CodedError): void {
  if (s.finished) return;
  const { command } = s;
  const endpoint = s.conn.endpoint;
  cleanup(s);
  s.reject(
    new CodedError(
      ErrorCode.ConnectionLost,
      `SSH connection to ${where(endpoint)} dropped while running \`${command}\` (${e.message}); whether it completed is unknown. Check the machine state before retrying.`,
      { machineId: endpoint.machineId, host: endpoint.host, port: endpoint.port, command },
    ),
  );
}

/** Ends the remote command from our side: signal, then close the channel. */
function endCommand(s: ChannelRunState): void {
  if (!s.channel || s.closeWait) return;
  try {
    s.channel.signal('KILL');
    s.channel.close();
  } catch {
    // channel already gone; 'close' or onLost settles
  }
  s.closeWait = setTimeout(() => finish(s), s.o.channelCloseWaitMs);
}

function collect(s: ChannelRunState, stream: 'stdout' | 'stderr', chunk: Buffer): void {
  if (s.finished) return;
  const room = s.cap - s.size[stream];
  if (room > 0) s.out[stream].push(room >= chunk.length ? chunk : chunk.subarray(0, room));
  s.size[stream] += chunk.length;
  if (s.size[stream] > s.cap && !s.truncated) {
    s.truncated = true;
    endCommand(s);
  }
}

/** Runs `command` on a new channel of `conn`, whose slot the caller acquired; the slot is released when it settles. */
export function runChannel(
  o: ChannelRunOptions,
  conn: Connection,
  command: string,
  spec: CommandSpec,
  deadlineMs: number,
  /** Written to the command's stdin, then EOF; null leaves stdin open and unwritten (root-shell lines). */
  stdin: string | null = null,
): Promise<ExecResult> {
  const endpoint = conn.endpoint;
  const { log, pool } = o;

  return new Promise<ExecResult>((resolve, reject) => {
    const s: ChannelRunState = {
      o,
      conn,
      command,
      spec,
      cap: spec.maxOutputBytes ?? o.defaultMaxOutput,
      started: o.now(),
      resolve,
      reject,
      lost: (e) => onLost(s, e),
      out: { stdout: [], stderr: [] },
      size: { stdout: 0, stderr: 0 },
      code: null,
      signal: null,
      timedOut: false,
      truncated: false,
      finished: false,
      channel: undefined,
      deadline: undefined,
      closeWait: undefined,
      channelClosed: false,
    };

    if (conn.state === 'closed') {
      // Dropped between getting a slot and here: onLost would never be called.
      cleanup(s);
      reject(lostError(endpoint, 'connection closed before the command was sent; nothing was run'));
      return;
    }
    conn.onLost.add(s.lost);
    const onChannel = (err: Error | undefined, ch: ClientChannel): void => {
      if (s.finished) {
        ch?.close();
        return;
      }
      if (err) {
        if (conn.state === 'closed') return; // onLost reported it
        if (isOpenFailure(err)) {
          const othersOpen = conn.active - 1;
          cleanup(s);
          reject(new SessionRefused(err.message, othersOpen));
          return;
        }
        cleanup(s);
        reject(
          new CodedError(
            ErrorCode.CommandFailed,
            `Could not open an SSH session on ${where(endpoint)} (${err.message}); nothing was run.`,
            { machineId: endpoint.machineId, command },
          ),
        );
        return;
      }
      s.channel = ch;
      ch.on('data', (c: Buffer) => collect(s, 'stdout', c));
      ch.stderr.on('data', (c: Buffer) => collect(s, 'stderr', c));
      ch.on('exit', (exitCode: number | null, exitSignal?: string) => {
        s.code = exitCode ?? null;
        s.signal = exitSignal ?? null;
      });
      ch.on('close', () => {
        s.channelClosed = true;
        finish(s);
      });
      if (stdin !== null) {
        if (stdin === '') ch.end();
        else ch.end(stdin);
      }
    };
    // The deadline runs from the exec request, not from the session's opening: a pooled
    // connection to a server that stopped answering (frozen host, SIGSTOPped sshd) never opens
    // it, and would otherwise wait for the keepalive to notice (interval x count).
    s.deadline = setTimeout(() => {
      s.timedOut = true;
      if (s.channel) {
        log.warn(
          { machineId: endpoint.machineId, command, timeoutMs: spec.timeoutMs },
          'ssh command outlived its remote timeout; closing the channel',
        );
        endCommand(s);
        return;
      }
      log.warn(
        { machineId: endpoint.machineId, command, timeoutMs: spec.timeoutMs },
        'ssh server opened no session before the command deadline; dropping the connection',
      );
      cleanup(s);
      reject(
        new CodedError(
          ErrorCode.CommandTimeout,
          `${where(endpoint)} stopped answering: no session was opened for \`${command}\` within ${(deadlineMs / 1000).toFixed(1)} s (the command deadline). The machine may be frozen or overloaded; whether it ran is unknown. The connection was dropped.`,
          {
            machineId: endpoint.machineId,
            host: endpoint.host,
            port: endpoint.port,
            command,
            endedBy: 'client_deadline',
          },
        ),
      );
      // A server that does not answer cannot close politely either.
      pool.dropConnection(conn, lostError(endpoint, 'the server stopped answering'));
      conn.client.destroy();
    }, deadlineMs);
    try {
      conn.client.exec(command, onChannel);
    } catch (e) {
      // ssh2 throws when the socket is no longer writable: the command was not sent.
      if (s.finished) return;
      cleanup(s);
      reject(lostError(endpoint, `${e instanceof Error ? e.message : String(e)}; nothing was run`));
    }
  });
}
