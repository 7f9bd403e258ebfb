import { describe, expect, it } from 'vitest';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import {
  DEFAULT_WATCH_SETTINGS,
  EMPTY_WATCH_STATE,
  judge,
  type MachineReading,
  type WatchState,
} from '../../src/watchdog/judge.ts';
import { parseXids, recoveryActionAdvice, xidMeaning } from '../../src/watchdog/xid.ts';

const GiB = 2 ** 30;
const MIN = 60_000;
const T0 = Date.parse('2026-12-01T03:00:00Z');

function host(
  o: {
    used?: number[];
    apps?: Array<{ gpu: number; pid: number; mib: number }>;
    ramUsedGiB?: number;
    gpus?: number;
    error?: MachineSnapshot['gpuError'];
  } = {},
): MachineSnapshot {
  const n = o.gpus ?? 2;
  return {
    machineId: 'kpro5',
    view: 'host',
    takenAt: new Date(T0).toISOString(),
    gpus:
      o.error && !o.gpus
        ? []
        : Array.from({ length: n }, (_, i) => ({
            index: i,
            name: 'NVIDIA H200',
            busId: `00000000:${(i + 1).toString(16).padStart(2, '0').toUpperCase()}:00.0`,
            uuid: `GPU-0000000${i}-0000-0000-0000-000000000000`,
            memoryUsedMiB: o.used?.[i] ?? 0,
            memoryTotalMiB: 143771,
            utilizationPct: 0,
          })),
    processes: (o.apps ?? []).map((a) => ({
      gpuIndex: a.gpu,
      gpuUuid: `GPU-0000000${a.gpu}-0000-0000-0000-000000000000`,
      pid: a.pid,
      type: 'C',
      name: 'python3',
      usedMiB: a.mib,
    })),
    holders: [],
    kernelMounts: [],
    ram: { totalBytes: 449 * GiB, usedBytes: (o.ramUsedGiB ?? 40) * GiB, availableBytes: null },
    gpuError: o.error ?? null,
  };
}

const read = (
  at: number,
  snapshot: MachineSnapshot,
  extra: Partial<Extract<MachineReading, { ok: true }>> = {},
): MachineReading => ({ machineId: 'kpro5', at, ok: true, snapshot, ...extra });

/** Runs readings in order from the empty state; returns every change and the last state. */
function run(
  readings: MachineReading[],
  snoozes = {},
): { changes: Array<{ type: string; kind: string; at: number; sentence: string }>; state: WatchState } {
  let state = EMPTY_WATCH_STATE;
  const changes: Array<{ type: string; kind: string; at: number; sentence: string }> = [];
  for (const r of readings) {
    const j = judge(state, r, DEFAULT_WATCH_SETTINGS, snoozes);
    state = j.next;
    for (const c of j.changes) changes.push({ type: c.type, kind: c.alert.kind, at: r.at, sentence: c.alert.sentence });
  }
  return { changes, state };
}

