/**
 * Which of the fleet's signal records belong to one crash run, for the check that nothing but the
 * run's holders was signalled.
 *
 * A record belongs to a run when it was not yet in `fleet.signals()` as the run started: not "its
 * timestamp is at or after the start". Timestamps are milliseconds, and the previous run's cleanup
 * SIGKILLs its leftover holder, whose death the fleet stamps with Date.now() before that cleanup's
 * `await exited` returns (the fleet's exit handler is attached first); the next run can start in the
 * same millisecond, and a timestamp bound then counts that death as the new run's (CI, 2026-12-03).
 * Every record there at the start is out; every one that appears after it is in, whatever its stamp.
 * A record is for a holder when it is for that fleet process (its id), not for its PID: a
 * process on a reused PID is another process.
 */
import type { FleetProcess, SignalRecord } from '../../harness/fleet/types.ts';

export interface RunMark {
  /** Date.now() when the run started (for durations). */
  started: number;
  /** The fleet's records at that moment. */
  seen: readonly SignalRecord[];
}

export function markRun(records: readonly SignalRecord[], started: number = Date.now()): RunMark {
  return { started, seen: [...records] };
}

const keyOf = (r: SignalRecord): string => `${r.id} ${r.signal} ${r.ts} ${r.by}`;

/** The records not in the mark (as a multiset: the same record twice, once before, is one new). */
function recordsSince(mark: RunMark, records: readonly SignalRecord[]): SignalRecord[] {
  const left = new Map<string, number>();
  for (const r of mark.seen) left.set(keyOf(r), (left.get(keyOf(r)) ?? 0) + 1);
  return records.filter((r) => {
    const n = left.get(keyOf(r)) ?? 0;
    if (n === 0) return true;
    left.set(keyOf(r), n - 1);
    return false;
  });
}

/** Signals the fleet recorded during the run for any process that is not one of the run's holders. */
export function outsideRun(
  mark: RunMark,
  records: readonly SignalRecord[],
  holders: readonly Pick<FleetProcess, 'id'>[],
): SignalRecord[] {
  return recordsSince(mark, records).filter((r) => !holders.some((h) => h.id === r.id));
}

/** The holders as a failure message names them: `h8 (host PID 11200)`. */
export function namesOf(holders: readonly Pick<FleetProcess, 'id' | 'hostPid'>[]): string {
  return holders.map((h) => `${h.id} (host PID ${h.hostPid})`).join(', ');
}
