/**
 * No false alerts after a restart: a just-started worker used to open one SSH connection per machine at once,
 * and on 200 machines 35 handshakes outlived the connect timeout: healthy machines were alerted as
 * unreachable. Here 70 machines sit behind real OpenSSH sshd (2 fleet hosts, each reached through 35
 * addresses of a handshake proxy, test/harness/handshake-proxy.ts: 70 endpoints, 70 handshakes). The proxy makes every
 * handshake slow and holds, unanswered until the client gives up, any connection that arrives while
 * `capacity` (the worker's default bound) handshakes are already in flight: a busy worker's CPU.
 *
 * What is asserted is the mechanism, not a timing margin: with the default bound the proxy never
 * sees more handshakes in flight than the bound, holds none, and no alert is raised. With the bound
 * lifted the same round opens 70 handshakes at once; the 38 past `capacity` are held, the retry of a
 * first-read connect timeout opens those 38 at once and 6 are held again, and machines that are fine
 * are alerted as unreachable: the false alert the bound prevents.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEnv } from '../../src/config/env.ts';
import { type HandshakeProxy, startHandshakeProxy } from '../harness/handshake-proxy.ts';
import { startWatchRig, type WatchRig } from './watch-rig.ts';

const FLEET_HOSTS = ['h1', 'h2'];
const MACHINES = Array.from({ length: 70 }, (_, i) => `m${String(i + 1).padStart(2, '0')}`);
const DEFAULT_BOUND = parseEnv({}, 'worker').env?.GPU_MEDIC_WATCH_MAX_CONNECTS ?? Number.NaN;
/**
 * The proxy's handshake budget: what the busy worker gets through within the connect timeout. The
 * default bound is this, so it has no slack to spare; a default raised past it fails the first test.
 */
const CAPACITY = 32;
/** Slow enough that a round's connections all arrive within it; far below the connect timeout. */
const HANDSHAKE_DELAY_MS = 1500;
const CONNECT_TIMEOUT_SEC = 5;

let rig: WatchRig;
let proxy: HandshakeProxy;

beforeAll(async () => {
  proxy = startHandshakeProxy({ capacity: CAPACITY, delayMs: HANDSHAKE_DELAY_MS });
  rig = await startWatchRig(
    { hosts: FLEET_HOSTS.map((id) => ({ id, gpus: 1 })), access: 'shell' },
    {
      inventory: async (fleet) => {
        const byId = new Map((fleet.hosts ?? []).map((h) => [h.id, h]));
        const hosts = [];
        for (const [i, id] of MACHINES.entries()) {
          const behind = byId.get(FLEET_HOSTS[i % FLEET_HOSTS.length] ?? '');
          if (behind?.port === undefined) throw new Error('fleet host without a port');
          hosts.push({ ...behind, id, port: await proxy.listen(behind.port) });
        }
        return { ...fleet, defaults: { ...fleet.defaults, connectTimeoutSec: CONNECT_TIMEOUT_SEC }, hosts };
      },
    },
  );
}, 120_000);

afterAll(async () => {
  await rig?.stop();
  await proxy?.stop();
});

async function unreachableAlerts(): Promise<string[]> {
  const raised: string[] = [];
  for (const id of MACHINES)
    if ((await rig.eventsOf(id, 'unreachable')).some((e) => e.type === 'alert_raised')) raised.push(id);
  return raised;
}

describe('a cold watchdog round over 70 machines whose handshakes are slow', () => {
  it('with the default bound: never more handshakes in flight than the bound, none held, no unreachable alert', async () => {
    proxy.resetStats();
    const results = await rig.round({ deps: { maxConcurrentReads: DEFAULT_BOUND, readSinceStart: new Set() } });
    expect(results.map((r) => r.machineId).sort()).toEqual(MACHINES);
    const s = proxy.stats();
    expect(s.mostInFlight).toBeLessThanOrEqual(DEFAULT_BOUND);
    expect(s.held).toBe(0);
    // One connection per machine: the bound is on handshakes, not only on reads.
    expect(s.accepted).toBe(MACHINES.length);
    expect(s.completed).toBe(MACHINES.length);
    expect(await unreachableAlerts()).toEqual([]);
  }, 60_000);

  it('with the bound lifted (a restarted worker, cold): handshakes past the budget are held, and healthy machines are alerted as unreachable', async () => {
    await rig.restartWorker();
    proxy.resetStats();
    await rig.round({ deps: { maxConcurrentReads: 1000, readSinceStart: new Set() } });
    const s = proxy.stats();
    expect(s.mostInFlight).toBe(CAPACITY);
    expect(s.held).toBeGreaterThan(MACHINES.length - CAPACITY);
    expect((await unreachableAlerts()).length).toBeGreaterThan(0);
  }, 60_000);
});
