/**
 * A TCP proxy in front of real sshd that makes SSH handshakes slow the way a busy worker does, and
 * counts them. One proxy serves many ports (one per machine), and they share one handshake budget,
 * as a worker's CPU is shared by every connection it opens:
 *
 * - a connection is "in its handshake" from accept until the client's SSH_MSG_NEWKEYS goes by (the
 *   key exchange is over; the client→server stream is plain until then) or until it closes;
 * - an admitted connection gets the server's bytes `delayMs` late (a slow handshake that still
 *   finishes well within the connect timeout);
 * - a connection accepted while `capacity` others are in their handshake never gets a byte from
 *   the server until the client gives up: its handshake outlives any connect timeout.
 *
 * So a client that never has more than `capacity` handshakes in flight is never held, whatever the
 * timing, and one that opens more at once is held for the surplus. `stats()` says what happened.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface HandshakeProxyOptions {
  /** Handshakes in flight at once beyond which a new connection is held (never answered). */
  capacity: number;
  /** Delay before the server's first bytes reach an admitted connection. */
  delayMs: number;
}

export interface HandshakeStats {
  /** Connections accepted, over all ports. */
  accepted: number;
  /** Connections admitted whose client sent NEWKEYS (key exchange over). */
  completed: number;
  /** Connections held because `capacity` handshakes were already in flight. */
  held: number;
  /** Most handshakes in flight at one moment (admitted ones; held ones are not counted). */
  mostInFlight: number;
  /** Longest accept-to-NEWKEYS time of a completed handshake, ms (the delay included). */
  slowestMs: number;
  /** Connections accepted per listening port. */
  perPort: ReadonlyMap<number, number>;
}

export interface HandshakeProxy {
  /** A new loopback port whose connections go to `127.0.0.1:<targetPort>`. */
  listen(targetPort: number): Promise<number>;
  stats(): HandshakeStats;
  /** Zeroes the counters (not the connections in flight). */
  resetStats(): void;
  stop(): Promise<void>;
}

const SSH_MSG_NEWKEYS = 21;

/**
 * Watches a client→server SSH stream until the client's NEWKEYS: the version line, then binary
 * packets `uint32 length, byte padding, byte type, …` (no MAC before the first NEWKEYS). Calls
 * `done` once.
 */
function newKeysWatcher(done: () => void): (chunk: Buffer) => void {
  let buf = Buffer.alloc(0);
  let versionSeen = false;
  let finished = false;
  return (chunk) => {
    if (finished) return;
    buf = Buffer.concat([buf, chunk]);
    if (!versionSeen) {
      const nl = buf.indexOf(0x0a);
      if (nl < 0) return;
      versionSeen = true;
      buf = buf.subarray(nl + 1);
    }
    while (buf.length >= 6) {
      const len = buf.readUInt32BE(0);
      if (buf[5] === SSH_MSG_NEWKEYS) {
        finished = true;
        done();
        return;
      }
      if (buf.length < 4 + len) return;
      buf = buf.subarray(4 + len);
    }
  };
}

export function startHandshakeProxy(o: HandshakeProxyOptions): HandshakeProxy {
  const servers: Server[] = [];
  const sockets = new Set<Socket>();
  let inFlight = 0;
  let accepted = 0;
  let completed = 0;
  let held = 0;
  let mostInFlight = 0;
  let slowestMs = 0;
  let perPort = new Map<number, number>();

  const track = (s: Socket): Socket => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
    return s;
  };

  const onConnection = (client: Socket, listenPort: number, targetPort: number): void => {
    track(client);
    accepted++;
    perPort.set(listenPort, (perPort.get(listenPort) ?? 0) + 1);
    if (inFlight >= o.capacity) {
      // Over the budget: the server never answers; the client's own connect timeout ends it.
      held++;
      client.resume();
      return;
    }
    const at = Date.now();
    inFlight++;
    mostInFlight = Math.max(mostInFlight, inFlight);
    let counted = true;
    const leave = (): void => {
      if (!counted) return;
      counted = false;
      inFlight--;
    };
    const upstream = track(connect(targetPort, '127.0.0.1'));
    client.on(
      'data',
      newKeysWatcher(() => {
        completed++;
        slowestMs = Math.max(slowestMs, Date.now() - at);
        leave();
      }),
    );
    client.pipe(upstream);
    // A fresh socket buffers what arrives until something reads it: the server's banner waits here.
    const timer = setTimeout(() => upstream.pipe(client), o.delayMs);
    const end = (): void => {
      clearTimeout(timer);
      leave();
      client.destroy();
      upstream.destroy();
    };
    client.once('close', end);
    upstream.once('close', end);
  };

  return {
    async listen(targetPort) {
      const server = createServer();
      servers.push(server);
      await new Promise<void>((res, rej) => {
        server.once('error', rej);
        server.listen(0, '127.0.0.1', () => res());
      });
      const addr = server.address();
      const port = typeof addr === 'object' && addr !== null ? addr.port : 0;
      server.on('connection', (s) => onConnection(s, port, targetPort));
      return port;
    },
    stats: () => ({ accepted, completed, held, mostInFlight, slowestMs, perPort: new Map(perPort) }),
    resetStats() {
      accepted = 0;
      completed = 0;
      held = 0;
      slowestMs = 0;
      mostInFlight = inFlight;
      perPort = new Map();
    },
    async stop() {
      for (const s of sockets) s.destroy();
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}
