/** The judge's recovery_action condition and its state bookkeeping (pure). */
import { describe, expect, it } from 'vitest';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import { DEFAULT_WATCH_SETTINGS, EMPTY_WATCH_STATE, judge, type MachineReading } from '../../src/watchdog/judge.ts';

const T0 = Date.parse('2026-12-01T03:00:00Z');
const snap: MachineSnapshot = {
  machineId: 'kpro5',
  view: 'host',
  takenAt: new Date(T0).toISOString(),
  gpus: [0, 1].map((i) => ({
    index: i,
    name: 'NVIDIA H200',
    busId: `00000000:0${i + 1}:00.0`,
    uuid: `GPU-0000000${i}-0000-0000-0000-000000000000`,
    memoryUsedMiB: 0,
    memoryTotalMiB: 143771,
    utilizationPct: 0,
  })),
  processes: [],
  holders: [],
  kernelMounts: [],
  ram: { totalBytes: 449 * 2 ** 30, usedBytes: 40 * 2 ** 30, availableBytes: null },
  gpuError: null,
};
const read = (at: number, actions?: Array<{ gpu: number; action: string }>): MachineReading => ({
  machineId: 'kpro5',
  at,
  ok: true,
  snapshot: snap,
  ...(actions
    ? { recoveryActions: actions.map((a) => ({ ...a, uuid: `GPU-0000000${a.gpu}-0000-0000-0000-000000000000` })) }
    : {}),
});

describe('recovery action', () => {
  it('raised per GPU with what the driver asks for, cleared at None; a reading without the field clears nothing', () => {
    const a = judge(
      EMPTY_WATCH_STATE,
      read(T0, [
        { gpu: 0, action: 'None' },
        { gpu: 1, action: 'Drain and Reset' },
      ]),
    );
    expect(a.changes.map((c) => [c.type, c.alert.key, c.alert.gpu, c.alert.sentence])).toEqual([
      [
        'raise',
        'kpro5/recovery_action/GPU-00000001-0000-0000-0000-000000000000',
        1,
        'GPU 1: the driver asks to move the work off this GPU, then reset it.',
      ],
    ]);
    expect(judge(a.next, read(T0 + 1000)).changes).toEqual([]);
    expect(
      judge(
        a.next,
        read(T0 + 2000, [
          { gpu: 0, action: 'None' },
          { gpu: 1, action: 'None' },
        ]),
      ).changes.map((c) => c.type),
    ).toEqual(['clear']);
  });

  it('a value gpu-medic does not know is raised without repeating it (machine text stays out of the sentence)', () => {
    const { changes } = judge(EMPTY_WATCH_STATE, read(T0, [{ gpu: 0, action: 'Reset Fabric' }]));
    expect(changes[0]?.alert.sentence).toBe(
      "GPU 0: the driver reports a recovery action gpu-medic does not know: see `nvidia-smi -q` on the host and NVIDIA's documentation.",
    );
  });

  it('the state remembers the newest reading judged, and keeps a stored kernel-log cursor', () => {
    const prev = {
      ...EMPTY_WATCH_STATE,
      lastReadingAt: T0 + 5000,
      kernelLog: { source: 'journal' as const, lastUs: 1, readAtSec: 2 },
    };
    const { next } = judge(prev, read(T0 + 9000), DEFAULT_WATCH_SETTINGS);
    expect(next.lastReadingAt).toBe(T0 + 9000);
    expect(next.kernelLog).toEqual({ source: 'journal', lastUs: 1, readAtSec: 2 });
  });
});
