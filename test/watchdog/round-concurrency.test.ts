/**
 * A round reads at most `maxConcurrentReads` machines at once (a cold round over 200 machines used
 * to open 200 SSH connections together, and on a busy worker handshakes outlived the connect
 * timeout: healthy machines were alerted as unreachable). Real fleet, real SSH executor, real Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CodedError, ErrorCode } from '../../src/errors.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { startWatchRig, type WatchRig } from './watch-rig.ts';

let rig: WatchRig;
const HOSTS = ['c1', 'c2', 'c3', 'c4', 'c5'];

beforeAll(async () => {
  rig = await startWatchRig({ hosts: HOSTS.map((id) => ({ id, gpus: 1 })) }, { commandTimeoutSec: 6 });
}, 120_000);

afterAll(async () => {
  await rig?.stop();
});

/** The executor, counting the machines with a command in flight at the same moment. */
function counting(base: Executor): { executor: Executor; most: () => number } {
  const inFlight = new Map<string, number>();
  let most = 0;
  return {
    most: () => most,
    executor: {
      async exec(route, spec) {
        const id = route.kind === 'direct' ? route.endpoint.machineId : `${route.host.machineId}/${route.vmid}`;
        inFlight.set(id, (inFlight.get(id) ?? 0) + 1);
        most = Math.max(most, [...inFlight.values()].filter((n) => n > 0).length);
        try {
          return await base.exec(route, spec);
        } finally {
          inFlight.set(id, (inFlight.get(id) ?? 1) - 1);
        }
      },
      close: () => base.close(),
    },
  };
}

describe('a watchdog round with a cap on machines read at once', () => {
  it('reads no more than the cap at a time and still judges every machine', async () => {
    const c = counting(rig.deps().executor);
    const results = await rig.round({ deps: { executor: c.executor, maxConcurrentReads: 2 } });
    expect(results.map((r) => r.machineId).sort()).toEqual(HOSTS);
    expect(c.most()).toBe(2);
  });

  it('a hung machine holds one slot: the others are still read and judged in the same round', async () => {
    await rig.fleet.setHang('c1', true);
    try {
      const c = counting(rig.deps().executor);
      const results = await rig.round({ deps: { executor: c.executor, maxConcurrentReads: 2 } });
      expect(results.map((r) => r.machineId).sort()).toEqual(HOSTS);
      expect(c.most()).toBeLessThanOrEqual(2);
      const hung = await rig.eventsOf('c1', 'nvidia_smi_failing');
      expect(hung.map((e) => e.type)).toEqual(['alert_raised']);
      for (const id of HOSTS.slice(1)) expect(await rig.eventsOf(id, 'nvidia_smi_failing')).toEqual([]);
    } finally {
      await rig.fleet.setHang('c1', false);
    }
  });
});

/** The executor, whose first connection to each listed machine times out in the handshake (as on a worker just started). */
function slowFirstHandshake(base: Executor, slow: ReadonlySet<string>): { executor: Executor; timedOut: string[] } {
  const timedOut: string[] = [];
  const done = new Set<string>();
  return {
    timedOut,
    executor: {
      async exec(route, spec) {
        const id = route.kind === 'direct' ? route.endpoint.machineId : route.host.machineId;
        if (slow.has(id) && !done.has(id)) {
          done.add(id);
          timedOut.push(id);
          throw new CodedError(
            ErrorCode.ConnectTimeout,
            `SSH handshake with ${id} did not finish within the connect timeout`,
          );
        }
        return base.exec(route, spec);
      },
      close: () => base.close(),
    },
  };
}

describe('the first round after a worker start', () => {
  it('a connect timeout on a machine\'s first read is read again before it becomes an alert: no false "unreachable"; a later one is an alert', async () => {
    const readSinceStart = new Set<string>();
    const c = slowFirstHandshake(rig.deps().executor, new Set(HOSTS));
    const results = await rig.round({ deps: { executor: c.executor, maxConcurrentReads: 2, readSinceStart } });
    expect(results.map((r) => r.machineId).sort()).toEqual(HOSTS);
    expect([...c.timedOut].sort()).toEqual(HOSTS);
    for (const id of HOSTS) expect(await rig.eventsOf(id, 'unreachable')).toEqual([]);
    // Past its first read, a connect timeout is what it says: the machine is alerted.
    const again = slowFirstHandshake(rig.deps().executor, new Set(['c3']));
    await rig.round({ deps: { executor: again.executor, readSinceStart } });
    expect((await rig.eventsOf('c3', 'unreachable')).map((e) => e.type)).toEqual(['alert_raised']);
  });
});
