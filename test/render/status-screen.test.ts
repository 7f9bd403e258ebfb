/**
 * `/gpu status` fits one phone screen, since it is read on call at 3 a.m. The first reply of the seed case
 * (ct129 at 98 % host RAM with the hicache launch, 48 GiB on GPU 5 that no process holds) and of S2 (the two
 * hung ranks, RAM fine) is at most 20 lines: the table counts one line per GPU plus its header, prose counts
 * as it wraps at 80 columns (as Slack shows it: emoji codes one glyph, no backticks or asterisks). Its
 * Processes column names each GPU's holders, placed through the device files and the host's GPU map; only the
 * flags that need action follow, each once; fuser's raw rows are in the details message.
 */
import { describe, expect, it } from 'vitest';
import { containerHolderRows, readableCommand } from '../../src/gpu/gpu-holder-rows.ts';
import type { GpuPassing } from '../../src/gpu/gpu-map.ts';
import { causesInSnapshot } from '../../src/gpu/snapshot-causes.ts';
import { GIB, type MachineSnapshot } from '../../src/gpu/snapshot.ts';
import type { IncidentMeta, LoggedEvent } from '../../src/incident/events.ts';
import { renderIncident, type MessageView } from '../../src/render/status.ts';
import { seedS2, uuid } from '../unstick/seed-fleet.ts';

const SEED_LAUNCH =
  'python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300 --hicache-write-policy write_through --hicache-io-backend kernel';

/** What ct129 was given, by kpro5's own view: all 8 GPUs, minor i is GPU i. */
const PASSING: GpuPassing = {
  vmid: 129,
  minors: [0, 1, 2, 3, 4, 5, 6, 7],
  problem: null,
  hostMinors: Array.from({ length: 8 }, (_, i) => ({ uuid: uuid(i), busId: null, minor: i })),
};

function ct129(opts: { ramUsedGiB: number; leakGpu5: boolean; launch: string | null }): MachineSnapshot {
  const seed = seedS2();
  const gpus = seed.host.gpus.map((g) => ({
    ...g,
    memoryUsedMiB: g.index === 5 ? (opts.leakGpu5 ? 49_152 : 0) : g.memoryUsedMiB,
  }));
  const s: MachineSnapshot = {
    machineId: 'ct129',
    view: 'container',
    takenAt: '2026-12-01T20:52:24.000Z',
    gpus,
    processes: [],
    holders: [...seed.container.holders],
    kernelMounts: [],
    ram: { totalBytes: 449 * GIB, usedBytes: opts.ramUsedGiB * GIB, availableBytes: null },
    gpuError: null,
  };
  const host = {
    hostId: 'kpro5',
    gpus,
    passing: PASSING,
    // ct131's job is not in ct129: only the two ranks are host apps of this container.
    readings: { ...seed.host, apps: seed.host.apps.filter((a) => a.gpuIndex !== 5) },
  };
  const rows = containerHolderRows(gpus, s.holders, seed.container.procs, host, null);
  return {
    ...s,
    holderRows: rows.rows,
    ...(rows.note ? { holderRowsNote: rows.note } : {}),
    rootCauses: causesInSnapshot(s, opts.launch ? [opts.launch] : []),
  };
}

const META: IncidentMeta = {
  id: 'inc_20261201_205224_d0od8xsy',
  kind: 'status',
  requester: 'U0ALICE',
  channel: 'C0ONCALL01',
  targets: ['ct129'],
  text: 'status ct129',
  reason: null,
  createdAt: '2026-12-01T20:52:24.000Z',
};

function reply(s: MachineSnapshot): { first: MessageView; all: MessageView[] } {
  const events: LoggedEvent[] = [
    { type: 'requested', at: META.createdAt, id: '1-0' },
    { type: 'snapshot', at: META.createdAt, label: 'status', snapshot: s, commands: [], id: '1-1' },
  ];
  const all = renderIncident(META, events);
  const first = all.find((v) => v.key === 'ev:1-1');
  if (!first) throw new Error('no status reply');
  return { first, all };
}

