import { readFile } from 'node:fs/promises';
import { Client, type ClientChannel } from 'ssh2';
import { CodedError, ErrorCode } from '../errors.ts';
import { hostKeyFingerprint, unpinnedError, usablePins, verifyHostKey } from './host-key.ts';
import { buildRemoteCommand } from './remote-command.ts';
import type { CommandSpec, ExecResult, Executor, Route, SshEndpoint } from './types.ts';

/** pino-compatible subset; a pino Logger fits. */
export interface SshLogger {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface SshExecutorOptions {
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

interface Waiter {
  resolve: () => void;
  reject: (e: Error) => void;
}

/** Thrown to a queued exec whose connection died before its command started: safe to retry. */
class NotStarted extends Error {}

/**
 * The server refused to open a session (SSH_MSG_CHANNEL_OPEN_FAILURE): the exec request is only
 * sent on an open channel, so nothing ran and the exec may wait for a slot and try again.
 */
class SessionRefused extends Error {
  constructor(
    message: string,
    /** Sessions still open on the connection besides the refused one. */
    readonly othersOpen: number,
  ) {
    super(message);
  }
}

/** ssh2 gives a refused channel open a numeric `reason` (RFC 4254 5.1). */
function isOpenFailure(err: Error): boolean {
  return typeof (err as Error & { reason?: unknown }).reason === 'number';
}

interface Connection {
  key: string;
  endpoint: SshEndpoint;
  client: Client;
  ready: Promise<void>;
  state: 'connecting' | 'ready' | 'closed';
  active: number;
  /**
   * Sessions this server has granted at once, learned from a refusal: new work waits for a slot
   * below it (never above `maxChannelsPerConnection`).
   */
  limit: number;
  waiters: Waiter[];
  /** Running execs, told when the connection drops. */
  onLost: Set<(e: CodedError) => void>;
  idleTimer: NodeJS.Timeout | undefined;
  closed: Promise<void>;
  /** Out of the pool (a channel the server never closed still holds a session there); ended once idle. */
  retired: boolean;
}

const NOOP_LOGGER: SshLogger = { debug() {}, info() {}, warn() {} };

function where(e: SshEndpoint): string {
  return `${e.machineId} (${e.username}@${e.host}:${e.port})`;
}

function poolKey(e: SshEndpoint): string {
  // Pins are part of the key: a connection verified against old pins is not reused for new ones.
  return JSON.stringify([e.host, e.port, e.username, e.privateKeyPath, usablePins(e.hostKeyFingerprints).sort()]);
}

function errorLevel(err: Error): string | undefined {
  const level: unknown = (err as Error & { level?: unknown }).level;
  return typeof level === 'string' ? level : undefined;
}

function errnoCode(err: Error): string | undefined {
  const code: unknown = (err as Error & { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

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
  const now = options.now ?? Date.now;

  const pool = new Map<string, Connection>();
  let shutDown = false;

  function dropConnection(conn: Connection, reason: CodedError): void {
    if (conn.state === 'closed') return;
    const wasReady = conn.state === 'ready';
    conn.state = 'closed';
    if (pool.get(conn.key) === conn) pool.delete(conn.key);
    if (conn.idleTimer) clearTimeout(conn.idleTimer);
    for (const w of conn.waiters.splice(0)) w.reject(new NotStarted(reason.message));
    for (const lost of [...conn.onLost]) lost(reason);
    if (wasReady)
      log.info(
        { machineId: conn.endpoint.machineId, host: conn.endpoint.host, port: conn.endpoint.port, reason: reason.code },
        'ssh connection closed',
      );
  }

  function connect(endpoint: SshEndpoint, key: string): Connection {
    const client = new Client();
    let resolveClosed: () => void = () => {};
    const conn: Connection = {
      key,
      endpoint,
      client,
      ready: Promise.resolve(),
      state: 'connecting',
      active: 0,
      limit: maxChannels,
      waiters: [],
      onLost: new Set(),
      idleTimer: undefined,
      retired: false,
      closed: new Promise<void>((r) => (resolveClosed = r)),
    };
    const detail = { machineId: endpoint.machineId, host: endpoint.host, port: endpoint.port };

    conn.ready = new Promise<void>((resolve, reject) => {
      let settled = false;
      let hostKeyError: CodedError | null = null;
      const fail = (e: CodedError): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        dropConnection(conn, e);
        client.destroy();
        reject(e);
      };
      const timer = setTimeout(() => {
        fail(
          new CodedError(
            ErrorCode.ConnectTimeout,
            `SSH to ${where(endpoint)} did not complete within ${connectTimeoutMs} ms; nothing was run. Check that the machine is up and the port is reachable.`,
            detail,
          ),
        );
      }, connectTimeoutMs);

      client.on('ready', () => {
        if (settled) return;
        if (conn.state === 'closed') {
          fail(lostError(endpoint, 'executor closed while connecting; nothing was run'));
          return;
        }
        settled = true;
        clearTimeout(timer);
        conn.state = 'ready';
        log.debug(detail, 'ssh connected');
        resolve();
      });
      client.on('error', (err: Error) => {
        if (settled) {
          dropConnection(conn, lostError(endpoint, err.message));
          return;
        }
        fail(
          hostKeyError ??
            (conn.state === 'closed'
              ? lostError(endpoint, 'executor closed while connecting; nothing was run')
              : connectError(endpoint, err)),
        );
      });
      client.on('close', () => {
        resolveClosed();
        if (!settled) {
          const why =
            conn.state === 'closed'
              ? lostError(endpoint, 'executor closed while connecting; nothing was run')
              : new CodedError(
                  ErrorCode.ConnectFailed,
                  `SSH to ${where(endpoint)} was closed during the handshake; nothing was run.`,
                  detail,
                );
          fail(hostKeyError ?? why);
          return;
        }
        dropConnection(conn, lostError(endpoint, 'connection closed'));
      });

      void (async () => {
        let privateKey: Buffer;
        try {
          privateKey = await readFile(endpoint.privateKeyPath);
        } catch (e) {
          const code = e instanceof Error ? (errnoCode(e) ?? 'error') : 'error';
          fail(
            new CodedError(
              ErrorCode.ConfigInvalid,
              `Cannot read the SSH private key for ${endpoint.machineId} at ${endpoint.privateKeyPath} (${code}); nothing was run.`,
              detail,
            ),
          );
          return;
        }
        if (settled) return;
        if (conn.state === 'closed') {
          fail(lostError(endpoint, 'executor closed before connecting'));
          return;
        }
        try {
          client.connect({
            host: endpoint.host,
            port: endpoint.port,
            username: endpoint.username,
            privateKey,
            // Our own timer covers the whole connect; ssh2's would race it with a vaguer error.
            readyTimeout: 0,
            keepaliveInterval: keepaliveIntervalMs,
            keepaliveCountMax,
            hostVerifier: (keyBlob: Buffer): boolean => {
              hostKeyError = verifyHostKey(endpoint, endpoint.hostKeyFingerprints, keyBlob);
              if (hostKeyError) {
                log.warn(
                  { ...detail, seen: hostKeyFingerprint(keyBlob), expected: usablePins(endpoint.hostKeyFingerprints) },
                  'ssh host key refused',
                );
                return false;
              }
              return true;
            },
          });
        } catch {
          // ssh2 throws synchronously on an unparsable key; its message is not passed on, to be safe.
          fail(
            new CodedError(
              ErrorCode.ConfigInvalid,
              `The SSH private key for ${endpoint.machineId} at ${endpoint.privateKeyPath} could not be used (unsupported format or passphrase-protected); nothing was run.`,
              detail,
            ),
          );
        }
      })();
    });
    // The creating exec awaits `ready`; this only keeps a rejection nobody else awaits from being "unhandled".
    conn.ready.catch(() => {});
    return conn;
  }

  function getConnection(endpoint: SshEndpoint): Connection {
    const key = poolKey(endpoint);
    const existing = pool.get(key);
    if (existing && existing.state !== 'closed') return existing;
    const conn = connect(endpoint, key);
    pool.set(key, conn);
    return conn;
  }

  function acquire(conn: Connection): Promise<void> {
    if (conn.state === 'closed') return Promise.reject(new NotStarted('connection closed'));
    if (conn.idleTimer) {
      clearTimeout(conn.idleTimer);
      conn.idleTimer = undefined;
    }
    if (conn.active < conn.limit) {
      conn.active++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => conn.waiters.push({ resolve, reject }));
  }

  function release(conn: Connection): void {
    if (conn.state === 'closed') return;
    // Above a limit learned meanwhile the slot is given up, not passed on.
    const next = conn.active <= conn.limit ? conn.waiters.shift() : undefined;
    if (next) {
      next.resolve(); // the slot passes on; `active` stays
      return;
    }
    conn.active--;
    if (conn.active === 0 && conn.retired) {
      dropConnection(conn, lostError(conn.endpoint, 'retired after a channel the server did not close'));
      conn.client.end();
      return;
    }
    if (conn.active === 0 && idleTimeoutMs > 0) {
      conn.idleTimer = setTimeout(() => {
        if (conn.active === 0) {
          log.debug({ machineId: conn.endpoint.machineId }, 'ssh connection idle, closing');
          dropConnection(conn, lostError(conn.endpoint, 'closed after being idle'));
          conn.client.end();
        }
      }, idleTimeoutMs);
      conn.idleTimer.unref();
    }
  }

  function run(conn: Connection, command: string, spec: CommandSpec, deadlineMs: number): Promise<ExecResult> {
    const endpoint = conn.endpoint;
    const cap = spec.maxOutputBytes ?? defaultMaxOutput;
    const started = now();

    return new Promise<ExecResult>((resolve, reject) => {
      const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
      const size = { stdout: 0, stderr: 0 };
      let code: number | null = null;
      let signal: string | null = null;
      let timedOut = false;
      let truncated = false;
      let finished = false;
      let channel: ClientChannel | undefined;
      let deadline: NodeJS.Timeout | undefined;
      let closeWait: NodeJS.Timeout | undefined;
      let channelClosed = false;

      const cleanup = (): void => {
        finished = true;
        if (deadline) clearTimeout(deadline);
        if (closeWait) clearTimeout(closeWait);
        conn.onLost.delete(onLost);
        release(conn);
      };
      const finish = (): void => {
        if (finished) return;
        if (closeWait && !channelClosed) {
          // sshd keeps a session whose process is still alive: it still counts against
          // MaxSessions there, so send new work over a fresh connection.
          conn.retired = true;
          if (pool.get(conn.key) === conn) pool.delete(conn.key);
        }
        cleanup();
        const durationMs = now() - started;
        // `timeout` exits 124 after its TERM; its -k KILL goes to its whole process group, itself
        // included (SIGKILL, or 137 where a shell sits above it). Ending so before the time is up
        // is the command's own doing, not a timeout.
        const endedLikeTimeout = code === 124 || code === 137 || signal === 'SIGKILL';
        if (endedLikeTimeout && durationMs >= spec.timeoutMs) timedOut = true;
        const result: ExecResult = {
          command,
          machineId: endpoint.machineId,
          code,
          signal,
          stdout: Buffer.concat(out.stdout).toString('utf8'),
          stderr: Buffer.concat(out.stderr).toString('utf8'),
          durationMs,
          timedOut,
          truncated,
        };
        log.debug(
          { machineId: endpoint.machineId, command, code, signal, durationMs, timedOut, truncated },
          'ssh exec done',
        );
        resolve(result);
      };
      const onLost = (e: CodedError): void => {
        if (finished) return;
        cleanup();
        reject(
          new CodedError(
            ErrorCode.ConnectionLost,
            `SSH connection to ${where(endpoint)} dropped while running \`${command}\` (${e.message}); whether it completed is unknown. Check the machine state before retrying.`,
            { machineId: endpoint.machineId, host: endpoint.host, port: endpoint.port, command },
          ),
        );
      };
      /** Ends the remote command from our side: signal, then close the channel. */
      const endCommand = (): void => {
        if (!channel || closeWait) return;
        try {
          channel.signal('KILL');
          channel.close();
        } catch {
          // channel already gone; 'close' or onLost settles
        }
        closeWait = setTimeout(finish, channelCloseWaitMs);
      };
      const collect = (stream: 'stdout' | 'stderr', chunk: Buffer): void => {
        if (finished) return;
        const room = cap - size[stream];
        if (room > 0) out[stream].push(room >= chunk.length ? chunk : chunk.subarray(0, room));
        size[stream] += chunk.length;
        if (size[stream] > cap && !truncated) {
          truncated = true;
          endCommand();
        }
      };

      if (conn.state === 'closed') {
        // Dropped between getting a slot and here: onLost would never be called.
        cleanup();
        reject(lostError(endpoint, 'connection closed before the command was sent; nothing was run'));
        return;
      }
      conn.onLost.add(onLost);
      const onChannel = (err: Error | undefined, ch: ClientChannel): void => {
        if (finished) {
          ch?.close();
          return;
        }
        if (err) {
          if (conn.state === 'closed') return; // onLost reported it
          if (isOpenFailure(err)) {
            const othersOpen = conn.active - 1;
            cleanup();
            reject(new SessionRefused(err.message, othersOpen));
            return;
          }
          cleanup();
          reject(
            new CodedError(
              ErrorCode.CommandFailed,
              `Could not open an SSH session on ${where(endpoint)} (${err.message}); nothing was run.`,
              { machineId: endpoint.machineId, command },
            ),
          );
          return;
        }
        channel = ch;
        ch.on('data', (c: Buffer) => collect('stdout', c));
        ch.stderr.on('data', (c: Buffer) => collect('stderr', c));
        ch.on('exit', (exitCode: number | null, exitSignal?: string) => {
          code = exitCode ?? null;
          signal = exitSignal ?? null;
        });
        ch.on('close', () => {
          channelClosed = true;
          finish();
        });
      };
      // The deadline runs from the exec request, not from the session's opening: a pooled
      // connection to a server that stopped answering (frozen host, SIGSTOPped sshd) never opens
      // it, and would otherwise wait for the keepalive to notice (interval x count).
      deadline = setTimeout(() => {
        timedOut = true;
        if (channel) {
          log.warn(
            { machineId: endpoint.machineId, command, timeoutMs: spec.timeoutMs },
            'ssh command outlived its remote timeout; closing the channel',
          );
          endCommand();
          return;
        }
        log.warn(
          { machineId: endpoint.machineId, command, timeoutMs: spec.timeoutMs },
          'ssh server opened no session before the command deadline; dropping the connection',
        );
        cleanup();
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
        dropConnection(conn, lostError(endpoint, 'the server stopped answering'));
        conn.client.destroy();
      }, deadlineMs);
      try {
        conn.client.exec(command, onChannel);
      } catch (e) {
        // ssh2 throws when the socket is no longer writable: the command was not sent.
        if (finished) return;
        cleanup();
        reject(lostError(endpoint, `${e instanceof Error ? e.message : String(e)}; nothing was run`));
      }
    });
  }

  async function exec(route: Route, spec: CommandSpec): Promise<ExecResult> {
    if (shutDown) throw new CodedError(ErrorCode.Internal, 'The SSH executor is closed; nothing was run.');
    const endpoint = route.kind === 'direct' ? route.endpoint : route.host;
    const { command, lastRemoteKillMs } = buildRemoteCommand(route, spec, killAfterMs);
    if (usablePins(endpoint.hostKeyFingerprints).length === 0) {
      throw unpinnedError(endpoint.machineId, endpoint.host, endpoint.port);
    }
    const deadlineMs = lastRemoteKillMs + clientGraceMs;
    const refusalsUntil = now() + deadlineMs;
    let refusals = 0;
    // One retry for a pooled connection found dead before our command started on it; retries
    // within the command deadline for sessions the server refused (nothing ran either way).
    for (let attempt = 0; ; attempt++) {
      const conn = getConnection(endpoint);
      await conn.ready;
      try {
        await acquire(conn);
      } catch (e) {
        if (e instanceof NotStarted && attempt === 0 && !shutDown) continue;
        throw lostError(endpoint, e instanceof Error ? e.message : String(e));
      }
      try {
        return await run(conn, command, spec, deadlineMs);
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
    const conns = [...pool.values()];
    for (const conn of conns) {
      const connecting = conn.state === 'connecting';
      dropConnection(conn, lostError(conn.endpoint, 'executor closed'));
      // end() is a no-op before the socket is writable; a pending connect must be cut.
      if (connecting) conn.client.destroy();
      else conn.client.end();
    }
    await Promise.all(
      conns.map(async (conn) => {
        const forced = setTimeout(() => conn.client.destroy(), 2000);
        // A connection still reading its key never opened a socket: don't wait on it forever.
        await Promise.race([conn.closed, new Promise<void>((r) => setTimeout(r, 3000).unref())]);
        clearTimeout(forced);
      }),
    );
  }

  return { exec, close };
}

function lostError(endpoint: SshEndpoint, why: string): CodedError {
  return new CodedError(ErrorCode.ConnectionLost, `SSH connection to ${where(endpoint)} lost: ${why}.`, {
    machineId: endpoint.machineId,
    host: endpoint.host,
    port: endpoint.port,
  });
}

function connectError(endpoint: SshEndpoint, err: Error): CodedError {
  const detail = { machineId: endpoint.machineId, host: endpoint.host, port: endpoint.port };
  const level = errorLevel(err);
  if (level === 'client-authentication') {
    return new CodedError(
      ErrorCode.AuthFailed,
      `SSH login to ${where(endpoint)} was refused (key not accepted); nothing was run. Check that the worker's public key is in the machine's authorized_keys for ${endpoint.username}.`,
      detail,
    );
  }
  if (level === 'client-timeout') {
    return new CodedError(ErrorCode.ConnectTimeout, `SSH to ${where(endpoint)} timed out; nothing was run.`, detail);
  }
  const code = errnoCode(err);
  return new CodedError(
    ErrorCode.ConnectFailed,
    `Could not connect to ${where(endpoint)} (${code ?? err.message}); nothing was run. Check the address, port and that sshd is running.`,
    { ...detail, reason: code ?? err.message },
  );
}