describe('watchdog judgement', () => {
  it('ghost memory (the seed: 96,413 MiB that no process holds) is raised once it lasted 10 minutes, once, and cleared when it is gone', () => {
    const ghost = host({ used: [96413, 0] });
    const { changes } = run([
      read(T0, ghost),
      read(T0 + 5 * MIN, ghost),
      read(T0 + 10 * MIN, ghost),
      read(T0 + 15 * MIN, ghost),
      read(T0 + 20 * MIN, host()),
    ]);
    expect(changes).toEqual([
      {
        type: 'raise',
        kind: 'ghost_memory',
        at: T0 + 10 * MIN,
        sentence: 'GPU 0: 96,413 MiB in use that no process on the host holds.',
      },
      {
        type: 'clear',
        kind: 'ghost_memory',
        at: T0 + 20 * MIN,
        sentence: 'GPU 0: 96,413 MiB in use that no process on the host holds.',
      },
    ]);
  });

  it('memory held by a process anywhere on the host is not ghost memory; only the unheld part counts', () => {
    const held = host({ used: [49152, 0], apps: [{ gpu: 0, pid: 4242, mib: 40960 }] });
    const { changes } = run([read(T0, held), read(T0 + 11 * MIN, held)]);
    expect(changes.map((c) => c.sentence)).toEqual(['GPU 0: 8,192 MiB in use that no process on the host holds.']);
    const allHeld = host({ used: [40960, 0], apps: [{ gpu: 0, pid: 4242, mib: 40960 }] });
    expect(run([read(T0, allHeld), read(T0 + 11 * MIN, allHeld)]).changes).toEqual([]);
  });

  it('judging the same reading again (a restart before the post) changes nothing', () => {
    const r = read(T0, host({ ramUsedGiB: 439 }));
    const first = judge(EMPTY_WATCH_STATE, r);
    expect(first.changes.map((c) => c.type)).toEqual(['raise']);
    expect(judge(first.next, r)).toEqual({ next: first.next, changes: [] });
  });

  it('host RAM at 98 % raises, is edited as it changes, and clears below the threshold', () => {
    const { changes } = run([
      read(T0, host({ ramUsedGiB: 439 })),
      read(T0 + MIN, host({ ramUsedGiB: 439 })),
      read(T0 + 2 * MIN, host({ ramUsedGiB: 445 })),
      read(T0 + 3 * MIN, host({ ramUsedGiB: 100 })),
    ]);
    expect(changes.map((c) => [c.type, c.sentence])).toEqual([
      ['raise', 'host RAM 98 % used (439 of 449 GiB).'],
      ['update', 'host RAM 99 % used (445 of 449 GiB).'],
      ['clear', 'host RAM 99 % used (445 of 449 GiB).'],
    ]);
  });

  it('a holder in D or Z state while holding memory is raised at once, by PID', () => {
    const s = host({ used: [96413, 0], apps: [{ gpu: 0, pid: 4242, mib: 96413 }] });
    const { changes } = run([
      read(T0, s, { holderStates: { 4242: 'D' } }),
      read(T0 + MIN, s, { holderStates: { 4242: 'S' } }),
    ]);
    expect(changes.map((c) => [c.type, c.kind])).toEqual([
      ['raise', 'holder_stuck'],
      ['clear', 'holder_stuck'],
    ]);
    expect(changes[0]?.sentence).toBe(
      'host PID 4242 holds 96,413 MiB on GPU 0 and is in uninterruptible sleep (D): signals wait until the kernel call returns.',
    );
  });

  it('host RAM is judged on the host only: a container reading the same RAM raises no second alert, and one raised before still clears', () => {
    const ct = (at: number): MachineReading => ({
      machineId: 'ct129',
      at,
      ok: true,
      snapshot: { ...host({ ramUsedGiB: 439 }), machineId: 'ct129', view: 'container' },
    });
    expect(run([ct(T0), ct(T0 + MIN)]).changes).toEqual([]);
    const stale: WatchState = {
      ...EMPTY_WATCH_STATE,
      alerts: {
        'ct129/ram_high': {
          key: 'ct129/ram_high',
          kind: 'ram_high',
          machineId: 'ct129',
          gpu: null,
          since: T0,
          raisedAt: T0,
          sentence: 'host RAM 98 % used (439 of 449 GiB).',
          lastSeenAt: T0,
        },
      },
    };
    const j = judge(stale, ct(T0 + MIN));
    expect(j.changes.map((c) => [c.type, c.alert.key])).toEqual([['clear', 'ct129/ram_high']]);
  });

  it('fewer GPUs than last seen raises gpus_missing until the GPU is back', () => {
    const { changes } = run([
      read(T0, host({ gpus: 8 })),
      read(T0 + MIN, host({ gpus: 7 })),
      read(T0 + 2 * MIN, host({ gpus: 7 })),
      read(T0 + 3 * MIN, host({ gpus: 8 })),
    ]);
    expect(changes.map((c) => [c.type, c.kind, c.at - T0])).toEqual([
      ['raise', 'gpus_missing', MIN],
      ['clear', 'gpus_missing', 3 * MIN],
    ]);
  });

  it('an unreachable machine clears nothing it could not see, and a hung nvidia-smi is its own alert', () => {
    const ram = read(T0, host({ ramUsedGiB: 439 }));
    const down: MachineReading = { machineId: 'kpro5', at: T0 + MIN, ok: false, code: 'connect_failed' };
    const hung: MachineReading = { machineId: 'kpro5', at: T0 + 2 * MIN, ok: false, code: 'command_timeout' };
    const { changes, state } = run([ram, down, hung]);
    expect(changes.map((c) => [c.type, c.kind])).toEqual([
      ['raise', 'ram_high'],
      ['raise', 'unreachable'],
      ['raise', 'nvidia_smi_failing'],
      ['clear', 'unreachable'],
    ]);
    expect(
      Object.values(state.alerts)
        .map((a) => a.kind)
        .sort(),
    ).toEqual(['nvidia_smi_failing', 'ram_high']);
  });

  it('a driver that fails as a whole (version mismatch) is nvidia_smi_failing, not a ghost', () => {
    const s = host({
      error: {
        kind: 'nvml_version_mismatch',
        message: 'Failed to initialize NVML: Driver/library version mismatch',
        busId: null,
      },
    });
    const { changes } = run([read(T0, s), read(T0 + 11 * MIN, s)]);
    expect(changes.map((c) => [c.type, c.kind])).toEqual([['raise', 'nvidia_smi_failing']]);
  });

  it('a snooze on a machine or a GPU holds the raise back until it ends', () => {
    const ram = (m: number) => read(T0 + m * MIN, host({ ramUsedGiB: 439 }));
    expect(run([ram(0), ram(30), ram(61)], { kpro5: T0 + 60 * MIN }).changes.map((c) => [c.type, c.at - T0])).toEqual([
      ['raise', 61 * MIN],
    ]);
    const ghost = (m: number) => read(T0 + m * MIN, host({ used: [96413, 0] }));
    expect(run([ghost(0), ghost(11)], { 'kpro5/0': T0 + 60 * MIN }).changes).toEqual([]);
    expect(run([ghost(0), ghost(11)], { 'kpro5/1': T0 + 60 * MIN }).changes.map((c) => c.type)).toEqual(['raise']);
  });

  it('an Xid 79 from the kernel log is raised with what it means, tied to its GPU by bus id, and clears after an hour without another', () => {
    const xids = parseXids('[ 1843.30] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus\n');
    const { changes } = run([
      read(T0, host(), { xids }),
      read(T0 + 30 * MIN, host(), { xids: [] }),
      read(T0 + 61 * MIN, host(), { xids: [] }),
    ]);
    expect(changes.map((c) => [c.type, c.at - T0])).toEqual([
      ['raise', 0],
      ['clear', 61 * MIN],
    ]);
    expect(changes[0]?.sentence).toBe(
      'Xid 79 on PCI 0000:02:00 (GPU 1): GPU has fallen off the bus; a reset will not help: reboot the host, then check power, cooling and seating of the GPU.',
    );
  });
});