/** Lines a line of mrkdwn takes at 80 columns, word-wrapped, as Slack shows it. */
function wrapped(line: string): number {
  const shown = line.replace(/:[a-z_]+:/g, 'E').replace(/[`*]/g, '');
  let lines = 1;
  let col = 0;
  for (const word of shown.split(' ')) {
    const w = word.length;
    if (col === 0) col = w;
    else if (col + 1 + w <= 80) col += 1 + w;
    else {
      lines++;
      col = w;
    }
    while (col > 80) {
      lines++;
      col -= 80;
    }
  }
  return lines;
}

type AnyBlock = { type: string; text?: { text: string }; elements?: Array<{ text?: string }>; rows?: unknown[] };

/** Screen lines of one message's blocks: a table is its rows (header included), prose wraps at 80. */
function screenLines(v: MessageView): number {
  let n = 0;
  for (const b of v.blocks as AnyBlock[]) {
    if (b.type === 'table') n += b.rows?.length ?? 0;
    const texts =
      b.type === 'section'
        ? [b.text?.text ?? '']
        : b.type === 'context'
          ? (b.elements ?? []).map((e) => e.text ?? '')
          : [];
    for (const t of texts) for (const l of t.split('\n')) n += wrapped(l);
  }
  return n;
}

function processCells(v: MessageView): string[] {
  const table = (v.blocks as AnyBlock[]).find((b) => b.type === 'table');
  return ((table?.rows ?? []) as Array<Array<{ text: string }>>).map((r) => r[4]?.text ?? '');
}

describe('the status reply fits one phone screen', () => {
  const seedCase = ct129({ ramUsedGiB: 439, leakGpu5: true, launch: SEED_LAUNCH });
  const s2Case = ct129({ ramUsedGiB: 40, leakGpu5: false, launch: null });

  it('seed case: the first message is at most 20 lines at 80 columns, the table one line per GPU plus its header', () => {
    const { first } = reply(seedCase);
    expect(processCells(first)).toHaveLength(9);
    expect(screenLines(first)).toBeLessThanOrEqual(20);
  });

  it('S2 case: the first message is at most 20 lines', () => {
    expect(screenLines(reply(s2Case).first)).toBeLessThanOrEqual(20);
  });

  it("the Processes column names each GPU's holders: container PID, host PID, the command line's name, MiB", () => {
    const cells = processCells(reply(seedCase).first);
    expect(cells[1]).toBe('57 (host 812345) sglang::scheduler_TP0 96,413 MiB');
    expect(cells[3]).toBe('63 (host 812351) sglang::scheduler_TP2 96,417 MiB');
    // GPU 5's memory has no holder in ct129; the monitor with /dev/nvidia0 open holds no memory.
    expect(cells[6]).toBe('-');
    expect(cells[1]).not.toContain('python3');
    // The plain-text fallback shows the same holder in full (no cell cut to "…").
    expect(reply(seedCase).first.text).toContain('57 (host 812345) sglang::scheduler_TP0 96,413 MiB');
  });

  it('only the flags that need action, each once: one line for memory no holder explains, the hicache cause said once', () => {
    const { first } = reply(seedCase);
    const t = first.text;
    expect(t.match(/--hicache-size/g)).toHaveLength(1);
    expect(t.match(/in use and no process/g)).toHaveLength(1);
    expect(t).toMatch(/GPU 5: 49,152 MiB in use and no process of `ct129` holds it.*Next step:/);
    expect(t).toMatch(/RAM pressure: 98% used \(439 of 449 GiB\).*Next step:/);
    expect(t).not.toMatch(/RAM: 439/);
    expect(reply(s2Case).first.text).not.toMatch(/in use and no process/);
  });

  it("fuser's raw rows (access flags, the 15-character comm) are in the details message, not the first screen", () => {
    const { first, all } = reply(seedCase);
    expect(first.text).not.toContain('F...m');
    const details = all.find((v) => v.key === 'ev:1-1:details');
    expect(details?.text).toContain('F...m');
    expect(details?.text).toContain('/dev/nvidia0');
    expect(first.text).toContain('details message');
  });
});

describe('readableCommand', () => {
  it('names the program from its command line, never its arguments', () => {
    expect(readableCommand(SEED_LAUNCH)).toBe('python3 -m sglang.launch_server');
    expect(readableCommand('sglang::scheduler_TP0')).toBe('sglang::scheduler_TP0');
    expect(readableCommand('/usr/bin/python3.11 /opt/train.py --token=abc')).toBe('python3.11 train.py');
    expect(readableCommand('/opt/bin/server --api-key secret')).toBe('server');
    expect(readableCommand('   ')).toBeNull();
  });
});
