/**
 * The status thread's Why lines (a thread says why, not only what): each root cause the read kept on the
 * snapshot, its flag names as code; or, when the holders' command lines could not be read, that they were not
 * (escaped like any machine text), never silence. And the read itself: a command-line read that hangs leaves
 * the snapshot standing, with the reason.
 */
import { describe, expect, it } from 'vitest';
import type { Machine } from '../../src/config/machines.ts';
import { rootCauses } from '../../src/gpu/root-cause.ts';
import { GIB, type MachineSnapshot } from '../../src/gpu/snapshot.ts';
import { takeSnapshot } from '../../src/readings/snapshot.ts';
import { READ_PROCS_SCRIPT } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { snapshotViews, whyLines } from '../../src/render/status.ts';
import type { CommandSpec } from '../../src/agent-grammar/command-spec.ts';
import type { ExecResult, Route } from '../../src/ssh/types.ts';
import { gpus, uuid } from '../unstick/seed-fleet.ts';

const SEED = 'python3 -m sglang.launch_server --tp-size 8 --enable-hierarchical-cache --hicache-size 300';

function snap(extra: Partial<MachineSnapshot>): MachineSnapshot {
  return {
    machineId: 'kpro5',
    view: 'host',
    takenAt: '2026-12-01T12:00:00.000Z',
    gpus: gpus({ 0: 96_413 }),
    processes: [{ gpuIndex: 0, gpuUuid: uuid(0), pid: 4242, type: 'C', name: 'python3', usedMiB: 96_413 }],
    holders: [],
    kernelMounts: [],
    ram: { totalBytes: 449 * GIB, usedBytes: 439 * GIB, availableBytes: null },
    gpuError: null,
    ...extra,
  };
}

describe('Why lines in the status thread', () => {
  it('one line per cause, the flag as a code span, after the RAM flag', () => {
    const causes = rootCauses({ commandLines: [SEED], hostRamTotalBytes: 449 * GIB, gpusVisible: 8 });
    expect(whyLines({ rootCauses: causes })).toEqual([
      ':bulb: Why: 8 ranks × 300 GB host cache (`--hicache-size` is per rank) = 2.4 TB requested on a 449 GiB host: more than its RAM.',
    ]);
    const text = snapshotViews('ev:1', snap({ rootCauses: causes }), 'kpro5')[0]?.text ?? '';
    expect(text.indexOf('RAM pressure')).toBeGreaterThan(0);
    expect(text.indexOf(':bulb: Why:')).toBeGreaterThan(text.indexOf('RAM pressure'));
  });

  it('command lines that could not be read: said, and the reason is inert text', () => {
    expect(whyLines({ rootCausesNote: 'the holders\u2019 command lines could not be read: <!channel> `x`' })).toEqual([
      'Why: not known, the holders’ command lines could not be read: &lt;!channel&gt; ˋxˋ',
    ]);
  });

  it('no cause and no note: no line (an unknown program gets no guess)', () => {
    expect(whyLines({ rootCauses: [] })).toEqual([]);
    expect(whyLines({})).toEqual([]);
  });
});

/** The read script's answer for its parts (machine-read.ts format), each part answering `outs[i]`. */
function readAnswer(outs: string[]): string {
  const b64 = (s: string): string => Buffer.from(s).toString('base64');
  return outs.map((o, i) => `gpu-medic-part ${i} 0 ${Buffer.byteLength(o)} 0 ${b64(o)} \n`).join('');
}

describe('the status read with command lines', () => {
  const host: Machine = { id: 'kpro5', kind: 'host' } as Machine;
  const route = { kind: 'direct' } as Route;
  const gpuCsv = `0, ${uuid(0)}, NVIDIA H200, 00000000:18:00.0, 96413, 143771, 0\n`;
  const appsCsv = `${uuid(0)}, 4242, python3, 96413\n`;
  const free =
    '               total        used        free      shared  buff/cache   available\nMem:    482110078976 471372161024 1 0 1 1\n';
  const result = (spec: CommandSpec, over: Partial<ExecResult>): ExecResult => ({
    command: spec.argv.join(' '),
    machineId: 'kpro5',
    code: 0,
    signal: null,
    stdout: '',
    stderr: '',
    durationMs: 5,
    timedOut: false,
    truncated: false,
    ...over,
  });

  it('a command-line read that hangs: the snapshot stands, with why there is no cause, and the hung read is in the log', async () => {
    const asked: string[][] = [];
    const out = await takeSnapshot(
      host,
      route,
      {
        now: () => new Date('2026-12-01T12:00:00.000Z'),
        commandTimeoutMs: 4000,
        exec: async (_r, spec) => {
          asked.push(spec.argv);
          if (spec.argv.includes(READ_PROCS_SCRIPT)) return result(spec, { code: null, timedOut: true });
          return result(spec, { stdout: readAnswer([gpuCsv, appsCsv, free]) });
        },
      },
      { commandLines: true },
    );
    expect(out.ok).toBe(true);
    if (!out.ok) return;
    // The template ran on the PID the read found, as a positional parameter.
    expect(asked[1]?.slice(-1)).toEqual(['4242']);
    expect(out.snapshot.gpus).toHaveLength(1);
    expect(out.snapshot.rootCauses).toBeUndefined();
    expect(out.snapshot.rootCausesNote).toBe("reading the holders' command lines did not answer within 4 s");
    expect(out.commands.at(-1)?.timedOut).toBe(true);
  });

  it('nothing holds a GPU: no second command at all', async () => {
    let calls = 0;
    const out = await takeSnapshot(
      host,
      route,
      {
        now: () => new Date('2026-12-01T12:00:00.000Z'),
        commandTimeoutMs: 4000,
        exec: async (_r, spec) => {
          calls++;
          return result(spec, { stdout: readAnswer([gpuCsv.replace('96413', '0'), '', free]) });
        },
      },
      { commandLines: true },
    );
    expect(out.ok && out.snapshot.rootCauses).toBeUndefined();
    expect(calls).toBe(1);
  });
});
