import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatTable } from '../harness/nvidia-smi-format/index.ts';
import {
  normaliseBusId,
  parseComputeAppsCsv,
  parseFuserStreams,
  parseNvidiaOutput,
  parseQueryGpuCsv,
} from '../../src/gpu/parse/index.ts';
import type { ParsedOutput } from '../../src/gpu/types.ts';
import { readFixture } from './fixture-files.ts';
import { snapshotArb } from './snapshot-arbitraries.ts';

const H200 = readFixture('nvidia-smi/table/h200_590.48.01_load_3procs.txt');

function reason(r: ReturnType<typeof parseNvidiaOutput>): string {
  if (r.ok) throw new Error(`expected a refusal, got ${JSON.stringify(r.value).slice(0, 200)}`);
  return r.error.reason;
}

describe('bus ids', () => {
  it.each([
    ['0000:0b:00.0', '00000000:0B:00.0'],
    ['GPU0000:07:00.0', '00000000:07:00.0'],
    ['GPU 0000:0B:00.0', '00000000:0B:00.0'],
    ['0B:00.0', '00000000:0B:00.0'],
    ['00000001:c1:1f.7', '00000001:C1:1F.7'],
  ])('%s → %s', (input, want) => expect(normaliseBusId(input)).toBe(want));

  it.each(['', '0B:00', '0000:0B:00.8', 'zz:00.0', '123456789:0B:00.0', '00000000:0B:00.0 extra'])(
    'rejects %j',
    (input) => {
      expect(normaliseBusId(input)).toBeNull();
    },
  );
});

