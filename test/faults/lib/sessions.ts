/**
 * Watches the fleet's sshd process trees (from /proc) while a load runs: per host, the most SSH
 * connections and the most channels running a command at the same time. A listener is
 * `sshd: /usr/sbin/sshd -D -e -f <machine dir>/sshd/sshd_config [listener]`; a connection is a child sshd of it; a channel is
 * a non-sshd process whose parent is that connection's sshd.
 */
import { readFileSync, readdirSync } from 'node:fs';

interface Proc {
  pid: number;
  ppid: number;
  comm: string;
}

function readProcs(): Map<number, Proc> {
  const out = new Map<number, Proc>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'latin1');
      const close = stat.lastIndexOf(')');
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      const ppid = Number(stat.slice(close + 2).split(' ')[1]);
      out.set(Number(name), { pid: Number(name), ppid, comm });
    } catch {
      // gone
    }
  }
  return out;
}

export interface SessionPeaks {
  /** host dir → most connections at once. */
  connections: Map<string, number>;
  /** host dir → most channels (commands) at once. */
  channels: Map<string, number>;
  samples: number;
}

export function watchSessions(hostDirs: readonly string[], everyMs = 40): { stop(): SessionPeaks } {
  const peaks: SessionPeaks = { connections: new Map(), channels: new Map(), samples: 0 };
  const listeners = new Map<number, string>();
  const findListeners = (procs: Map<number, Proc>): void => {
    for (const p of procs.values()) {
      if (p.comm !== 'sshd' || listeners.has(p.pid)) continue;
      try {
        // sshd rewrites its title: `sshd: /usr/sbin/sshd -D -e -f <dir>/sshd/sshd_config [listener] ...`.
        const cmd = readFileSync(`/proc/${p.pid}/cmdline`, 'latin1').replace(/\0/g, ' ');
        const dir = hostDirs.find((d) => cmd.includes(` -f ${d}/sshd/sshd_config`));
        if (cmd.includes(' -D ') && cmd.includes('[listener]') && dir) listeners.set(p.pid, dir);
      } catch {
        // gone
      }
    }
  };
  const sample = (): void => {
    const procs = readProcs();
    findListeners(procs);
    const conns = new Map<string, Set<number>>();
    const chans = new Map<string, number>();
    for (const p of procs.values()) {
      if (p.comm.startsWith('sshd')) continue;
      const parent = procs.get(p.ppid);
      if (!parent?.comm.startsWith('sshd')) continue;
      // Walk up to the listener (bounded): the ancestor right below it is the connection.
      let conn = parent;
      let host: string | undefined;
      for (let i = 0; i < 6; i++) {
        host = listeners.get(conn.ppid);
        if (host) break;
        const up = procs.get(conn.ppid);
        if (!up) break;
        conn = up;
      }
      if (!host) continue;
      conns.set(host, (conns.get(host) ?? new Set()).add(conn.pid));
      chans.set(host, (chans.get(host) ?? 0) + 1);
    }
    for (const [h, set] of conns) peaks.connections.set(h, Math.max(peaks.connections.get(h) ?? 0, set.size));
    for (const [h, n] of chans) peaks.channels.set(h, Math.max(peaks.channels.get(h) ?? 0, n));
    peaks.samples++;
  };
  const timer = setInterval(sample, everyMs);
  return {
    stop() {
      clearInterval(timer);
      return peaks;
    },
  };
}

/** Successful logins so far on a host (its sshd log: one `Accepted publickey` line per login). */
export function loginsOf(hostDir: string): number {
  try {
    return (readFileSync(`${hostDir}/sshd/sshd.log`, 'utf8').match(/Accepted publickey for /g) ?? []).length;
  } catch {
    return 0;
  }
}
