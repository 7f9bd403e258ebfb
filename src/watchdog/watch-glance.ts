import { z } from 'zod';
import type { MachineSnapshot } from '../gpu/snapshot.ts';

/** One GPU as the watchdog last read it: the worker's GPU metrics (src/metrics/gpu-metrics.ts). */
const GpuReadingSchema = z.object({
  /** Its index as the machine numbers it (a host: the host index). */
  index: z.number().int().min(0).max(63),
  uuid: z
    .string()
    .regex(/^GPU-[0-9a-fA-F-]{8,64}$/)
    .nullable(),
  usedMiB: z.number().min(0).nullable(),
  totalMiB: z.number().min(0).nullable(),
  /** Memory no process on the host holds (host readings only; null elsewhere). */
  unownedMiB: z.number().min(0).nullable(),
  /** nvidia-smi answered an error for it (or for every GPU) instead of numbers. */
  error: z.boolean(),
});
export type GpuReading = z.infer<typeof GpuReadingSchema>;

const UUID = /^GPU-[0-9a-fA-F-]{8,64}$/;

/** The GPUs of a snapshot as metrics read them, pure: at most 64, numbers and UUIDs only. */
export function gpuReadingsOf(s: MachineSnapshot): GpuReading[] {
  return s.gpus
    .filter((g) => g.index !== null && g.index >= 0 && g.index <= 63)
    .slice(0, 64)
    .map((g) => {
      const held = s.processes
        .filter((p) => p.gpuIndex === g.index || (p.gpuUuid !== null && p.gpuUuid === g.uuid))
        .reduce((a, p) => a + (p.usedMiB ?? 0), 0);
      const error =
        s.gpuError !== null &&
        (s.gpuError.busId === null || g.busId === null || s.gpuError.busId.toLowerCase() === g.busId.toLowerCase());
      return {
        index: g.index ?? 0,
        uuid: g.uuid !== null && UUID.test(g.uuid) ? g.uuid : null,
        usedMiB: g.memoryUsedMiB === null ? null : Math.max(0, g.memoryUsedMiB),
        totalMiB: g.memoryTotalMiB === null ? null : Math.max(0, g.memoryTotalMiB),
        unownedMiB:
          s.view === 'host' && s.gpuError === null && g.memoryUsedMiB !== null
            ? Math.max(0, g.memoryUsedMiB - held)
            : null,
        error,
      };
    });
}

/**
 * A machine as the watchdog last read it, kept per machine in Redis (`watchKeys.last`) for App Home's
 * fleet at a glance. Numbers and ids only: no machine text.
 */
export const MachineGlanceSchema = z.object({
  machineId: z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/),
  /** When the reading was taken (ms). */
  at: z.number(),
  ok: z.boolean(),
  /** When not ok: the error code (e.g. command_timeout, unreachable). */
  code: z
    .string()
    .regex(/^[a-z_]{1,40}$/)
    .nullable(),
  gpus: z.number().int().min(0),
  gpuMemoryUsedMiB: z.number().min(0),
  gpuMemoryTotalMiB: z.number().min(0),
  /** Host RAM used %, when read. */
  ramPct: z.number().min(0).max(100).nullable(),
  /** Open alerts on it. */
  openAlerts: z.number().int().min(0),
  /** For the worker's GPU metrics (absent in glances written before them). */
  gpuReadings: z.array(GpuReadingSchema).max(64).optional(),
  /** nvidia-smi answered an error (for one GPU or for all) instead of numbers. */
  gpuError: z.boolean().optional(),
  /** Host RAM in bytes, from a host's reading. */
  ramUsedBytes: z.number().min(0).nullable().optional(),
  ramTotalBytes: z.number().min(0).nullable().optional(),
});
export type MachineGlance = z.infer<typeof MachineGlanceSchema>;
