import { describe, expect, it } from 'vitest';
import { parseComputeAppsCsv, parseFuser, parseNvidiaOutput, parseQueryGpuCsv } from '../../src/gpu/parse/index.ts';
import type { ParsedOutput } from '../../src/gpu/types.ts';
import { readFixture } from './fixture-files.ts';

function parsed(file: string, opts: { exitCode?: number | null } = {}): ParsedOutput {
  const r = parseNvidiaOutput(readFixture(file), opts);
  if (!r.ok) throw new Error(`${file}: ${r.error.reason}`);
  return r.value;
}

function memories(s: ParsedOutput): Array<[number | null, number | null]> {
  return s.gpus.map((g) => [g.memoryUsedMiB, g.memoryTotalMiB]);
}

function pidsAndMiB(s: ParsedOutput): Array<[number, number | null]> {
  return s.processes.map((p) => [p.pid, p.usedMiB]);
}

describe('default tables', () => {
  it('8x H100, 550.90.07 (89 columns, |---- border, no final newline): 8 idle GPUs', () => {
    const s = parsed('nvidia-smi/table/8x-h100-80gb-hbm3_550.90.07_idle.txt');
    expect(s.source).toBe('table');
    expect(s.driverVersion).toBe('550.90.07');
    expect(s.cudaVersion).toBe('12.4');
    expect(s.gpus.map((g) => g.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(memories(s)).toEqual(Array(8).fill([1, 81559]));
    expect(s.gpus.map((g) => g.busId)).toEqual([
      '00000000:19:00.0',
      '00000000:3B:00.0',
      '00000000:4C:00.0',
      '00000000:5D:00.0',
      '00000000:9B:00.0',
      '00000000:BB:00.0',
      '00000000:CB:00.0',
      '00000000:DB:00.0',
    ]);
    expect(s.processes).toEqual([]);
    expect(s.error).toBeNull();
  });

  it('8x H100 MIG, 535.104.12: GPU memory N/A, 16 MIG devices, no processes', () => {
    const s = parsed('nvidia-smi/table/8x-h100-mig-16-instances_535.104.12.txt');
    expect(s.driverVersion).toBe('535.104.12');
    expect(s.gpus).toHaveLength(8);
    expect(memories(s)).toEqual(Array(8).fill([null, null]));
    expect(s.gpus.every((g) => g.utilizationPct === null)).toBe(true);
    expect(s.migDevices).toHaveLength(16);
    expect(s.migDevices.every((m) => m.memoryUsedMiB === 16 && m.memoryTotalMiB === 40448)).toBe(true);
    expect(s.migDevices.filter((m) => m.gpuIndex === 2).map((m) => [m.gi, m.migDevice])).toEqual([
      [1, 0],
      [2, 1],
    ]);
    expect(s.processes).toEqual([]);
  });

  it('A10, 550.127.05 idle', () => {
    const s = parsed('nvidia-smi/table/a10_550.127.05_idle.txt');
    expect(s.gpus).toEqual([
      {
        index: 0,
        name: 'NVIDIA A10',
        busId: '00000000:06:00.0',
        uuid: null,
        memoryUsedMiB: 1,
        memoryTotalMiB: 23028,
        utilizationPct: 0,
      },
    ]);
    expect(s.driverVersion).toBe('550.127.05');
  });

  it('H100 590.48.01 under load: 3 processes', () => {
    const s = parsed('nvidia-smi/table/h100-80gb-hbm3_590.48.01_load_3procs.txt');
    expect(memories(s)).toEqual([[19818, 81559]]);
    expect(s.gpus[0]?.utilizationPct).toBe(100);
    expect(pidsAndMiB(s)).toEqual([
      [11327, 2566],
      [11328, 1542],
      [11345, 15690],
    ]);
  });

  it('H100 MIG 590.48.01: MIG block and processes on GI 2', () => {
    const s = parsed('nvidia-smi/table/h100-mig_590.48.01_load_mig-devices_procs.txt');
    expect(memories(s)).toEqual([[11125, 81559]]);
    expect(s.gpus[0]?.utilizationPct).toBeNull();
    expect(s.migDevices.map((m) => [m.gi, m.ci, m.migDevice, m.memoryUsedMiB, m.memoryTotalMiB])).toEqual([
      [2, 0, 0, 11091, 40448],
      [3, 0, 1, 17, 20096],
      [9, 0, 2, 9, 9984],
      [10, 0, 3, 9, 9984],
    ]);
    expect(pidsAndMiB(s)).toEqual([
      [21180, 2296],
      [21181, 1272],
      [21198, 7484],
    ]);
  });

  it('H200 idle: "No running processes found"', () => {
    const s = parsed('nvidia-smi/table/h200_590.48.01_idle_no-processes.txt');
    expect(memories(s)).toEqual([[0, 143771]]);
    expect(s.cudaVersion).toBe('13.1');
    expect(s.processes).toEqual([]);
  });

  it('H200 under load: 3 compute processes with names', () => {
    const s = parsed('nvidia-smi/table/h200_590.48.01_load_3procs.txt');
    expect(memories(s)).toEqual([[32362, 143771]]);
    expect(s.gpus[0]?.busId).toBe('00000000:83:00.0');
    expect(s.processes.map((p) => [p.gpuIndex, p.pid, p.type, p.name, p.usedMiB])).toEqual([
      [0, 10291, 'C', '/root/tools/memhog', 2566],
      [0, 10293, 'C', '/root/tools/memhog', 1542],
      [0, 10309, 'C', './gpu_burn', 28234],
    ]);
  });

  it('L40S, 595.80 (two-part version)', () => {
    const s = parsed('nvidia-smi/table/l40s_595.80_load_ffmpeg.txt');
    expect(s.driverVersion).toBe('595.80');
    expect(memories(s)).toEqual([[1235, 46068]]);
    expect(s.gpus[0]?.utilizationPct).toBe(9);
    expect(pidsAndMiB(s)).toEqual([
      [20037, 538],
      [20038, 681],
    ]);
  });

  it('Windows WDDM: per-process memory N/A, left-truncated names kept with their spaces', () => {
    const s = parsed('nvidia-smi/table/rtx-2080-super_windows-wddm_591.86_load.txt');
    expect(s.gpus[0]?.name).toBe('NVIDIA GeForce RTX 2080 ...');
    expect(memories(s)).toEqual([[1296, 8192]]);
    expect(s.processes).toHaveLength(12);
    expect(s.processes.every((p) => p.usedMiB === null)).toBe(true);
    expect(s.processes[1]).toEqual({
      gpuIndex: 0,
      gpuUuid: null,
      pid: 4680,
      type: 'C+G',
      name: '...e Experience\\NVIDIA Share.exe',
      usedMiB: null,
    });
    expect(s.processes[8]?.name).toBe('...m Files\\NZXT CAM\\NZXT CAM.exe');
    expect(s.processes.at(-1)).toMatchObject({ pid: 26660, type: 'C' });
  });

  it('RTX 4080 SUPER: C, G and C+G processes, truncated GPU name', () => {
    const s = parsed('nvidia-smi/table/rtx-4080-super_595.71.05_load_CplusG.txt');
    expect(s.gpus[0]?.name).toBe('NVIDIA GeForce RTX 4080 ...');
    expect(memories(s)).toEqual([[1474, 16376]]);
    expect(s.processes.map((p) => [p.pid, p.type, p.usedMiB])).toEqual([
      [2165, 'C+G', 25],
      [2496, 'G', 200],
      [2620, 'G', 4],
      [2954, 'G', 120],
      [3527, 'G', 3],
      [5021, 'C', 360],
      [5022, 'C', 503],
    ]);
  });

  it('Tesla T4, old 79-column layout', () => {
    const s = parsed('nvidia-smi/table/tesla-t4_535.86.10_old-79col-layout.txt');
    expect(s.gpus).toEqual([
      {
        index: 0,
        name: 'Tesla T4',
        busId: '00000000:00:1E.0',
        uuid: null,
        memoryUsedMiB: 0,
        memoryTotalMiB: 15109,
        utilizationPct: 0,
      },
    ]);
    expect(s.cudaVersion).toBe('12.2');
  });
});

describe('CSV', () => {
  it('8x compute apps, noheader,nounits, fields given: 17 rows, PID 51356 on all 8 GPUs', () => {
    const r = parseComputeAppsCsv(
      readFixture('nvidia-smi/csv/8x-gpu_query-compute-apps_gpu_uuid-pid-used_memory_noheader-nounits.csv'),
      ['gpu_uuid', 'pid', 'used_memory'],
    );
    if (!r.ok) throw new Error(r.error.reason);
    const ps = r.value.processes;
    expect(ps).toHaveLength(17);
    expect(ps.filter((p) => p.pid === 51356).map((p) => p.usedMiB)).toEqual([
      1282, 1314, 1314, 1266, 1242, 1246, 1246, 1222,
    ]);
    expect(ps[3]).toEqual({
      gpuIndex: null,
      gpuUuid: 'GPU-bff5b888-68af-f1a4-5534-f97817573a8a',
      pid: 27894,
      type: null,
      name: null,
      usedMiB: 73878,
    });
    expect(ps.at(-1)).toMatchObject({
      gpuUuid: 'GPU-b1fe0c18-be1e-8f8d-d647-9967b0493ea4',
      pid: 81150,
      usedMiB: 71506,
    });
  });

  it('8x query-gpu index,gpu_uuid noheader: the index → UUID map', () => {
    const r = parseQueryGpuCsv(readFixture('nvidia-smi/csv/8x-gpu_query-gpu_index-gpu_uuid_noheader-nounits.csv'), [
      'index',
      'gpu_uuid',
    ]);
    if (!r.ok) throw new Error(r.error.reason);
    expect(r.value.gpus.map((g) => g.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(r.value.gpus[0]?.uuid).toBe('GPU-bff5b888-68af-f1a4-5534-f97817573a8a');
    expect(r.value.gpus[7]?.uuid).toBe('GPU-b1fe0c18-be1e-8f8d-d647-9967b0493ea4');
    expect(r.value.gpus.every((g) => g.memoryUsedMiB === null)).toBe(true);
  });

  it('the same noheader file through parseNvidiaOutput needs the field list', () => {
    const text = readFixture('nvidia-smi/csv/8x-gpu_query-gpu_index-gpu_uuid_noheader-nounits.csv');
    expect(parseNvidiaOutput(text).ok).toBe(false);
    const r = parseNvidiaOutput(text, { csvFields: ['index', 'gpu_uuid'] });
    expect(r.ok && r.value.gpus.length).toBe(8);
  });

  it('H100 MIG compute apps with header and units', () => {
    const s = parsed('nvidia-smi/csv/h100-mig_590.48.01_query-compute-apps_load.csv');
    expect(s.source).toBe('csv');
    expect(s.processes.map((p) => [p.pid, p.name, p.usedMiB])).toEqual([
      [21180, '/root/tools/memhog', 2296],
      [21181, '/root/tools/memhog', 1272],
      [21198, './gpu_burn', 7484],
    ]);
    expect(s.processes.every((p) => p.gpuUuid === 'GPU-00000000-0000-0000-0000-000000000000')).toBe(true);
  });

  it('header only = no processes', () => {
    const s = parsed('nvidia-smi/csv/h200_590.48.01_query-compute-apps_idle_header-only.csv');
    expect(s.source).toBe('csv');
    expect(s.processes).toEqual([]);
  });

  it('H200 compute apps under load', () => {
    expect(pidsAndMiB(parsed('nvidia-smi/csv/h200_590.48.01_query-compute-apps_load.csv'))).toEqual([
      [10291, 2566],
      [10293, 1542],
      [10309, 28234],
    ]);
  });

  it('H200 query-gpu with 212 fields, units in values, [N/A] and deprecated markers', () => {
    const s = parsed('nvidia-smi/csv/h200_590.48.01_query-gpu_load_all-fields.csv');
    expect(s.driverVersion).toBe('590.48.01');
    expect(s.gpus).toEqual([
      {
        index: 0,
        name: 'NVIDIA H200',
        busId: '00000000:83:00.0',
        uuid: 'GPU-00000000-0000-0000-0000-000000000000',
        memoryUsedMiB: 32362,
        memoryTotalMiB: 143771,
        utilizationPct: 100,
      },
    ]);
  });

  it('RTX 2080 SUPER query-gpu, driver 465.27 (old field names)', () => {
    const s = parsed('nvidia-smi/csv/rtx-2080-super_465.27_query-gpu.csv');
    expect(s.driverVersion).toBe('465.27');
    expect(s.gpus).toEqual([
      {
        index: 0,
        name: 'NVIDIA GeForce RTX 2080 SUPER',
        busId: '00000000:0C:00.0',
        uuid: 'GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa',
        memoryUsedMiB: 344,
        memoryTotalMiB: 7979,
        utilizationPct: 0,
      },
    ]);
  });

  it('RTX 2080 SUPER compute apps, 610.57.04', () => {
    expect(pidsAndMiB(parsed('nvidia-smi/csv/rtx-2080-super_610.57.04_query-compute-apps_load.csv'))).toEqual([
      [28512, 370],
      [28511, 230],
    ]);
  });

  it('Tesla P100 csv,nounits: unit only in the header, no memory.total field, no final newline', () => {
    const s = parsed('nvidia-smi/csv/tesla-p100_query-gpu_csv-nounits.csv');
    expect(s.gpus).toEqual([
      {
        index: null,
        name: 'Tesla P100-PCIE-16GB',
        busId: null,
        uuid: 'GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6',
        memoryUsedMiB: 0,
        memoryTotalMiB: null,
        utilizationPct: 0,
      },
    ]);
  });
});

describe('XML (-q -x)', () => {
  it('2x RTX A5000, v13: two GPUs, one llama-server on both', () => {
    const s = parsed('nvidia-smi/xml/2x-rtx-a5000_v13.xml');
    expect(s.source).toBe('xml');
    expect(s.driverVersion).toBe('590.44.01');
    expect(memories(s)).toEqual([
      [22437, 24564],
      [17253, 24564],
    ]);
    expect(s.gpus.map((g) => g.busId)).toEqual(['00000000:81:00.0', '00000000:C1:00.0']);
    expect(s.processes.map((p) => [p.gpuIndex, p.pid, p.usedMiB])).toEqual([
      [0, 100477, 22430],
      [1, 100477, 17246],
    ]);
    expect(s.processes[1]?.gpuUuid).toBe('GPU-12345678-aaaa-bbbb-cccc-0123456789cd');
  });

  it('A100 MIG, v12: 4 MIG devices read from their own fb_memory_usage, not the GPU one', () => {
    const s = parsed('nvidia-smi/xml/a100-sxm4-80gb_535.54.03_mig-enabled_v12.xml');
    expect(s.cudaVersion).toBe('12.2');
    expect(memories(s)).toEqual([[50, 81920]]);
    expect(s.gpus[0]?.utilizationPct).toBeNull();
    expect(s.migDevices.map((m) => [m.gi, m.migDevice, m.memoryUsedMiB, m.memoryTotalMiB])).toEqual([
      [3, 0, 12, 19968],
      [4, 1, 12, 19968],
      [5, 2, 12, 19968],
      [6, 3, 12, 19968],
    ]);
    expect(s.processes).toEqual([]);
  });

  it('RTX 4000 SFF Ada, 595.84: four processes G and C', () => {
    const s = parsed('nvidia-smi/xml/rtx-4000-sff-ada_595.84_v13_procs.xml');
    expect(memories(s)).toEqual([[3534, 20475]]);
    expect(s.processes.map((p) => [p.pid, p.type, p.usedMiB])).toEqual([
      [1842, 'G', 410],
      [3190, 'G', 451],
      [4937, 'C', 160],
      [34626, 'C+G', 183],
    ]);
  });

  it('RTX PRO 6000 Blackwell, v13: one llama-server using 65710 MiB', () => {
    const s = parsed('nvidia-smi/xml/rtx-pro-6000-blackwell-maxq_590.44.01_v13.xml');
    expect(s.gpus[0]?.name).toBe('NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition');
    expect(memories(s)).toEqual([[65720, 97887]]);
    expect(pidsAndMiB(s)).toEqual([[116860, 65710]]);
  });

  it('Tesla T4, 515.105.01 (v11 DTD)', () => {
    const s = parsed('nvidia-smi/xml/tesla-t4_515.105.01_procs.xml');
    expect(s.driverVersion).toBe('515.105.01');
    expect(s.gpus[0]?.busId).toBe('00000000:00:1E.0');
    expect(memories(s)).toEqual([[1032, 15360]]);
    expect(s.processes.map((p) => [p.pid, p.type, p.name, p.usedMiB])).toEqual([
      [675, 'G', '/usr/lib/xorg/Xorg', 22],
      [5762, 'C', 'python', 1005],
    ]);
  });
});

describe('fuser -v /dev/nvidia*', () => {
  it('container with an orphan python: one PID on six devices, kernel mounts kept apart, noise ignored', () => {
    const s = parsed('fuser/container_4gpu_kernel-mount_with-orphan-python.txt');
    expect(s.source).toBe('fuser');
    expect(s.holders.map((h) => h.device)).toEqual([
      '/dev/nvidia1',
      '/dev/nvidia2',
      '/dev/nvidia3',
      '/dev/nvidia4',
      '/dev/nvidiactl',
      '/dev/nvidia-uvm',
    ]);
    expect(
      s.holders.every((h) => h.pid === 33118 && h.user === 'root' && h.access === 'F...m' && h.command === 'python'),
    ).toBe(true);
    expect(s.kernelMounts).toEqual([
      '/dev/nvidia1',
      '/dev/nvidia2',
      '/dev/nvidia3',
      '/dev/nvidia4',
      '/dev/nvidiactl',
      '/dev/nvidia-uvm',
      '/dev/nvidia-uvm-tools',
    ]);
    expect(s.processes).toEqual([]);
  });

  it('after the kill: only kernel mount rows, so no holder at all', () => {
    const s = parsed('fuser/container_4gpu_kernel-mount_only_after-kill.txt');
    expect(s.holders).toEqual([]);
    expect(s.kernelMounts).toHaveLength(7);
    expect(parseFuser(readFixture('fuser/container_4gpu_kernel-mount_only_after-kill.txt'))).toEqual({
      ok: true,
      value: s,
    });
  });
});

describe('error outputs', () => {
  it.each([
    ['couldnt-communicate-with-driver.txt', 'driver_unreachable', null],
    ['device-handle-unknown-error_no-space.txt', 'device_handle_unknown', '00000000:07:00.0'],
    ['device-handle-unknown-error_space-after-GPU.txt', 'device_handle_unknown', '00000000:0B:00.0'],
    ['no-devices-were-found.txt', 'no_devices', null],
    ['nvml-driver-library-version-mismatch_550.144.txt', 'nvml_version_mismatch', null],
    ['nvml-driver-library-version-mismatch_570.124.txt', 'nvml_version_mismatch', null],
    ['gpu-reset_refused_in-use-by-another-client.txt', 'reset_in_use', '00000000:1A:00.0'],
  ] as const)('%s → %s', (file, kind, busId) => {
    const s = parsed(`nvidia-smi/errors/${file}`);
    expect(s.source).toBe('error');
    expect(s.error).toMatchObject({ kind, busId });
    expect(s.gpus).toEqual([]);
  });

  it('version mismatch keeps the NVML library version in the message', () => {
    expect(parsed('nvidia-smi/errors/nvml-driver-library-version-mismatch_550.144.txt').error?.message).toContain(
      '550.144',
    );
  });

  it('infoROM corrupted: the full table AND the typed error, with exit code 14', () => {
    const s = parsed('nvidia-smi/errors/tesla-p100_470.82.01_inforom-corrupted_rc14.txt', { exitCode: 14 });
    expect(s.source).toBe('table');
    expect(s.driverVersion).toBe('470.82.01');
    expect(s.gpus).toEqual([
      {
        index: 0,
        name: 'Tesla P100-PCIE...',
        busId: '00000000:0B:00.0',
        uuid: null,
        memoryUsedMiB: 0,
        memoryTotalMiB: 16280,
        utilizationPct: 0,
      },
    ]);
    expect(s.error).toMatchObject({ kind: 'inforom_corrupted', busId: '00000000:0B:00.0' });
  });

  it('Fan ERR! (old layout, file ends after the GPU block): the reading is kept', () => {
    const s = parsed('nvidia-smi/errors/geforce_525.125.06_fan-ERR.txt');
    expect(s.source).toBe('table');
    expect(s.driverVersion).toBe('525.125.06');
    expect(s.gpus).toEqual([
      {
        index: 0,
        name: 'NVIDIA GeForce ...',
        busId: '00000000:01:00.0',
        uuid: null,
        memoryUsedMiB: 2021,
        memoryTotalMiB: 23028,
        utilizationPct: 0,
      },
    ]);
  });

  it('reset succeeded on 8 GPUs: no error, the reset bus ids', () => {
    const s = parsed('nvidia-smi/errors/gpu-reset_success_8gpus.txt');
    expect(s.error).toBeNull();
    expect(s.gpus.map((g) => g.busId)).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map((n) => `00000000:0${n}:00.0`));
    expect(s.gpus.every((g) => g.memoryUsedMiB === null)).toBe(true);
  });
});