describe('Xid lines and recovery actions', () => {
  it('reads both driver formats, and the no-Xid "fallen off the bus" lines as Xid 79', () => {
    const log = [
      'Feb 14 05:03:41 gpu-1 kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus',
      '[ 2000.1] NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python3, DBE (double bit error) ECC error',
      '[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0',
      '               NVRM: (PCI ID: 10de:26b5) installed in this system has',
      '               NVRM: fallen off the bus and is not responding to commands.',
      '[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).',
      'kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link INIT',
    ].join('\n');
    expect(parseXids(log).map((x) => [x.xid, x.pci])).toEqual([
      [79, '0000:44:00'],
      [48, '0000:3b:00'],
      [79, '0000:b3:00.0'],
    ]);
  });

  it('says what an Xid means; an unknown one gets no guess', () => {
    expect(xidMeaning(79)?.resetHelps).toBe(false);
    expect(xidMeaning(48)?.resetHelps).toBe(true);
    expect(xidMeaning(9999)).toBeNull();
    const { changes } = run([read(T0, host(), { xids: parseXids('NVRM: Xid (PCI:0000:01:00): 9999, something new') })]);
    expect(changes[0]?.sentence).toBe(
      "Xid 9999 on PCI 0000:01:00 (GPU 0): not in gpu-medic's table; look it up in NVIDIA's Xid catalogue.",
    );
  });

  it('recovery actions: a reboot is not a reset; None and unknown values give no advice', () => {
    expect(recoveryActionAdvice('Node Reboot')).toMatch(/reboot of the host/);
    expect(recoveryActionAdvice('GPU Reset')).toMatch(/GPU reset/);
    expect(recoveryActionAdvice('None')).toBeNull();
    expect(recoveryActionAdvice('[N/A]')).toBeNull();
  });
});
