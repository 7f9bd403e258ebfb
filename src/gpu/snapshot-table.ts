/**
 * What a snapshot's table shows beyond nvidia-smi, from the holders' /proc readings: the root
 * causes their command lines show (the Why lines) and the Processes column's rows. One path for
 * every snapshot a thread shows: `/gpu status` (src/readings/snapshot.ts, which reads the
 * holders for it) and an unstick's before and after tables (src/readings/unstick-readings.ts,
 * from the readings it takes anyway). Pure.
 */
import { containerHolderRows, type HostSide, hostHolderRows } from './gpu-holder-rows.ts';
import type { ProcReading } from './holders.ts';
import { causesInSnapshot, commandLinesOf } from './snapshot-causes.ts';
import type { MachineSnapshot } from './snapshot.ts';

/** The holders' /proc readings; `complete` false when the read was cut short. */
export interface HolderProcs {
  readings: readonly ProcReading[];
  complete: boolean;
}

/** What the host said about a container, or why it could not be read. */
export interface HostSideRead {
  host: HostSide | null;
  problem: string | null;
}

/** The root causes of the holders' command lines; null `procs` (no holder to read): none said. */
export function causeFields(
  s: MachineSnapshot,
  procs: HolderProcs | null,
): Pick<MachineSnapshot, 'rootCauses' | 'rootCausesNote'> {
  if (procs === null) return {};
  const rootCauses = causesInSnapshot(s, commandLinesOf(procs.readings));
  // A cut read still says what it saw; it is only not the whole story.
  return procs.complete
    ? { rootCauses }
    : { rootCauses, rootCausesNote: "the read of the holders' command lines was cut short" };
}

/**
 * The Processes column's rows (src/gpu/gpu-holder-rows.ts): the host view from its own compute
 * apps; the container view placed by its host's GPU map (`side`), none when the host was not asked.
 */
export function rowFields(
  s: MachineSnapshot,
  readings: readonly ProcReading[],
  side: HostSideRead | undefined,
): Pick<MachineSnapshot, 'holderRows' | 'holderRowsNote'> {
  if (s.view === 'host') return { holderRows: hostHolderRows(s.gpus, s.processes, readings).rows };
  if (side === undefined) return {};
  const r = containerHolderRows(s.gpus, s.holders, readings, side.host, side.problem);
  return { holderRows: r.rows, ...(r.note !== null ? { holderRowsNote: r.note } : {}) };
}
