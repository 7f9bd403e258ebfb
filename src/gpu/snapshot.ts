import type { GpuHolderRow } from './gpu-holder-rows.ts';
import type { RootCause } from './root-cause.ts';
import type { Gpu, GpuProcess, Holder, HostMemory, NvidiaError } from './types.ts';

/** One machine's GPUs, holders and RAM at one instant, from one point of view. */
export interface MachineSnapshot {
  machineId: string;
  /** Host view lists host PIDs; container view shows memory but (usually) no processes. */
  view: 'host' | 'container';
  /** ISO timestamp taken by the worker right after the readings returned. */
  takenAt: string;
  gpus: Gpu[];
  processes: GpuProcess[];
  /** `fuser -v /dev/nvidia*` holders (container view), PIDs in the container's namespace. */
  holders: Holder[];
  kernelMounts: string[];
  ram: HostMemory | null;
  /** nvidia-smi reported an error instead of (or besides) numbers. */
  gpuError: NvidiaError | null;
  /**
   * `fuser -v /dev/nvidia*` ran but its output could not be read as holders (no device files,
   * no fuser on the machine, …): why, in its own words. Then `holders` is empty because they are
   * unknown, not because there are none. Absent or null: fuser answered (or was not asked).
   */
  holdersError?: string | null;
  /**
   * Root causes from the GPU holders' command lines and their parents' (./snapshot-causes.ts), when
   * the read was asked for them: numbers and flag names only, no command line is kept. Absent: not
   * asked, or nothing holds a GPU.
   */
  rootCauses?: RootCause[];
  /** The holders' command lines could not be read: why (then `rootCauses` is absent, not "none"). */
  rootCausesNote?: string;
  /**
   * Who holds each GPU, in this snapshot's GPU numbering (./gpu-holder-rows.ts): the status
   * table's Processes column. Absent: not read (then the table falls back to `processes`).
   */
  holderRows?: GpuHolderRow[];
  /** Why some holders could not be placed on a GPU (the host's GPU map was not read, …). */
  holderRowsNote?: string;
}

export type Flag =
  | { kind: 'memory_without_process'; gpuIndex: number; usedMiB: number }
  | { kind: 'ram_pressure'; usedPct: number; usedGiB: number; totalGiB: number }
  | { kind: 'gpu_error'; error: NvidiaError }
  | { kind: 'gpu_unreadable'; gpuIndex: number | null };

/** Memory at or below this is what an idle GPU reports with no context (driver bookkeeping). */
export const IDLE_MIB = 64;
const RAM_PRESSURE_PCT = 90;

export const GIB = 1024 ** 3;

export function usedPct(used: number | null, total: number | null): number | null {
  if (used === null || total === null || total <= 0) return null;
  return Math.round((used / total) * 100);
}

/** Processes listed for a GPU: by index, else by UUID. */
export function processesOn(s: Pick<MachineSnapshot, 'processes'>, gpu: Gpu): GpuProcess[] {
  return s.processes.filter(
    (p) =>
      (p.gpuIndex !== null && p.gpuIndex === gpu.index) ||
      (p.gpuUuid !== null && gpu.uuid !== null && p.gpuUuid === gpu.uuid),
  );
}

/** What a person wants to see at a glance. Pure. */
export function flagsOf(s: MachineSnapshot): Flag[] {
  const flags: Flag[] = [];
  if (s.gpuError) flags.push({ kind: 'gpu_error', error: s.gpuError });
  for (const g of s.gpus) {
    if (g.memoryUsedMiB === null) {
      if (g.memoryTotalMiB === null) flags.push({ kind: 'gpu_unreadable', gpuIndex: g.index });
      continue;
    }
    if (g.index !== null && g.memoryUsedMiB > IDLE_MIB && processesOn(s, g).length === 0)
      flags.push({ kind: 'memory_without_process', gpuIndex: g.index, usedMiB: g.memoryUsedMiB });
  }
  if (s.ram && s.ram.totalBytes > 0) {
    const pct = (s.ram.usedBytes / s.ram.totalBytes) * 100;
    if (pct >= RAM_PRESSURE_PCT)
      flags.push({
        kind: 'ram_pressure',
        usedPct: Math.round(pct),
        usedGiB: Math.round(s.ram.usedBytes / GIB),
        totalGiB: Math.round(s.ram.totalBytes / GIB),
      });
  }
  return flags;
}