describe('garbage, truncated and adversarial input: a clear refusal, never a wrong number', () => {
  it('empty, whitespace, random text', () => {
    expect(reason(parseNvidiaOutput(''))).toBe('empty input');
    expect(reason(parseNvidiaOutput('  \n\n'))).toBe('empty input');
    expect(reason(parseNvidiaOutput('hello world\n'))).toMatch(/not nvidia-smi output/);
  });

  it('NUL bytes and replacement characters are binary', () => {
    expect(reason(parseNvidiaOutput('abc\u0000def'))).toMatch(/binary/);
    expect(reason(parseNvidiaOutput(`${H200}\uFFFD`))).toMatch(/binary/);
  });

  it('oversized input is refused without parsing', () => {
    // Parsed, this text would be refused as "not nvidia-smi output": the size reason shows the check
    // came first. (No wall-clock bound: a timed assertion fails on a starved machine, not on a defect.)
    const big = 'x'.repeat(8 * 1024 * 1024 + 1);
    expect(reason(parseNvidiaOutput(big))).toMatch(/larger than 8 MiB/);
    expect(reason(parseNvidiaOutput(big.slice(0, 1024)))).toMatch(/not nvidia-smi output/);
  });

  it('a table cut at any line inside the GPU block or the Processes panel is refused', () => {
    const lines = H200.split('\n');
    const gpuStart = lines.findIndex((l) => l.startsWith('|   0  NVIDIA H200'));
    const panelStart = lines.findIndex((l) => l.startsWith('| Processes:'));
    for (const cut of [
      gpuStart,
      gpuStart + 1,
      gpuStart + 2,
      panelStart,
      panelStart + 3,
      panelStart + 4,
      panelStart + 6,
    ]) {
      const r = parseNvidiaOutput(lines.slice(0, cut + 1).join('\n'));
      expect(r.ok, `cut after line ${cut + 1}`).toBe(false);
    }
  });

  it('a table cut in the middle of a line is refused', () => {
    const at = H200.indexOf('32362MiB') + 3;
    expect(reason(parseNvidiaOutput(H200.slice(0, at)))).toMatch(/cut short|unreadable|truncated/);
  });

  it('any prefix of a real table either fails or reports only numbers present in full', () => {
    // Cutting exactly between blocks can still be a well-formed table; then every number must be one the full table has.
    const full = parseNvidiaOutput(H200);
    if (!full.ok) throw new Error(full.error.reason);
    fc.assert(
      fc.property(fc.integer({ min: 0, max: H200.length }), (n) => {
        const r = parseNvidiaOutput(H200.slice(0, n));
        if (!r.ok) return;
        expect(r.value.gpus).toEqual(full.value.gpus);
        for (const p of r.value.processes) expect(full.value.processes).toContainEqual(p);
      }),
      { numRuns: 500 },
    );
  });

  it('a digit changed to a letter in a memory cell is refused, not read as another number', () => {
    expect(reason(parseNvidiaOutput(H200.replace('32362MiB', '3236OMiB')))).toMatch(/unreadable memory/);
    expect(reason(parseNvidiaOutput(H200.replace('2566MiB', '25x6MiB')))).toMatch(/unreadable process row/);
  });

  it('two tables concatenated are refused', () => {
    expect(reason(parseNvidiaOutput(H200 + H200))).toMatch(/more than one/);
  });

  it('a process on a GPU the table does not list is refused', () => {
    expect(
      reason(parseNvidiaOutput(H200.replace('|    0   N/A  N/A           10291', '|    5   N/A  N/A           10291'))),
    ).toMatch(/GPU 5/);
  });

  it('random line shuffles or deletions of a generated table never produce numbers that were not there', () => {
    fc.assert(
      fc.property(snapshotArb(), fc.integer({ min: 0, max: 60 }), (s: ParsedOutput, drop) => {
        const lines = formatTable(s, { timestamp: new Date(0) }).split('\n');
        const mutated = lines.filter((_, i) => i !== drop % lines.length).join('\n');
        const r = parseNvidiaOutput(mutated);
        if (!r.ok) return;
        for (const g of r.value.gpus)
          expect(s.gpus.map((x) => [x.index, x.memoryUsedMiB, x.memoryTotalMiB])).toContainEqual([
            g.index,
            g.memoryUsedMiB,
            g.memoryTotalMiB,
          ]);
        for (const p of r.value.processes)
          expect(s.processes.map((x) => [x.pid, x.usedMiB])).toContainEqual([p.pid, p.usedMiB]);
      }),
      { numRuns: 300 },
    );
  });

  it('arbitrary strings never throw: either a result or a reason', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 2000 }), (t) => {
        const r = parseNvidiaOutput(t);
        expect(typeof r.ok).toBe('boolean');
      }),
      { numRuns: 1000 },
    );
    fc.assert(
      fc.property(
        fc.array(
          fc.constantFrom(
            '|',
            '+',
            '-',
            '=',
            ' ',
            '\n',
            'N/A',
            'MiB',
            '0',
            '12',
            '/',
            'NVIDIA-SMI 1 ',
            'Processes:',
            'MIG devices:',
            'C',
          ),
          { maxLength: 400 },
        ),
        (parts) => {
          const r = parseNvidiaOutput(parts.join(''));
          expect(typeof r.ok).toBe('boolean');
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('malformed XML is refused with the reason', () => {
    expect(reason(parseNvidiaOutput('<?xml version="1.0" ?>\n<nvidia_smi_log><gpu id="x">'))).toMatch(/malformed XML/);
    expect(reason(parseNvidiaOutput('<?xml version="1.0" ?>\n<other/>'))).toMatch(/nvidia_smi_log/);
    const xml = readFixture('nvidia-smi/xml/tesla-t4_515.105.01_procs.xml');
    expect(reason(parseNvidiaOutput(xml.replace('<used>1032 MiB</used>', '<used>1O32 MiB</used>')))).toMatch(
      /unreadable/,
    );
  });

  it('CSV: wrong value counts, non-numeric memory and a bad header are refused', () => {
    const fields = ['index', 'uuid', 'name', 'pci.bus_id', 'memory.used', 'memory.total', 'utilization.gpu'];
    expect(parseQueryGpuCsv('0, GPU-1, A10, 00000000:01:00.0, 12, 100\n', fields).ok).toBe(false);
    expect(parseQueryGpuCsv('0, GPU-1, A10, 00000000:01:00.0, 12 GiB, 100, 1\n', fields).ok).toBe(false);
    expect(parseQueryGpuCsv('0, GPU-1, A10, 00000000:01:00.0, -12, 100, 1\n', fields).ok).toBe(false);
    expect(parseQueryGpuCsv('0, GPU-1, A10, 00000000:01:00.0, 1e3, 100, 1\n', fields).ok).toBe(false);
    expect(
      parseQueryGpuCsv(
        '0, GPU-1, A10, 00000000:01:00.0, 12, 100, 1\n\n1, GPU-2, A10, 00000000:02:00.0, 12, 100, 1\n',
        fields,
      ).ok,
    ).toBe(false);
    expect(parseQueryGpuCsv('', fields).ok).toBe(false);
    expect(parseComputeAppsCsv('GPU-1, notapid, 12\n', ['gpu_uuid', 'pid', 'used_memory']).ok).toBe(false);
  });

  it('CSV: missing-value spellings become null, not 0', () => {
    const fields = ['index', 'memory.used', 'memory.total', 'utilization.gpu'];
    const r = parseQueryGpuCsv(
      '0, [N/A], N/A, [Not Supported]\n1, , [Requested functionality has been deprecated], 5\n',
      fields,
    );
    expect(r.ok && r.value.gpus.map((g) => [g.index, g.memoryUsedMiB, g.memoryTotalMiB, g.utilizationPct])).toEqual([
      [0, null, null, null],
      [1, null, null, 5],
    ]);
  });

  it('CSV: a process name containing ", " stays one value', () => {
    const r = parseComputeAppsCsv('GPU-1, 42, python -c a, b, 100\n', [
      'gpu_uuid',
      'pid',
      'process_name',
      'used_memory',
    ]);
    expect(r.ok && r.value.processes).toEqual([
      { gpuIndex: null, gpuUuid: 'GPU-1', pid: 42, type: null, name: 'python -c a, b', usedMiB: 100 },
    ]);
  });

  it('compute apps noheader with nothing = no process; query-gpu error text = typed error', () => {
    expect(parseComputeAppsCsv('', ['gpu_uuid', 'pid']).ok && true).toBe(true);
    const r = parseQueryGpuCsv('No devices were found\n', ['index']);
    expect(r.ok && r.value.error?.kind).toBe('no_devices');
  });
});

describe('exit codes', () => {
  it('empty output with a known exit code becomes the typed error', () => {
    const r = parseNvidiaOutput('', { exitCode: 9 });
    expect(r.ok && r.value.error?.kind).toBe('driver_unreachable');
    const lost = parseNvidiaOutput('something odd\n', { exitCode: 15 });
    expect(lost.ok && lost.value.error?.kind).toBe('gpu_lost');
    const other = parseNvidiaOutput('', { exitCode: 255 });
    expect(other.ok && other.value.error?.kind).toBe('unknown');
  });

  it('a good table with exit 0 has no error; with exit 14 it carries inforom_corrupted and its data', () => {
    const r0 = parseNvidiaOutput(H200, { exitCode: 0 });
    expect(r0.ok && r0.value.error).toBeNull();
    const r14 = parseNvidiaOutput(H200, { exitCode: 14 });
    expect(r14.ok && r14.value.error?.kind).toBe('inforom_corrupted');
    expect(r14.ok && r14.value.gpus[0]?.memoryUsedMiB).toBe(32362);
  });

  it('GPU is lost and reset-not-supported texts', () => {
    const lost = parseNvidiaOutput(
      'Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU\n',
    );
    expect(lost.ok && lost.value.error).toMatchObject({ kind: 'gpu_lost', busId: '00000000:3B:00.0' });
    const reset = parseNvidiaOutput('Resetting GPU 00000000:01:00.0 is not supported.\n', { exitCode: 3 });
    expect(reset.ok && reset.value.error).toMatchObject({ kind: 'reset_not_supported', busId: '00000000:01:00.0' });
    const perm = parseNvidiaOutput('Failed to initialize NVML: Insufficient Permissions\n', { exitCode: 4 });
    expect(perm.ok && perm.value.error?.kind).toBe('insufficient_permissions');
  });
});

describe('fuser streams captured apart (as over SSH)', () => {
  it('stdout PIDs zipped back with the stderr rows', () => {
    const stderr =
      'Cannot stat file /proc/131/fd/0: Permission denied\n' +
      '                     USER        PID ACCESS COMMAND\n' +
      '/dev/nvidia0:        root     mount /dev/nvidia0\n' +
      '                     root      F...m python3\n' +
      '/dev/nvidiactl:      100000     F.... sglang::scheduler_TP0\n';
    const r = parseFuserStreams('kernel  4242  777', stderr);
    if (!r.ok) throw new Error(r.error.reason);
    expect(r.value.kernelMounts).toEqual(['/dev/nvidia0']);
    expect(r.value.holders).toEqual([
      { device: '/dev/nvidia0', pid: 4242, user: 'root', access: 'F...m', command: 'python3' },
      { device: '/dev/nvidiactl', pid: 777, user: '100000', access: 'F....', command: 'sglang::scheduler_TP0' },
    ]);
  });

  it('more PIDs than rows (or fewer) is refused', () => {
    expect(parseFuserStreams('1 2', '/dev/nvidia0:        root      F...m python\n').ok).toBe(false);
    expect(parseFuserStreams('', '/dev/nvidia0:        root      F...m python\n').ok).toBe(false);
  });
});
