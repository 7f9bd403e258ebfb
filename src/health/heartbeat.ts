/**
 * Writes the heartbeat file: every interval, runs the process's own checks (each bounded in time)
 * and replaces the file atomically. A hung event loop stops the writes, which the judge reads as
 * stale; a check that fails says why. The healthcheck (`gpu-medic health`) only reads the file.
 */
import { rename, rm, writeFile } from 'node:fs/promises';
import type { Logger } from '../logger.ts';
import type { HealthReport } from './report.ts';

/** Resolves null when healthy, or a plain-words problem. */
export type HealthCheck = () => Promise<string | null>;

export interface HeartbeatOptions {
  file: string;
  role: string;
  intervalMs: number;
  checks: Record<string, HealthCheck>;
  logger: Logger;
  now?: () => Date;
}

export interface Heartbeat {
  /** Runs the checks and writes the file now (also what each tick does). */
  beat(): Promise<HealthReport>;
  /** Stops and removes the file: a stopped process must not look alive. */
  stop(): Promise<void>;
}

async function bounded(check: HealthCheck, ms: number): Promise<string | null> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      check().catch((e: unknown) => (e instanceof Error ? e.message : String(e))),
      new Promise<string>((r) => {
        timer = setTimeout(() => r(`no answer within ${ms} ms`), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export function startHeartbeat(o: HeartbeatOptions): Heartbeat {
  const now = o.now ?? (() => new Date());
  const checkMs = Math.min(2000, Math.max(100, Math.floor(o.intervalMs / 2)));
  const tmp = `${o.file}.${process.pid}.tmp`;
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  let lastBad = '';
  let inflight: Promise<unknown> = Promise.resolve();

  const beat = async (): Promise<HealthReport> => {
    const names = Object.keys(o.checks);
    const results = await Promise.all(names.map((n) => bounded(o.checks[n] ?? (async () => 'missing check'), checkMs)));
    const report: HealthReport = {
      role: o.role,
      pid: process.pid,
      at: now().toISOString(),
      intervalMs: o.intervalMs,
      checks: Object.fromEntries(names.map((n, i) => [n, results[i] ?? null])),
    };
    const bad = names
      .filter((_, i) => results[i] !== null)
      .map((n) => `${n}: ${report.checks[n]}`)
      .join('; ');
    if (bad !== lastBad) {
      // Log changes only, not every beat.
      if (bad) o.logger.warn({ checks: report.checks }, `unhealthy: ${bad}`);
      else o.logger.info('healthy again');
      lastBad = bad;
    }
    if (!stopped) {
      await writeFile(tmp, `${JSON.stringify(report)}\n`);
      if (stopped) await rm(tmp, { force: true });
      else await rename(tmp, o.file);
    }
    return report;
  };

  const tick = async (): Promise<void> => {
    try {
      const b = beat();
      inflight = b.catch(() => undefined);
      await b;
    } catch (err) {
      o.logger.warn({ err, file: o.file }, 'could not write the heartbeat file');
    }
    if (!stopped) timer = setTimeout(() => void tick(), o.intervalMs);
  };
  void tick();

  return {
    beat,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await inflight;
      await rm(o.file, { force: true });
      await rm(tmp, { force: true });
    },
  };
}
