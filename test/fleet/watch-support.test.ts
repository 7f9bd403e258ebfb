/**
 * The fleet's support for the watchdog (so its alerts are tested on real processes), against real clients
 * over real OpenSSH: a host's kernel log read by its fake `journalctl -k` and `dmesg`, holders really stuck
 * in zombie (Z) and uninterruptible (D) state that nvidia-smi still lists, and `gpu_recovery_action` (with
 * the real refusal of drivers that predate it).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseXids } from '../../src/watchdog/xid.ts';
import { type Fleet, startFleet } from '../harness/fleet/index.ts';
import { procStat } from '../harness/fleet/state.ts';
import { onMachine } from './ssh-run.ts';

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({
    // The simulation itself is under test: its hosts take any shell line (the agent's tests are agent/test).
    access: 'shell',
    hosts: [
      { id: 'kpro5', gpus: 2 },
      { id: 'kpro6', gpus: 2 },
    ],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
}, 120_000);

afterAll(async () => {
  await fleet?.stop();
});

const apps = async (host: string): Promise<number[]> =>
  (await onMachine(fleet, host, 'nvidia-smi --query-compute-apps=pid --format=csv,noheader')).stdout
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map(Number);

describe('fleet support for the watchdog', () => {
  it('an Xid logged on a host is in its journalctl -k (short-unix, from --since on) and its dmesg (seconds since boot)', async () => {
    const before = Math.floor(Date.now() / 1000);
    await fleet.logXid('kpro5', 1, 79);
    const j = await onMachine(fleet, 'kpro5', `journalctl -k -q -o short-unix --no-pager --since=@${before}`);
    expect(j.code).toBe(0);
    expect(j.stdout).toMatch(
      /^\d+\.\d{6} kpro5 kernel: NVRM: Xid \(PCI:0000:02:00\): 79, pid=0, name=python3, GPU has fallen off the bus\.\n$/,
    );
    expect(parseXids(j.stdout).map((x) => [x.xid, x.pci])).toEqual([[79, '0000:02:00']]);
    const later = await onMachine(
      fleet,
      'kpro5',
      `journalctl -k -q -o short-unix --no-pager --since=@${before + 3600}`,
    );
    expect(later.stdout).toBe('');
    const d = await onMachine(fleet, 'kpro5', 'dmesg');
    expect(d.stdout).toMatch(/^\[ *\d+\.\d{6}\] NVRM: Xid \(PCI:0000:02:00\): 79, /);
    // The other host's log is its own.
    expect((await onMachine(fleet, 'kpro6', 'dmesg')).stdout).toBe('');
  });

  it('a host without journalctl answers "not found" (exit 127), as where it was never installed', async () => {
    await fleet.removeTool('kpro6', 'journalctl');
    const r = await onMachine(fleet, 'kpro6', 'journalctl -k');
    expect(r.code).toBe(127);
  });

  it('a zombie holder (Z) is still listed by the host nvidia-smi with its memory; released, it is gone and its memory free; no signal to it', async () => {
    const z = await fleet.spawnHolder('kpro5', { gpus: [{ index: 0, mib: 30000 }], stuck: 'Z' });
    expect(procStat('/proc', z.hostPid)?.state).toBe('Z');
    expect(await apps('kpro5')).toContain(z.hostPid);
    expect(fleet.gpuMemory('kpro5')[0]?.usedMiB).toBe(30000);
    await fleet.releaseStuck(z);
    expect(await apps('kpro5')).not.toContain(z.hostPid);
    expect(fleet.gpuMemory('kpro5')[0]?.usedMiB).toBe(0);
    expect(fleet.signals()).toEqual([]);
  });

  it('a holder in uninterruptible sleep (D) is listed; released, it runs on (S) and still holds', async () => {
    const d = await fleet.spawnHolder('ct129', { gpus: [{ index: 1, mib: 20000 }], stuck: 'D' });
    expect(procStat('/proc', d.hostPid)?.state).toBe('D');
    expect(await apps('kpro5')).toContain(d.hostPid);
    await fleet.releaseStuck(d);
    expect(procStat('/proc', d.hostPid)?.state).toBe('S');
    expect(await apps('kpro5')).toContain(d.hostPid);
    await fleet.endProcess(d);
  });

  it('gpu_recovery_action: None by default, what was set, and the real refusal of a driver without the field', async () => {
    const q = 'nvidia-smi --query-gpu=index,gpu_recovery_action --format=csv,noheader,nounits';
    expect((await onMachine(fleet, 'kpro6', q)).stdout).toBe('0, None\n1, None\n');
    await fleet.setRecoveryAction('kpro6', 1, 'GPU Reset');
    expect((await onMachine(fleet, 'kpro6', q)).stdout).toBe('0, None\n1, GPU Reset\n');
    await fleet.setRecoveryActionSupported('kpro6', false);
    const old = await onMachine(fleet, 'kpro6', q);
    expect([old.code, old.stdout]).toEqual([2, 'Field "gpu_recovery_action" is not a valid field to query.\n\n']);
    // Other queries still answer on that driver.
    expect((await onMachine(fleet, 'kpro6', 'nvidia-smi --query-gpu=index --format=csv,noheader')).stdout).toBe(
      '0\n1\n',
    );
  });
});
