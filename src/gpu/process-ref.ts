/**
 * The one home of a process's identity, after systemd's `PidRef`: one type, every operation on
 * it named after it. Pure, no I/O.
 *
 * A PID alone can be reused between plan and signal, so a process is referred to by its host
 * PID *and* its start time (`/proc/<pid>/stat` field 22, clock ticks after boot): a reused PID
 * has a later start time. Nothing is signalled but a process whose reference still matches at
 * the moment of the signal (src/agent-grammar/templates/signal.ts checks it on the machine).
 *
 * - `ProcessIdentity`: a process as the worker read it (reference, container PID, PID namespace,
 *   cmdline, uid, state); `ProcessRef` is the part that identifies it.
 * - `sameProcess(a, b)`: same host PID and same start time.
 * - `sameProcessAndNamespace(a, b)`: the same process, still in the same PID namespace with the
 *   same container PID: every field a signal command uses.
 * - `processKey(p)`: `hostPid@startTimeTicks`, a stable text key (step ids, sets).
 * - `pidIn(p, side)`: the PID a command running on that side names it by (host PID on the
 *   host, container PID inside the container).
 */

/** A process as read from the host's /proc: its reference (host PID + start time) and what was read beside it. */
export interface ProcessIdentity {
  /** PID in the host's (initial) PID namespace: what the host and nvidia-smi see. */
  hostPid: number;
  /** Last `NSpid` entry: the PID inside the process's own (innermost) PID namespace. */
  containerPid: number;
  /** Field 22 of `/proc/<pid>/stat`, clock ticks after boot. */
  startTimeTicks: number;
  /** `/proc/<pid>/cmdline` with NULs as spaces; `[comm]` when empty (zombie, kernel thread). */
  cmdline: string;
  /** Real uid as seen inside the target container (decides whether container-side kill may signal it). */
  uid?: number;
  /**
   * Real uid as the host sees it (an unprivileged container's uids are shifted by its id map);
   * `uid` is this read through the container's map (src/gpu/id-map.ts) when the container's own
   * reading did not say it.
   */
  hostUid?: number;
  /** `readlink /proc/<pid>/ns/pid`, e.g. `pid:[4026532845]`; the same text inside and outside a container. */
  pidNs: string;
  /** Process state letter from stat (`D` = uninterruptible sleep: a kill lands only when it wakes). */
  state?: string;
}

/** What identifies a process: its host PID and its start time. */
export type ProcessRef = Pick<ProcessIdentity, 'hostPid' | 'startTimeTicks'>;

/** Same process: same host PID and same start time (a reused PID has a later start time). */
export function sameProcess(a: ProcessRef, b: ProcessRef): boolean {
  return a.hostPid === b.hostPid && a.startTimeTicks === b.startTimeTicks;
}

/** The same process, in the same PID namespace with the same container PID (what a signal command checks). */
export function sameProcessAndNamespace(
  a: Pick<ProcessIdentity, 'hostPid' | 'startTimeTicks' | 'pidNs' | 'containerPid'>,
  b: Pick<ProcessIdentity, 'hostPid' | 'startTimeTicks' | 'pidNs' | 'containerPid'>,
): boolean {
  return sameProcess(a, b) && a.pidNs === b.pidNs && a.containerPid === b.containerPid;
}

/** `hostPid@startTimeTicks`: one text key per process. */
export function processKey(p: ProcessRef): string {
  return `${p.hostPid}@${p.startTimeTicks}`;
}

/** The PID a command on that side names the process by: the host PID on the host, the container PID inside. */
export function pidIn(p: Pick<ProcessIdentity, 'hostPid' | 'containerPid'>, side: 'host' | 'container'): number {
  return side === 'host' ? p.hostPid : p.containerPid;
}
