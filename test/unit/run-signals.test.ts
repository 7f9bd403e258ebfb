/**
 * The crash rows' "outside the bound" check (test/faults/lib/run-signals.ts): a signal during a run
 * to any process but that run's holders. Records are built here with the timestamps the fleet gives
 * (milliseconds, Date.now() for a SIGKILL death), so the same-millisecond case is exact.
 */
import { describe, expect, it } from 'vitest';
import type { SignalRecord } from '../harness/fleet/types.ts';
import { markRun, outsideRun } from '../faults/lib/run-signals.ts';

const T = 1_796_297_594_075;

function rec(
  id: string,
  hostPid: number,
  signal: string,
  ts: number,
  kind: SignalRecord['kind'] = 'holder',
): SignalRecord {
  return { ts, id, machine: 'ct130', hostPid, containerPid: 100, cmdline: `proc ${id}`, signal, by: null, kind };
}

describe('outsideRun: signals during a run to processes that are not its holders', () => {
  // The previous run's cleanup SIGKILLs its leftover holder, awaits its death and returns; the next
  // run starts in the same millisecond (seen in CI on 2026-12-03: h7's death stamped at the next run's start).
  const prevKill = rec('h7', 11083, 'SIGKILL', T);
  const holders = [
    { id: 'h8', hostPid: 11200 },
    { id: 'h9', hostPid: 11204 },
  ];

  it("a death recorded before the run started is not the run's, even stamped in the run's first millisecond", () => {
    const mark = markRun([prevKill], T);
    expect(outsideRun(mark, [prevKill, rec('h9', 11204, 'SIGTERM', T + 5)], holders)).toEqual([]);
  });

  it('a SIGKILL to a non-holder after the start is outside, whatever its timestamp', () => {
    const mark = markRun([prevKill], T);
    const bystanderKill = rec('b1', 900, 'SIGKILL', T, 'bystander');
    const lateForOldHolder = rec('h7', 11083, 'SIGTERM', T + 40);
    expect(outsideRun(mark, [prevKill, bystanderKill, lateForOldHolder], holders)).toEqual([
      bystanderKill,
      lateForOldHolder,
    ]);
  });

  it('the same signal again (same process, same millisecond) after the start is outside, once', () => {
    const k = rec('b2', 901, 'SIGUSR1', T, 'bystander');
    const mark = markRun([k], T);
    expect(outsideRun(mark, [k, { ...k }], holders)).toEqual([k]);
  });

  it("a process on a holder's reused PID is not that holder", () => {
    const mark = markRun([], T);
    const other = rec('b3', 11200, 'SIGKILL', T + 1, 'bystander');
    expect(outsideRun(mark, [other], holders)).toEqual([other]);
  });
});
