/**
 * What a running bot or worker says about itself (the heartbeat file) and how the healthcheck
 * judges it. Pure. A check is healthy when its value is null; otherwise the value says what is
 * wrong in plain words.
 */
import { z } from 'zod';

export const HealthReportSchema = z.object({
  role: z.string(),
  pid: z.number().int(),
  /** When the checks finished (ISO). */
  at: z.string(),
  /** How often the process writes the file; the judge allows three missed beats. */
  intervalMs: z.number().int().positive(),
  checks: z.record(z.string(), z.string().nullable()),
});
export type HealthReport = z.infer<typeof HealthReportSchema>;

/** Where a role writes its heartbeat unless GPU_MEDIC_HEALTH_FILE says otherwise. */
export function defaultHealthFile(role: string): string {
  return `/tmp/gpu-medic-${role}.health.json`;
}

/** Three missed beats, plus slack for a busy machine. */
export function maxAgeMs(intervalMs: number): number {
  return intervalMs * 3 + 5000;
}

/** The healthcheck's verdict on a heartbeat file's text (null: there is no file). One line, for `docker ps` and logs. */
export function judgeHealth(text: string | null, nowMs: number, file: string): { ok: boolean; line: string } {
  if (text === null)
    return { ok: false, line: `no heartbeat at ${file}: the process has not started, or cannot write there` };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, line: `heartbeat at ${file} is not JSON` };
  }
  const r = HealthReportSchema.safeParse(parsed);
  if (!r.success) return { ok: false, line: `heartbeat at ${file} has an unexpected shape` };
  const report = r.data;
  const at = Date.parse(report.at);
  const ageMs = nowMs - at;
  if (!Number.isFinite(at)) return { ok: false, line: `heartbeat at ${file} has no valid time` };
  if (ageMs > maxAgeMs(report.intervalMs)) {
    return {
      ok: false,
      line: `${report.role} (pid ${report.pid}) stale: last heartbeat ${Math.round(ageMs / 1000)} s ago, expected every ${Math.round(report.intervalMs / 1000)} s (hung or dead)`,
    };
  }
  const bad = Object.entries(report.checks).filter((e): e is [string, string] => e[1] !== null);
  const age = `${Math.max(0, Math.round(ageMs / 1000))} s ago`;
  if (bad.length > 0)
    return {
      ok: false,
      line: `${report.role} (pid ${report.pid}) unhealthy (${age}): ${bad.map(([k, v]) => `${k}: ${v}`).join('; ')}`,
    };
  return { ok: true, line: `${report.role} (pid ${report.pid}) ok (${age}): ${Object.keys(report.checks).join(', ')}` };
}
