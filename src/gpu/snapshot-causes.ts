/**
 * Root causes (./root-cause.ts) of what a machine read shows: the GPU holders' command lines and
 * their parents' (the read-procs template of src/agent-grammar/templates/unstick-commands.ts), judged against the
 * RAM and the GPU count read in the same snapshot. Pure.
 *
 * For the watchdog: `takeSnapshot(…, { commandLines: true })` stores the causes on the snapshot
 * (`rootCauses`), and `snapshotRootCauses(reading.snapshot, HOST_RAM_CAUSES)` gives those a
 * `ram_high` alert should carry (each with `sentence` for logs and `parts` to render with
 * src/render/escape.ts `rich()`).
 */
import type { ProcReading } from './holders.ts';
import { rootCauses, type RootCause, type RootCauseKind } from './root-cause.ts';
import type { MachineSnapshot } from './snapshot.ts';

/** The causes that are about host RAM (what a RAM alert explains). */
export const HOST_RAM_CAUSES: readonly RootCauseKind[] = ['host_memory_over_ram', 'host_memory_near_ram'];

/** Every command line of these readings: each process's own, then its parents', nearest first. */
export function commandLinesOf(readings: readonly ProcReading[]): string[] {
  return readings.flatMap((r) => [
    ...(r.cmdline !== null ? [r.cmdline] : []),
    ...(r.parents ?? []).map((p) => p.cmdline),
  ]);
}

/** The GPUs a snapshot shows, or null when nvidia-smi gave no list (unknown, not zero). */
export function gpusSeen(s: Pick<MachineSnapshot, 'gpus'>): number | null {
  return s.gpus.length > 0 ? s.gpus.length : null;
}

/** Root causes of these command lines against the snapshot's own RAM and GPUs. */
export function causesInSnapshot(
  s: Pick<MachineSnapshot, 'gpus' | 'ram'>,
  commandLines: readonly string[],
): RootCause[] {
  return rootCauses({
    commandLines,
    hostRamTotalBytes: s.ram && s.ram.totalBytes > 0 ? s.ram.totalBytes : null,
    gpusVisible: gpusSeen(s),
  });
}

/** The causes a read stored on its snapshot (none when it did not read command lines), optionally only some kinds. */
export function snapshotRootCauses(
  s: Pick<MachineSnapshot, 'rootCauses'>,
  kinds?: readonly RootCauseKind[],
): RootCause[] {
  const all = s.rootCauses ?? [];
  return kinds === undefined ? [...all] : all.filter((c) => kinds.includes(c.kind));
}
