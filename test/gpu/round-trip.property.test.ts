import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  formatComputeAppsCsv,
  formatFreeBytes,
  formatQueryGpuCsv,
  formatTable,
  formatXml,
  tableGpuName,
  tableProcessName,
} from '../harness/nvidia-smi-format/index.ts';
import { parseComputeAppsCsv, parseFreeBytes, parseNvidiaOutput, parseQueryGpuCsv } from '../../src/gpu/parse/index.ts';
import type { ParsedOutput } from '../../src/gpu/types.ts';
import { gpusArb, processesArb, snapshotArb } from './snapshot-arbitraries.ts';

const WORKER_GPU_FIELDS = ['index', 'uuid', 'name', 'pci.bus_id', 'memory.used', 'memory.total', 'utilization.gpu'];
const WORKER_APP_FIELDS = ['gpu_uuid', 'pid', 'process_name', 'used_memory'];
const dateArb = fc.date({
  min: new Date(Date.UTC(2000, 0, 1)),
  max: new Date(Date.UTC(2099, 11, 31)),
  noInvalidDate: true,
});

function value(r: ReturnType<typeof parseNvidiaOutput>): ParsedOutput {
  if (!r.ok) throw new Error(r.error.reason);
  return r.value;
}

describe('writers → parser round trips', () => {
  it('default table: GPUs, MIG devices and processes come back (names as the table truncates them)', () => {
    fc.assert(
      fc.property(snapshotArb({ withMig: true }), dateArb, (s, timestamp) => {
        const out = value(parseNvidiaOutput(formatTable(s, { timestamp })));
        expect(out.source).toBe('table');
        expect(out.driverVersion).toBe(s.driverVersion);
        expect(out.cudaVersion).toBe(s.cudaVersion);
        expect(out.gpus).toEqual(s.gpus.map((g) => ({ ...g, uuid: null, name: tableGpuName(g.name) })));
        expect(out.migDevices).toEqual(s.migDevices);
        expect(out.processes).toEqual(
          s.processes.map((p) => ({ ...p, gpuUuid: null, name: tableProcessName(p.name) })),
        );
        expect(out.error).toBeNull();
      }),
      { numRuns: 300 },
    );
  });

  it('container view: same memory, no processes', () => {
    fc.assert(
      fc.property(snapshotArb(), dateArb, (s, timestamp) => {
        const out = value(parseNvidiaOutput(formatTable(s, { timestamp, containerView: true })));
        expect(out.gpus.map((g) => [g.memoryUsedMiB, g.memoryTotalMiB])).toEqual(
          s.gpus.map((g) => [g.memoryUsedMiB, g.memoryTotalMiB]),
        );
        expect(out.processes).toEqual([]);
      }),
      { numRuns: 100 },
    );
  });

  it('the worker query-gpu CSV (noheader,nounits, and with header and units), names may contain ", "', () => {
    fc.assert(
      fc.property(gpusArb({ nameSep: fc.constantFrom(' ', ', ') }), fc.boolean(), (gpus, decorated) => {
        const text = formatQueryGpuCsv(gpus, WORKER_GPU_FIELDS, { header: decorated, units: decorated });
        const r = parseQueryGpuCsv(text, decorated ? null : WORKER_GPU_FIELDS);
        expect(r.ok && r.value.gpus).toEqual(gpus);
      }),
      { numRuns: 300 },
    );
  });

  it('query-gpu CSV with any subset and order of the modelled fields', () => {
    const fieldsArb = fc.shuffledSubarray(WORKER_GPU_FIELDS, { minLength: 1 });
    fc.assert(
      fc.property(gpusArb(), fieldsArb, fc.boolean(), fc.boolean(), (gpus, fields, header, units) => {
        const text = formatQueryGpuCsv(gpus, fields, { header, units });
        const r = parseQueryGpuCsv(text, header ? null : fields);
        if (!r.ok) throw new Error(r.error.reason);
        const has = (f: string): boolean => fields.includes(f);
        expect(r.value.gpus).toEqual(
          gpus.map((g) => ({
            index: has('index') ? g.index : null,
            name: has('name') ? g.name : null,
            busId: has('pci.bus_id') ? g.busId : null,
            uuid: has('uuid') ? g.uuid : null,
            memoryUsedMiB: has('memory.used') ? g.memoryUsedMiB : null,
            memoryTotalMiB: has('memory.total') ? g.memoryTotalMiB : null,
            utilizationPct: has('utilization.gpu') ? g.utilizationPct : null,
          })),
        );
      }),
      { numRuns: 300 },
    );
  });

  it('the worker compute-apps CSV: compute processes only, host PIDs and MiB exact', () => {
    fc.assert(
      fc.property(
        gpusArb().chain((g) => fc.tuple(fc.constant(g), processesArb(g))),
        fc.boolean(),
        ([gpus, processes], decorated) => {
          const text = formatComputeAppsCsv(processes, gpus, WORKER_APP_FIELDS, {
            header: decorated,
            units: decorated,
          });
          const r = parseComputeAppsCsv(text, decorated ? null : WORKER_APP_FIELDS);
          expect(r.ok && r.value.processes).toEqual(
            processes.filter((p) => p.type !== 'G').map((p) => ({ ...p, gpuIndex: null, type: null })),
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  it('XML (-q -x v13): everything a snapshot holds comes back', () => {
    fc.assert(
      fc.property(
        snapshotArb({ withMig: true, nameSep: fc.constantFrom(' ', ' & ', ' <x> ') }),
        dateArb,
        (s, timestamp) => {
          const out = value(parseNvidiaOutput(formatXml(s, { timestamp })));
          expect(out.source).toBe('xml');
          expect(out.driverVersion).toBe(s.driverVersion);
          expect(out.gpus).toEqual(s.gpus);
          expect(out.migDevices).toEqual(s.gpus.flatMap((g) => s.migDevices.filter((m) => m.gpuIndex === g.index)));
          expect(out.processes).toEqual(s.gpus.flatMap((g) => s.processes.filter((p) => p.gpuUuid === g.uuid)));
        },
      ),
      { numRuns: 200 },
    );
  });

  it('free -b', () => {
    const memArb = fc.integer({ min: 1, max: 2 ** 45 }).chain((total) =>
      fc.record({
        totalBytes: fc.constant(total),
        usedBytes: fc.integer({ min: 0, max: total }),
        availableBytes: fc.integer({ min: 0, max: total }),
      }),
    );
    fc.assert(
      fc.property(memArb, (mem) => {
        expect(parseFreeBytes(formatFreeBytes(mem))).toEqual({ ok: true, value: mem });
      }),
    );
  });
});
