import { z } from 'zod';

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
});
export type MachineGlance = z.infer<typeof MachineGlanceSchema>;
