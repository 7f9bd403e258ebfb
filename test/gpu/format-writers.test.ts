import { describe, expect, it } from 'vitest';
import {
  formatComputeAppsCsv,
  formatFreeBytes,
  formatGpuResetSuccess,
  formatNvidiaError,
  formatQueryGpuCsv,
  formatTable,
  InvalidQueryFieldError,
} from '../harness/nvidia-smi-format/index.ts';
import type { Gpu, GpuProcess, ParsedOutput } from '../../src/gpu/types.ts';
import { readFixture } from './fixture-files.ts';

const H200: Gpu = {
  index: 0,
  name: 'NVIDIA H200',
  busId: '00000000:83:00.0',
  uuid: 'GPU-00000000-0000-0000-0000-000000000000',
  memoryUsedMiB: 32362,
  memoryTotalMiB: 143771,
  utilizationPct: 100,
};

function proc(pid: number, name: string, usedMiB: number): GpuProcess {
  return { gpuIndex: 0, gpuUuid: H200.uuid, pid, type: 'C', name, usedMiB };
}

const H200_LOAD: ParsedOutput = {
  source: 'table',
  driverVersion: '590.48.01',
  cudaVersion: '13.1',
  gpus: [H200],
  migDevices: [],
  processes: [
    proc(10291, '/root/tools/memhog', 2566),
    proc(10293, '/root/tools/memhog', 1542),
    proc(10309, './gpu_burn', 28234),
  ],
  holders: [],
  kernelMounts: [],
  error: null,
};

describe('formatTable reproduces real 590.x tables byte for byte', () => {
  it('H200 under load with 3 processes', () => {
    const out = formatTable(H200_LOAD, {
      timestamp: new Date(Date.UTC(2026, 6, 3, 22, 11, 9)),
      gpuDetails: [{ temperatureC: 52, powerW: 628 }],
    });
    expect(out).toBe(readFixture('nvidia-smi/table/h200_590.48.01_load_3procs.txt'));
  });

  it('H200 idle: "No running processes found"', () => {
    const idle: ParsedOutput = {
      ...H200_LOAD,
      gpus: [{ ...H200, memoryUsedMiB: 0, utilizationPct: 0 }],
      processes: [],
    };
    const out = formatTable(idle, {
      timestamp: new Date(Date.UTC(2026, 6, 3, 22, 10, 45)),
      gpuDetails: [{ temperatureC: 28, powerW: 77 }],
    });
    expect(out).toBe(readFixture('nvidia-smi/table/h200_590.48.01_idle_no-processes.txt'));
  });

  it('H100 in MIG mode: MIG devices block and GI/CI columns', () => {
    const s: ParsedOutput = {
      ...H200_LOAD,
      gpus: [
        {
          index: 0,
          name: 'NVIDIA H100 80GB HBM3',
          busId: '00000000:00:09.0',
          uuid: null,
          memoryUsedMiB: 11125,
          memoryTotalMiB: 81559,
          utilizationPct: null,
        },
      ],
      migDevices: [
        { gpuIndex: 0, gi: 2, ci: 0, migDevice: 0, memoryUsedMiB: 11091, memoryTotalMiB: 40448 },
        { gpuIndex: 0, gi: 3, ci: 0, migDevice: 1, memoryUsedMiB: 17, memoryTotalMiB: 20096 },
        { gpuIndex: 0, gi: 9, ci: 0, migDevice: 2, memoryUsedMiB: 9, memoryTotalMiB: 9984 },
        { gpuIndex: 0, gi: 10, ci: 0, migDevice: 3, memoryUsedMiB: 9, memoryTotalMiB: 9984 },
      ],
      processes: [
        proc(21180, '/root/tools/memhog', 2296),
        proc(21181, '/root/tools/memhog', 1272),
        proc(21198, './gpu_burn', 7484),
      ],
    };
    const out = formatTable(s, {
      timestamp: new Date(Date.UTC(2026, 6, 14, 9, 0, 43)),
      gpuDetails: [{ temperatureC: 52, powerW: 432, ecc: 'On' }],
      migDetails: [
        { bar1TotalMiB: 24739, sm: 60, engines: [3, 0, 3, 0, 3] },
        { bar1TotalMiB: 12369, sm: 32, engines: [2, 0, 2, 0, 2] },
        { bar1TotalMiB: 6184, sm: 16, engines: [1, 0, 1, 0, 1] },
        { bar1TotalMiB: 6184, sm: 16, engines: [1, 0, 1, 0, 1] },
      ],
      processPlacement: [
        { gi: 2, ci: 0 },
        { gi: 2, ci: 0 },
        { gi: 2, ci: 0 },
      ],
    });
    expect(out).toBe(readFixture('nvidia-smi/table/h100-mig_590.48.01_load_mig-devices_procs.txt'));
  });

  it('container view keeps the memory but prints an empty Processes panel', () => {
    const out = formatTable(H200_LOAD, { timestamp: new Date(0), containerView: true });
    expect(out).toContain('|   32362MiB / 143771MiB |');
    expect(out).not.toContain('10291');
    expect(out).not.toContain('No running processes found');
    expect(out.endsWith(`|${'='.repeat(89)}|\n+${'-'.repeat(89)}+\n`)).toBe(true);
  });

  it('truncates long names the way nvidia-smi does', () => {
    const s: ParsedOutput = {
      ...H200_LOAD,
      gpus: [{ ...H200, name: 'NVIDIA GeForce RTX 4080 SUPER' }],
      processes: [
        { ...proc(1, 'C:\\Program Files\\NVIDIA Corporation\\NVIDIA App\\CEF\\NVIDIA Share.exe', 1), usedMiB: null },
      ],
    };
    const out = formatTable(s, { timestamp: new Date(0) });
    expect(out).toContain('|   0  NVIDIA GeForce RTX 4080 ...    On  |');
    expect(out).toContain('   ...IDIA App\\CEF\\NVIDIA Share.exe      N/A      |');
  });
});

