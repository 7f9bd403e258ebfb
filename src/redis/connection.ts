/**
 * One way to reach Redis for every process: a single server (REDIS_URL) or, when REDIS_SENTINELS is
 * set, the primary that Redis Sentinel names for REDIS_SENTINEL_NAME. With Sentinel, ioredis asks
 * the sentinels for the primary at every (re)connect, follows `+switch-master` (failoverDetector),
 * and treats a READONLY answer (a demoted primary still reachable) as a reason to reconnect and
 * resend, so a failover needs no restart of bot or workers. BullMQ duplicates these connections for
 * its blocking ones, options included. Credentials and db come from REDIS_URL in both cases.
 *
 * ioredis (5.11) keeps a connection's failover detector subscribed after that connection closed. When
 * its `+switch-master` arrives while the client is reconnecting and asking a sentinel for the new
 * primary, the detector's disconnect aborts that attempt and the client ends for good (status
 * `end`, every command "Connection is closed.", no further retry): a bot that answers "queue
 * unavailable" until restarted (test/faults/failover.test.ts, docs/deploy.md "Redis failover").
 * `FreshDetectorSentinelConnector` retires the old detector before each connect, so only the
 * connection that is up listens for a failover.
 */
import { Redis, type RedisOptions, SentinelConnector, type SentinelConnectionOptions } from 'ioredis';

export interface RedisSettings {
  REDIS_URL: string;
  /** `host:port` of each sentinel; empty: no Sentinel, REDIS_URL is the server. */
  REDIS_SENTINELS: readonly string[];
  /** The primary's name in the sentinels' `sentinel monitor <name> ...`. */
  REDIS_SENTINEL_NAME: string;
}

/** `host:port` (IPv6 in brackets) → { host, port }; null for anything else. Pure. */
export function parseSentinel(s: string): { host: string; port: number } | null {
  const m = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(s.trim());
  if (!m || m[1] === undefined || m[2] === undefined) return null;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return null;
  return { host: m[1].replace(/^\[|\]$/g, ''), port };
}

/** ioredis's Sentinel connector whose failover detector never outlives the connection it watches (see above). */
class FreshDetectorSentinelConnector extends SentinelConnector {
  // ioredis passes the client's whole options (a superset of the Sentinel ones) as `unknown`.
  constructor(options: unknown) {
    super(options as SentinelConnectionOptions);
  }

  override connect(...args: Parameters<SentinelConnector['connect']>): ReturnType<SentinelConnector['connect']> {
    // The detector belongs to the previous connection (set on its 'connect'); it is private in ioredis.
    const stale: unknown = Reflect.get(this, 'failoverDetector');
    if (typeof stale === 'object' && stale !== null && 'cleanup' in stale && typeof stale.cleanup === 'function')
      stale.cleanup();
    Reflect.set(this, 'failoverDetector', null);
    return super.connect(...args);
  }
}

/** ioredis options for Sentinel mode (credentials and db from the URL), or null without sentinels. Pure. */
export function sentinelOptions(s: RedisSettings): RedisOptions | null {
  if (s.REDIS_SENTINELS.length === 0) return null;
  const sentinels = s.REDIS_SENTINELS.map(parseSentinel).filter((x): x is { host: string; port: number } => x !== null);
  if (sentinels.length !== s.REDIS_SENTINELS.length) throw new Error('REDIS_SENTINELS must be host:port entries');
  const url = new URL(s.REDIS_URL);
  const db = Number(url.pathname.replace(/^\//, '') || '0');
  return {
    sentinels,
    name: s.REDIS_SENTINEL_NAME,
    ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    ...(Number.isInteger(db) && db > 0 ? { db } : {}),
    ...(url.protocol === 'rediss:' ? { tls: {}, enableTLSForSentinelMode: true } : {}),
    failoverDetector: true,
    Connector: FreshDetectorSentinelConnector,
    // A primary demoted by a failover answers writes with READONLY: reconnect (to the new one) and resend.
    reconnectOnError: (err: Error) => (err.message.startsWith('READONLY') ? 2 : false),
  };
}

/** A connection to the current primary, with `extra` options (offline queue, retries) on top. */
export function connectRedis(s: RedisSettings, extra: RedisOptions = {}): Redis {
  const sentinel = sentinelOptions(s);
  return sentinel ? new Redis({ ...sentinel, ...extra }) : new Redis(s.REDIS_URL, extra);
}
