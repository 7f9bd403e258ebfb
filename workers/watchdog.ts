/**
 * The watchdog round, which warns before a user has to ask: a `watch` job from the site queue's job scheduler
 * reads every machine of the site in parallel (at most `maxConcurrentReads` at once;
 * src/readings/watch-read.ts, each bounded by the command timeout), and as soon as one machine's reading is
 * in, judges it (src/watchdog/judge.ts) against its stored state and active snoozes and commits state, alert
 * incidents and events in one atomic step (src/watch-store/watch-round-store.ts). So a machine that hangs
 * delays only its own alerts.
 *
 * Exactly once: the commit is a compare-and-set on the stored state; when another round committed
 * first, this one judges its reading again against what is stored now (the judge is idempotent
 * against the state it produced), and a reading older than the one already judged is dropped.
 * Read-only: no target lock is taken or waited for, nothing is signalled or reset.
 */
import type { Inventory } from '../src/config/inventory.ts';
import { listMachines, type Machine, routeFor } from '../src/config/machines.ts';
import type { Logger } from '../src/logger.ts';
import { readForWatch, type WatchReadResult } from '../src/readings/watch-read.ts';
import type { WatchJob } from '../src/queue/jobs.ts';
import type { Executor } from '../src/ssh/types.ts';
import type { SnoozeStore } from '../src/watch-store/snooze-store.ts';
import type { WatchRoundStore } from '../src/watch-store/watch-round-store.ts';
import {
  type AlertChange,
  judge,
  type MachineReading,
  type WatchSettings,
  type WatchState,
} from '../src/watchdog/judge.ts';
import type { KernelLogCursor } from '../src/watchdog/kernel-log.ts';
import { gpuReadingsOf, type MachineGlance } from '../src/watchdog/watch-glance.ts';

export interface WatchdogDeps {
  inventory: Inventory;
  executor: Executor;
  store: WatchRoundStore;
  snoozes: SnoozeStore;
  settings: WatchSettings;
  now(): Date;
  commandTimeoutMs: number;
  logger: Logger;
  /**
   * Machines read at once (default 32). A cold round over 200 machines opened 200 SSH connections
   * at once, and on a busy worker some handshakes outlived the connect timeout: machines that were
   * fine were alerted as unreachable (the bench saw 35). A hung machine holds one slot for its
   * command timeout, so it still delays only its own alert while fewer than this many hang.
   */
  maxConcurrentReads?: number;
  /**
   * Machines this worker has read since it started. A machine's first read that fails with
   * `connect_timeout` is read once more before it is judged: a just-started worker connects to
   * every machine cold, and a handshake late because of that is no outage. Absent: no second read.
   */
  readSinceStart?: Set<string>;
  /** Test seam: runs between judging and the commit (a crash injected here must lose and double nothing). */
  beforeCommit?: (machineId: string) => Promise<void>;
}

export interface MachineRoundResult {
  machineId: string;
  /** What was committed for it (empty: nothing changed, or a newer reading was already judged). */
  changes: AlertChange[];
  /** Why nothing was committed, when nothing was. */
  skipped: 'newer_reading_judged' | null;
  /** Compare-and-set attempts (more than 1: another round committed in between). */
  attempts: number;
}

const MAX_ATTEMPTS = 10;
const DEFAULT_CONCURRENT_READS = 32;

