/**
 * A lost GPU is never shown as fine, in `status`: a machine whose nvidia-smi answers `GPU is lost` or
 * `Driver/library version mismatch` was read, but its GPUs were not: no green mark, and the
 * `status all` row says what is wrong instead of `0 busy / 0 idle · 0 / 0 MiB`.
 */
import { describe, expect, it } from 'vitest';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import { GIB } from '../../src/gpu/snapshot.ts';
import type { NvidiaError } from '../../src/gpu/types.ts';
import type { IncidentMeta, LoggedEvent } from '../../src/incident/events.ts';
import { renderIncident } from '../../src/render/status.ts';
import { gpus } from '../unstick/seed-fleet.ts';

const LOST: NvidiaError = {
  kind: 'gpu_lost',
  message: 'Unable to determine the device handle for GPU0000:38:00.0: GPU is lost',
  busId: '00000000:38:00.0',
};
const MISMATCH: NvidiaError = {
  kind: 'nvml_version_mismatch',
  message: 'Failed to initialize NVML: Driver/library version mismatch',
  busId: null,
};

const meta = (kind: 'status' | 'status_all', targets: string[]): IncidentMeta => ({
  id: 'inc_20261130_031245_gpuerr',
  kind,
  requester: 'U0ALICE001',
  channel: 'C0ONCALL01',
  targets,
  text: 'status',
  reason: null,
  createdAt: '2026-11-30T03:12:45.000Z',
});

function snap(machineId: string, gpuError: NvidiaError | null): MachineSnapshot {
  return {
    machineId,
    view: 'host',
    takenAt: '2026-11-30T03:12:46.000Z',
    gpus: gpuError ? [] : gpus({ 0: 96_413 }),
    processes: [],
    holders: [],
    kernelMounts: [],
    ram: { totalBytes: 449 * GIB, usedBytes: 40 * GIB, availableBytes: null },
    gpuError,
  };
}

const events = (...snaps: MachineSnapshot[]): LoggedEvent[] => [
  ...snaps.map(
    (s, i): LoggedEvent => ({
      id: `1-${i}`,
      type: 'snapshot',
      at: s.takenAt,
      label: 'status',
      snapshot: s,
      commands: [],
    }),
  ),
  { id: '2-0', type: 'finished', at: '2026-11-30T03:12:47.000Z', outcome: 'failed', durationMs: 900 },
];

describe('status with GPUs in error', () => {
  it('a single machine whose GPU is lost: the parent is not green and names the error', () => {
    const parent = renderIncident(meta('status', ['kpro5']), events(snap('kpro5', LOST)))[0]?.text ?? '';
    expect(parent).not.toContain(':white_check_mark:');
    expect(parent).toContain('done; GPU error on `kpro5`: GPU is lost');
  });

  it('status all: the row says "GPU error", not "0 busy / 0 idle" and "0 / 0 MiB"; the parent counts it', () => {
    const views = renderIncident(
      meta('status_all', ['kpro5', 'kpro6']),
      events(snap('kpro5', MISMATCH), snap('kpro6', null)),
    );
    const summary = views.find((v) => v.key === 'summary');
    const table = summary?.blocks.find((b) => b.type === 'table') as
      | { rows: Array<Array<{ text: string }>> }
      | undefined;
    const rows = table?.rows.map((r) => r.map((c) => c.text)) ?? [];
    expect(rows[1]).toEqual([
      'kpro5',
      'GPU error: driver/library version mismatch',
      '-',
      '40 / 449 GiB (9%)',
      'gpu error',
    ]);
    expect(rows[2]?.[1]).toBe('1 busy / 7 idle');
    expect(views[0]?.text).not.toContain(':white_check_mark:');
    expect(views[0]?.text).toContain('done; GPU error on `kpro5`: driver/library version mismatch');
  });

  it('the snapshot message gives each error kind its own next step', () => {
    const lost = renderIncident(meta('status', ['kpro5']), events(snap('kpro5', LOST)))[1]?.text ?? '';
    expect(lost).toContain(
      'A reset will not help and nothing was signalled: drain kpro5, reboot it and check the hardware',
    );
    const mismatch = renderIncident(meta('status', ['kpro5']), events(snap('kpro5', MISMATCH)))[1]?.text ?? '';
    expect(mismatch).toContain('the NVIDIA driver was upgraded while the old kernel module stayed loaded');
    expect(mismatch).not.toContain('fallen off the bus');
  });

  it('every GPU read: still green', () => {
    expect(renderIncident(meta('status', ['kpro6']), events(snap('kpro6', null)))[0]?.text).toContain(
      ':white_check_mark: done',
    );
  });
});
