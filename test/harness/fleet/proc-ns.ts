/** PID-namespace lookups through the host's /proc (what NSpid and ns/pid tell). */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** `NSpid:` of a host PID: [hostPid, pid in the next namespace down, ...]; [] when gone. */
export function nsPids(hostPid: number): number[] {
  try {
    const line = readFileSync(`/proc/${hostPid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('NSpid:'));
    return line === undefined ? [] : line.slice(6).trim().split(/\s+/).map(Number);
  } catch {
    return [];
  }
}

export function pidNsOf(pid: number): string | null {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return null;
  }
}

/** Host PID of the process `ctPid` in the PID namespace whose init is `initHostPid`; null when none. */
export function hostPidOf(initHostPid: number, ctPid: number): number | null {
  const ns = pidNsOf(initHostPid);
  if (ns === null) return null;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    const ids = nsPids(pid);
    if (ids.length >= 2 && ids[ids.length - 1] === ctPid && pidNsOf(pid) === ns) return pid;
  }
  return null;
}
