import { Gauge, type Registry } from 'prom-client';

/**
 * The process's peak resident set (the bot must stay small through a burst of commands), read at scrape time:
 * getrusage's ru_maxrss, which is /proc/<pid>/status VmHWM on Linux. prom-client's default
 * metrics give the resident set now and V8's heap (used, total, external) now; with the peak
 * beside them a miss shows whether the V8 heap or native memory grew.
 */
export function peakMemoryGauge(registry: Registry, prefix: string): void {
  new Gauge({
    name: `${prefix}process_resident_memory_peak_bytes`,
    help: 'Peak resident memory size of the process since it started, in bytes (VmHWM).',
    registers: [registry],
    collect() {
      // ru_maxrss is in KiB on Linux.
      this.set(process.resourceUsage().maxRSS * 1024);
    },
  });
}
