import { readFile } from 'node:fs/promises';
import { Client } from 'ssh2';
import { CodedError, ErrorCode } from '../errors.ts';
import { hostKeyFingerprint, usablePins, verifyHostKey } from './host-key.ts';
import { connectError, errnoCode, lostError, where } from './ssh-errors.ts';
import type { SshEndpoint, SshLogger } from './types.ts';

/**
 * The executor's pooled SSH connections: one per endpoint (and pins), each carrying up to its
 * limit of channels at once, queueing the rest; dropped when lost, idle or closed.
 */

interface Waiter {
  resolve: () => void;
  reject: (e: Error) => void;
}

/** Thrown to a queued exec whose connection died before its command started: safe to retry. */
export class NotStarted extends Error {}

/**
 * The server refused to open a session (SSH_MSG_CHANNEL_OPEN_FAILURE): the exec request is only
 * sent on an open channel, so nothing ran and the exec may wait for a slot and try again.
 */
export class SessionRefused extends Error {
  constructor(
    message: string,
    /** Sessions still open on the connection besides the refused one. */
    readonly othersOpen: number,
  ) {
    super(message);
  }
}

/** ssh2 gives a refused channel open a numeric `reason` (RFC 4254 5.1). */
export function isOpenFailure(err: Error): boolean {
  return typeof (err as Error & { reason?: unknown }).reason === 'number';
}

export interface Connection {
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

export interface ConnectionPoolOptions {
  connectTimeoutMs: number;
  /** Channels a connection carries at once before a server's refusal teaches it fewer. */
  maxChannels: number;
  /** 0 keeps an idle connection until `close()`. */
  idleTimeoutMs: number;
  keepaliveIntervalMs: number;
  keepaliveCountMax: number;
  log: SshLogger;
}

export interface ConnectionPool {
  /** The pooled connection for the endpoint, or a new one (connecting; await its `ready`). */
  getConnection(endpoint: SshEndpoint): Connection;
  /** A channel slot on the connection; queues while all are taken. Rejects with NotStarted if it drops first. */
  acquire(conn: Connection): Promise<void>;
  release(conn: Connection): void;
  dropConnection(conn: Connection, reason: CodedError): void;
  /** Takes the connection out of the pool: new work goes elsewhere; it is ended once its last channel is released. */
  retire(conn: Connection): void;
  /** Drops and ends every pooled connection, waiting (bounded) for each to close. */
  close(): Promise<void>;
}

function poolKey(e: SshEndpoint): string {
  // Pins are part of the key: a connection verified against old pins is not reused for new ones.
  return JSON.stringify([e.host, e.port, e.username, e.privateKeyPath, usablePins(e.hostKeyFingerprints).sort()]);
}

export function createConnectionPool(o: ConnectionPoolOptions): ConnectionPool {
  const { connectTimeoutMs, maxChannels, idleTimeoutMs, keepaliveIntervalMs, keepaliveCountMax, log } = o;
  const pool = new Map<string, Connection>();

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

  function retire(conn: Connection): void {
    conn.retired = true;
    if (pool.get(conn.key) === conn) pool.delete(conn.key);
  }

  async function close(): Promise<void> {
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

  return { getConnection, acquire, release, dropConnection, retire, close };
}