describe('CSV writers', () => {
  it('query-compute-apps with header and units matches the real H200 capture', () => {
    const fields = [
      'timestamp',
      'gpu_name',
      'gpu_bus_id',
      'gpu_serial',
      'gpu_uuid',
      'pid',
      'process_name',
      'used_gpu_memory',
    ];
    const out = formatComputeAppsCsv(H200_LOAD.processes, [H200], fields, {
      header: true,
      units: true,
      timestamp: new Date(Date.UTC(2026, 6, 3, 22, 11, 9, 916)),
    });
    // gpu_serial is not in a snapshot: the capture's masked serial becomes [N/A].
    const expected = readFixture('nvidia-smi/csv/h200_590.48.01_query-compute-apps_load.csv').replaceAll(
      ', 0000000000000,',
      ', [N/A],',
    );
    expect(out).toBe(expected);
  });

  it('header only when there are no compute processes; nothing at all with noheader', () => {
    const fields = [
      'timestamp',
      'gpu_name',
      'gpu_bus_id',
      'gpu_serial',
      'gpu_uuid',
      'pid',
      'process_name',
      'used_gpu_memory',
    ];
    expect(formatComputeAppsCsv([], [H200], fields, { header: true, units: true })).toBe(
      readFixture('nvidia-smi/csv/h200_590.48.01_query-compute-apps_idle_header-only.csv'),
    );
    expect(formatComputeAppsCsv([], [H200], fields, { header: false, units: false })).toBe('');
  });

  it('graphics-only processes are not compute apps', () => {
    const g: GpuProcess = { ...proc(5, 'Xorg', 4), type: 'G' };
    const cg: GpuProcess = { ...proc(6, 'kwin', 25), type: 'C+G' };
    const out = formatComputeAppsCsv([g, cg], [H200], ['pid', 'used_memory'], { header: false, units: false });
    expect(out).toBe('6, 25\n');
  });

  it('the worker query: noheader,nounits, values without units', () => {
    const out = formatQueryGpuCsv(
      [H200, { ...H200, index: 1, busId: '00000000:84:00.0', memoryUsedMiB: 0, utilizationPct: 0 }],
      ['index', 'uuid', 'name', 'pci.bus_id', 'memory.used', 'memory.total', 'utilization.gpu'],
      { header: false, units: false },
    );
    expect(out).toBe(
      '0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H200, 00000000:83:00.0, 32362, 143771, 100\n' +
        '1, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H200, 00000000:84:00.0, 0, 143771, 0\n',
    );
  });

  it('nounits keeps the unit in the header (as the real P100 capture shows)', () => {
    const out = formatQueryGpuCsv([H200], ['memory.used', 'utilization.gpu', 'fan.speed'], {
      header: true,
      units: false,
    });
    expect(out).toBe('memory.used [MiB], utilization.gpu [%], fan.speed [%]\n32362, 100, [N/A]\n');
    const withUnits = formatQueryGpuCsv([H200], ['memory.used', 'utilization.gpu'], { header: false, units: true });
    expect(withUnits).toBe('32362 MiB, 100 %\n');
  });

  it('persistence_mode and driver_version print as in the real H200 all-fields capture (Enabled / Disabled, [N/A] when not given)', () => {
    const out = formatQueryGpuCsv([H200, { ...H200, index: 1 }], ['index', 'driver_version', 'persistence_mode'], {
      header: false,
      units: false,
      driverVersion: '590.48.01',
      persistenceModes: [true, false],
    });
    expect(out).toBe('0, 590.48.01, Enabled\n1, 590.48.01, Disabled\n');
    expect(formatQueryGpuCsv([H200], ['persistence_mode'], { header: false, units: false })).toBe('[N/A]\n');
  });

  it('an unknown field is refused like nvidia-smi does', () => {
    expect(() => formatQueryGpuCsv([H200], ['index', 'memory.usedd'], { header: true, units: true })).toThrow(
      new InvalidQueryFieldError('memory.usedd'),
    );
    try {
      formatComputeAppsCsv([], [H200], ['pid', 'bogus'], { header: true, units: true });
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(InvalidQueryFieldError);
      expect((e as InvalidQueryFieldError).message).toBe('Field "bogus" is not a valid field to query.');
      expect((e as InvalidQueryFieldError).exitCode).toBe(2);
    }
  });
});

