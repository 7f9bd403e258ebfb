import { Gauge, type Registry } from 'prom-client';
import type { ConditionKind, WatchState } from '../watchdog/judge.ts';

/**
 * Watchdog gauges, read from Redis at scrape time (as the GPU metrics are), so every worker of the
 * site serves the same numbers whichever of them ran the round. Cardinality: one series per
 * inventory machine of the worker's sites for the age, one per alert kind for the open alerts.
 */
export interface WatchSnapshot {
  /** Machine id → when its last good reading was taken (ms); a machine never read well is absent. */
  lastGood: ReadonlyMap<string, number>;
  /** The stored state of each machine of the worker's sites. */
  states: readonly WatchState[];
}

/** Open (raised, not cleared) watchdog alerts by kind, every kind present (pure). */
function openAlertsByKind(states: readonly WatchState[], kinds: readonly ConditionKind[]): Map<string, number> {
  const out = new Map<string, number>(kinds.map((k) => [k, 0]));
  for (const s of states)
    for (const a of Object.values(s.alerts)) {
      const n = out.get(a.kind);
      if (a.raisedAt !== null && n !== undefined) out.set(a.kind, n + 1);
    }
  return out;
}

const AGE = 'gpu_medic_watch_last_good_read_age_seconds';
const OPEN = 'gpu_medic_watch_open_alerts';

/** Registers the gauges; each scrape reads the snapshot once (`read`) and sets both from it. */
export function registerWatchMetrics(
  registry: Registry,
  read: () => Promise<WatchSnapshot>,
  kinds: readonly ConditionKind[],
  now: () => number,
): void {
  let pending: Promise<void> | null = null;
  const refresh = (): Promise<void> => {
    pending ??= read()
      .then((snap) => {
        age.reset();
        for (const [machine, at] of snap.lastGood) age.set({ machine }, Math.max(0, (now() - at) / 1000));
        for (const [kind, n] of openAlertsByKind(snap.states, kinds)) open.set({ kind }, n);
      })
      .finally(() => {
        pending = null;
      });
    return pending;
  };
  // A restarted worker group in the same process registers again: its reader replaces the old one.
  registry.removeSingleMetric(AGE);
  registry.removeSingleMetric(OPEN);
  const age = new Gauge({
    name: AGE,
    help: "Seconds since the watchdog's last good reading of the machine (absent until its first good reading).",
    labelNames: ['machine'],
    registers: [registry],
    async collect() {
      await refresh();
    },
  });
  const open = new Gauge({
    name: OPEN,
    help: 'Open (raised, not cleared) watchdog alerts, by kind.',
    labelNames: ['kind'],
    registers: [registry],
    async collect() {
      await refresh();
    },
  });
}