/** `Promise.allSettled` over `items`, with at most `limit` running at once, results in input order. */
async function settleAtMost<T, R>(
  items: readonly T[],
  limit: number,
  run: (item: T) => Promise<R>,
): Promise<Array<PromiseSettledResult<R>>> {
  const out: Array<PromiseSettledResult<R>> = new Array(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      const item = items[i] as T;
      try {
        out[i] = { status: 'fulfilled', value: await run(item) };
      } catch (reason) {
        out[i] = { status: 'rejected', reason };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return out;
}

/** One round over the job's site; resolves with one result per machine; rejects if any machine could not be committed. */
export async function runWatchJob(job: WatchJob, deps: WatchdogDeps): Promise<MachineRoundResult[]> {
  const machines = listMachines(deps.inventory).filter((m) => m.site === job.site);
  const settled = await settleAtMost(machines, Math.max(1, deps.maxConcurrentReads ?? DEFAULT_CONCURRENT_READS), (m) =>
    watchMachine(m, deps),
  );
  const failed: string[] = [];
  const out: MachineRoundResult[] = [];
  settled.forEach((s, i) => {
    const id = machines[i]?.id ?? '?';
    if (s.status === 'fulfilled') out.push(s.value);
    else {
      failed.push(id);
      deps.logger.warn({ machine: id, err: s.reason }, 'watchdog: machine not judged this round');
    }
  });
  if (failed.length > 0) throw new Error(`watchdog round for site ${job.site}: not judged: ${failed.join(', ')}`);
  return out;
}

/** One machine: read, then judge and commit (again, if another round committed first). */
async function watchMachine(machine: Machine, deps: WatchdogDeps): Promise<MachineRoundResult> {
  const route = routeFor(deps.inventory, machine.id);
  const first = await deps.store.load(machine.id);
  if (first.damaged)
    deps.logger.warn({ machine: machine.id }, 'watchdog: stored state unreadable; judging from an empty state');
  const readOnce = async (): Promise<WatchReadResult> =>
    route
      ? readForWatch(
          machine,
          route,
          { exec: (r, s) => deps.executor.exec(r, s), now: deps.now, commandTimeoutMs: deps.commandTimeoutMs },
          first.state.kernelLog,
          { ramPct: deps.settings.ramPct },
        )
      : {
          reading: { machineId: machine.id, at: deps.now().getTime(), ok: false as const, code: 'target_unknown' },
          kernelLog: undefined,
          commands: [],
          gaps: [],
        };
  let read = await readOnce();
  const seen = deps.readSinceStart;
  if (seen && !seen.has(machine.id) && !read.reading.ok && read.reading.code === 'connect_timeout') {
    deps.logger.info(
      { machine: machine.id },
      'watchdog: the first connection since this worker started timed out; reading the machine again before judging it',
    );
    read = await readOnce();
  }
  seen?.add(machine.id);
  if (read.gaps.length > 0)
    deps.logger.warn({ machine: machine.id, gaps: read.gaps }, 'watchdog: part of the reading is missing');
  let stored = first;
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    if (attempt > 1) stored = await deps.store.load(machine.id);
    if ((stored.state.lastReadingAt ?? 0) > read.reading.at)
      return { machineId: machine.id, changes: [], skipped: 'newer_reading_judged', attempts: attempt };
    const snoozes = await deps.snoozes.active(read.reading.at);
    const { next, changes } = judge(stored.state, read.reading, deps.settings, snoozes);
    const cursor = laterCursor(stored.state.kernelLog, read.kernelLog);
    const toStore: WatchState = cursor === undefined ? next : { ...next, kernelLog: cursor };
    await deps.beforeCommit?.(machine.id);
    if (
      await deps.store.commit(
        machine.id,
        stored.raw,
        toStore,
        changes,
        glanceOf(read.reading, toStore),
        read.reading.at,
      )
    ) {
      if (read.reading.ok) await deps.store.markGoodRead(machine.id, read.reading.at);
      return { machineId: machine.id, changes, skipped: null, attempts: attempt };
    }
  }
  throw new Error(`watchdog: the state of ${machine.id} kept changing under ${MAX_ATTEMPTS} commits`);
}

/** The cursor further along (two rounds may both have read the log); a new source or boot wins. */
function laterCursor(
  stored: KernelLogCursor | undefined,
  read: KernelLogCursor | undefined,
): KernelLogCursor | undefined {
  if (read === undefined) return stored;
  if (stored === undefined) return read;
  if (stored.source === 'journal' && read.source === 'journal')
    return stored.lastUs > read.lastUs ? { ...read, lastUs: stored.lastUs } : read;
  if (stored.source === 'dmesg' && read.source === 'dmesg' && stored.bootId === read.bootId)
    return stored.lastSec > read.lastSec ? stored : read;
  return read;
}

function glanceOf(r: MachineReading, state: WatchState): MachineGlance {
  const openAlerts = Object.values(state.alerts).filter(
    (a) => a.machineId === r.machineId && a.raisedAt !== null,
  ).length;
  if (!r.ok)
    return {
      machineId: r.machineId,
      at: r.at,
      ok: false,
      code: /^[a-z_]{1,40}$/.test(r.code) ? r.code : 'unknown',
      gpus: 0,
      gpuMemoryUsedMiB: 0,
      gpuMemoryTotalMiB: 0,
      ramPct: null,
      openAlerts,
    };
  const s = r.snapshot;
  const ram =
    s.ram && s.ram.totalBytes > 0
      ? Math.min(100, Math.max(0, Math.round((s.ram.usedBytes / s.ram.totalBytes) * 100)))
      : null;
  return {
    machineId: r.machineId,
    at: r.at,
    ok: true,
    code: null,
    gpus: s.gpus.length,
    gpuMemoryUsedMiB: s.gpus.reduce((a, g) => a + Math.max(0, g.memoryUsedMiB ?? 0), 0),
    gpuMemoryTotalMiB: s.gpus.reduce((a, g) => a + Math.max(0, g.memoryTotalMiB ?? 0), 0),
    ramPct: ram,
    openAlerts,
    gpuReadings: gpuReadingsOf(s),
    gpuError: s.gpuError !== null,
    ramUsedBytes: s.view === 'host' && s.ram ? Math.max(0, s.ram.usedBytes) : null,
    ramTotalBytes: s.view === 'host' && s.ram ? Math.max(0, s.ram.totalBytes) : null,
  };
}