describe('formatNvidiaError prints the real texts', () => {
  it.each([
    ['driver_unreachable', 'couldnt-communicate-with-driver.txt', undefined],
    ['no_devices', 'no-devices-were-found.txt', undefined],
    ['device_handle_unknown', 'device-handle-unknown-error_no-space.txt', '00000000:07:00.0'],
  ] as const)('%s', (kind, file, busId) => {
    expect(formatNvidiaError(kind, busId).stdout).toBe(readFixture(`nvidia-smi/errors/${file}`));
  });

  it('version mismatch, with the newer NVML library line', () => {
    const r = formatNvidiaError('nvml_version_mismatch', null, { nvmlLibraryVersion: '570.124' });
    expect(r.stdout).toBe(readFixture('nvidia-smi/errors/nvml-driver-library-version-mismatch_570.124.txt'));
    expect(r.exitCode).toBe(18);
  });

  it('reset refused while in use: exit 255', () => {
    const r = formatNvidiaError('reset_in_use', '00000000:1A:00.0');
    expect(`${r.stdout}exit=${r.exitCode}\n`).toBe(
      readFixture('nvidia-smi/errors/gpu-reset_refused_in-use-by-another-client.txt'),
    );
  });

  it('reset inside a container: not supported, exit 3', () => {
    expect(formatNvidiaError('reset_not_supported', '00000000:01:00.0')).toEqual({
      stdout: 'Resetting GPU 00000000:01:00.0 is not supported.\n',
      stderr: '',
      exitCode: 3,
    });
  });

  it('infoROM warning uses the 4-digit domain, exit 14', () => {
    const r = formatNvidiaError('inforom_corrupted', '00000000:0B:00.0');
    expect(r.stdout).toBe('WARNING: infoROM is corrupted at gpu 0000:0B:00.0\n');
    expect(r.exitCode).toBe(14);
  });

  it('reset success for 8 GPUs', () => {
    const ids = [1, 2, 3, 4, 5, 6, 7, 8].map((n) => `00000000:0${n}:00.0`);
    expect(formatGpuResetSuccess(ids).stdout).toBe(readFixture('nvidia-smi/errors/gpu-reset_success_8gpus.txt'));
  });
});

describe('formatFreeBytes', () => {
  it('free -b layout with the numbers in the right columns', () => {
    const out = formatFreeBytes({
      totalBytes: 482_000_000_000,
      usedBytes: 471_000_000_000,
      availableBytes: 9_000_000_000,
    });
    const [header, mem, swap] = out.split('\n');
    expect(header).toBe('               total        used        free      shared  buff/cache   available');
    expect(mem?.split(/\s+/)).toEqual([
      'Mem:',
      '482000000000',
      '471000000000',
      '9000000000',
      '0',
      '2000000000',
      '9000000000',
    ]);
    expect(swap?.split(/\s+/)).toEqual(['Swap:', '0', '0', '0']);
  });
});
