/**
 * One machine's watchdog reading (the watchdog warns before a user has to ask): its snapshot (snapshot.ts:
 * GPUs, compute apps, RAM, a container's device holders) and, on a host, in the same read script and SSH
 * session, the kernel log's NVIDIA lines since the last read, the D/Z state of its processes and each GPU's
 * recovery action. Bounded by the command timeout like every other read; read-only: it takes no target lock
 * and never signals or resets anything. A host query that fails or hangs leaves its part of the reading
 * unknown (the judge then neither raises nor clears that kind), not the read.
 */
import type { Machine } from '../config/machines.ts';
import type { MachineSnapshot } from '../gpu/snapshot.ts';
import type { CommandRecord } from '../incident/events.ts';
import type { Route } from '../ssh/types.ts';
import type { MachineReading } from '../watchdog/judge.ts';
import {
  journalSinceSec,
  type KernelLogCursor,
  parseKernelLog,
  parseRecoveryActions,
  parseStuckProcesses,
} from '../watchdog/kernel-log.ts';
import { type SnapshotDeps, takeSnapshotWith } from './snapshot.ts';
import { kernelLogRead, queryRecoveryAction, stuckProcesses } from '../agent-grammar/templates/watch-commands.ts';

export interface WatchReadResult {
  reading: MachineReading;
  /** Where the kernel log was read up to (hosts), to be stored with the judged state; undefined: unchanged. */
  kernelLog: KernelLogCursor | undefined;
  commands: CommandRecord[];
  /** Parts of the reading that could not be had (e.g. `kernel log: ...`), for the worker's log. */
  gaps: string[];
}

/**
 * `ramPct`: when host RAM is at or over it, the GPU holders' command lines are read too (a second
 * command, as status does) so the RAM alert can say why (`snapshot.rootCauses`); else one session.
 */
export async function readForWatch(
  machine: Machine,
  route: Route,
  deps: SnapshotDeps,
  kernelLog: KernelLogCursor | undefined,
  o: { ramPct: number },
): Promise<WatchReadResult> {
  const t = { timeoutMs: deps.commandTimeoutMs };
  const host = machine.kind === 'host';
  const extras = host
    ? [kernelLogRead({ ...t, sinceSec: journalSinceSec(kernelLog) }), stuckProcesses(t), queryRecoveryAction(t)]
    : [];
  const ramHigh = (s: MachineSnapshot): boolean =>
    s.ram !== null && s.ram.totalBytes > 0 && (s.ram.usedBytes / s.ram.totalBytes) * 100 >= o.ramPct - 0.5;
  const { outcome, extras: answers } = await takeSnapshotWith(machine, route, deps, extras, { commandLines: ramHigh });
  const at = deps.now().getTime();
  if (!outcome.ok)
    return {
      reading: { machineId: machine.id, at, ok: false, code: outcome.code },
      kernelLog: undefined,
      commands: outcome.commands,
      gaps: [],
    };
  const reading: Extract<MachineReading, { ok: true }> = {
    machineId: machine.id,
    at,
    ok: true,
    snapshot: outcome.snapshot,
  };
  const gaps: string[] = [];
  let cursor: KernelLogCursor | undefined;
  const [logA, statesA, recoveryA] = answers ?? [];
  if (logA !== undefined) {
    const k = logA.timedOut
      ? { ok: false as const, reason: 'did not answer within the command timeout' }
      : parseKernelLog(logA.stdout, kernelLog);
    if (k.ok) {
      reading.xids = k.xids;
      cursor = k.cursor;
    } else gaps.push(`kernel log: ${k.reason}`);
  }
  if (statesA !== undefined) {
    const stuck = statesA.timedOut ? null : parseStuckProcesses(statesA.stdout);
    if (stuck === null) gaps.push('process states: the /proc scan did not finish');
    else {
      // Only the GPU holders' states matter (host PIDs, as the host's nvidia-smi lists them).
      const states: Record<number, string> = {};
      for (const p of outcome.snapshot.processes) {
        const st = stuck[p.pid];
        if (st !== undefined) states[p.pid] = st;
      }
      reading.holderStates = states;
    }
  }
  if (recoveryA !== undefined && !recoveryA.timedOut && outcome.snapshot.gpuError === null) {
    const ra = parseRecoveryActions(recoveryA.code, recoveryA.stdout);
    if (ra === null) gaps.push('recovery action: unexpected answer');
    else if (ra.supported) reading.recoveryActions = ra.actions;
  }
  return { reading, kernelLog: cursor, commands: outcome.commands, gaps };
}
