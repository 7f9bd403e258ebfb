/**
 * The host's own view of a container's GPUs (so a reset hits the right GPU): `pct config` names the device
 * minors passed to it, host `nvidia-smi -q -x` maps each minor to a UUID (a real report, where minor and
 * index differ), and a container GPU is matched only to one of those, on UUID and bus id.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { matchContainerGpus, type GpuPassing } from '../../src/gpu/gpu-map.ts';
import type { Gpu } from '../../src/gpu/types.ts';
import { parsePctConfigGpuMinors, parseXmlGpuMinors } from '../../src/agent-grammar/templates/unstick-commands.ts';

const A5000 = readFileSync(new URL('../fixtures/nvidia-smi/xml/2x-rtx-a5000_v13.xml', import.meta.url), 'utf8');

describe('parsePctConfigGpuMinors', () => {
  it('reads devN (plain and path=) and lxc.mount.entry lines, not nvidiactl/uvm, not snapshot sections', () => {
    const cfg = [
      'arch: amd64',
      'dev0: /dev/nvidia5',
      'dev1: path=/dev/nvidia2,mode=0666',
      'dev2: /dev/nvidiactl',
      'dev3: /dev/nvidia-uvm',
      'lxc.mount.entry: /dev/nvidia7 dev/nvidia7 none bind,optional,create=file',
      'lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file',
      'hostname: ct131',
      '',
      '[before-upgrade]',
      'dev0: /dev/nvidia0',
    ].join('\n');
    expect(parsePctConfigGpuMinors(cfg)).toEqual([5, 2, 7]);
  });
  it('a config with no GPU device passes none', () => {
    expect(parsePctConfigGpuMinors('arch: amd64\nhostname: ct1\n')).toEqual([]);
  });
});

describe('parseXmlGpuMinors', () => {
  it('reads each GPU block of a real report: the minor is not the index (bus 81 is minor 1, bus C1 minor 0)', () => {
    expect(parseXmlGpuMinors(A5000)).toEqual([
      { busId: '00000000:81:00.0', uuid: 'GPU-12345678-aaaa-bbbb-cccc-0123456789ab', minor: 1 },
      { busId: '00000000:C1:00.0', uuid: 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd', minor: 0 },
    ]);
  });
});

const gpu = (index: number, uuid: string, busId: string): Gpu => ({
  index,
  uuid,
  busId,
  name: 'NVIDIA RTX A5000',
  memoryUsedMiB: 0,
  memoryTotalMiB: 24_564,
  utilizationPct: 0,
});
const HOST = [
  gpu(0, 'GPU-12345678-aaaa-bbbb-cccc-0123456789ab', '00000000:81:00.0'),
  gpu(1, 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd', '00000000:C1:00.0'),
];
const passing = (minors: number[] | null, problem: string | null = null): GpuPassing => ({
  vmid: 131,
  minors,
  problem,
  hostMinors: parseXmlGpuMinors(A5000),
});

describe('matchContainerGpus', () => {
  it('a container given /dev/nvidia0 (minor 0 = host GPU 1) sees it as its GPU 0 and is matched to host GPU 1', () => {
    const ct = [gpu(0, 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd', '00000000:C1:00.0')];
    expect(matchContainerGpus(ct, HOST, passing([0]), 'kpro5')).toEqual([{ host: HOST[1], problem: null }]);
  });
  it('a UUID the host did not pass to the container is not matched, even though the host has it', () => {
    const ct = [gpu(0, 'GPU-12345678-aaaa-bbbb-cccc-0123456789ab', '00000000:81:00.0')];
    const [m] = matchContainerGpus(ct, HOST, passing([0]), 'kpro5');
    expect(m?.host).toBeNull();
    expect(m?.problem).toMatch(
      /reports GPU 0 as GPU-12345678-aaaa-bbbb-cccc-0123456789ab, which is not one of the GPUs kpro5 passes to container 131 \(`pct config 131`: host GPU 1\)/,
    );
  });
  it('a bus id that contradicts the host for that UUID is not matched', () => {
    const ct = [gpu(0, 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd', '00000000:81:00.0')];
    expect(matchContainerGpus(ct, HOST, passing([0]), 'kpro5')[0]?.problem).toMatch(
      /at bus 00000000:81:00.0, but on kpro5 that GPU is at 00000000:C1:00.0/,
    );
  });
  it('one UUID claimed twice matches neither', () => {
    const u = 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd';
    const r = matchContainerGpus(
      [gpu(0, u, '00000000:C1:00.0'), gpu(1, u, '00000000:C1:00.0')],
      HOST,
      passing([0, 1]),
      'kpro5',
    );
    expect(r.map((m) => m.host)).toEqual([null, null]);
  });
  it('when the host could not say what it passed, nothing is matched and the reason is kept', () => {
    const ct = [gpu(0, 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd', '00000000:C1:00.0')];
    expect(
      matchContainerGpus(ct, HOST, passing(null, '`pct config 131` failed on kpro5 (exit 2)'), 'kpro5')[0]?.problem,
    ).toMatch(/could not be told from kpro5's own view: `pct config 131` failed/);
  });
});
