import fc from 'fast-check';
import type { Gpu, GpuProcess, MigDevice, ParsedOutput } from '../../src/gpu/types.ts';

const WORD = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._\-/]{0,11}$/);

/** Names as drivers print them: words separated by one space (or `, `), no edge spaces. */
const nameArb = (maxWords: number, sep: fc.Arbitrary<string> = fc.constant(' ')): fc.Arbitrary<string> =>
  fc
    .tuple(WORD, fc.array(fc.tuple(sep, WORD), { maxLength: maxWords - 1 }))
    .map(([w, rest]) => w + rest.map(([s, x]) => s + x).join(''));

const memoryArb = fc.oneof(
  {
    weight: 9,
    arbitrary: fc
      .integer({ min: 1, max: 200_000 })
      .chain((total) => fc.tuple(fc.integer({ min: 0, max: total }), fc.constant(total))),
  },
  { weight: 1, arbitrary: fc.constant<[null, null]>([null, null]) },
);

const uuidArb = fc.uuid().map((u) => `GPU-${u}`);

export function gpusArb(opts: { nameSep?: fc.Arbitrary<string>; allowNullMemory?: boolean } = {}): fc.Arbitrary<Gpu[]> {
  return fc.uniqueArray(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 8 }).chain((buses) =>
    fc.tuple(
      ...buses.map((bus, index) =>
        fc
          .record({
            index: fc.constant(index),
            name: nameArb(5, opts.nameSep),
            busId: fc
              .integer({ min: 0, max: 0xffff })
              .map(
                (d) =>
                  `${d.toString(16).toUpperCase().padStart(8, '0')}:${bus.toString(16).toUpperCase().padStart(2, '0')}:00.0`,
              ),
            uuid: uuidArb,
            memory: opts.allowNullMemory === false ? memoryArb.filter(([u]) => u !== null) : memoryArb,
            utilizationPct: fc.option(fc.integer({ min: 0, max: 100 }), { freq: 8 }),
          })
          .map(({ memory, ...g }): Gpu => ({ ...g, memoryUsedMiB: memory[0], memoryTotalMiB: memory[1] })),
      ),
    ),
  );
}

export function processesArb(gpus: readonly Gpu[]): fc.Arbitrary<GpuProcess[]> {
  return fc.array(
    fc
      .record({
        gpu: fc.constantFrom(...gpus),
        pid: fc.integer({ min: 1, max: 4_194_304 }),
        type: fc.constantFrom('C', 'G', 'C+G'),
        name: nameArb(4),
        usedMiB: fc.option(fc.integer({ min: 0, max: 200_000 }), { freq: 8 }),
      })
      .map(({ gpu, ...p }): GpuProcess => ({ gpuIndex: gpu.index, gpuUuid: gpu.uuid, ...p })),
    { maxLength: 12 },
  );
}

function migArb(gpus: readonly Gpu[]): fc.Arbitrary<MigDevice[]> {
  return fc.array(
    fc.record({
      gpuIndex: fc.constantFrom(...gpus.map((g) => g.index ?? 0)),
      gi: fc.integer({ min: 0, max: 14 }),
      ci: fc.integer({ min: 0, max: 7 }),
      migDevice: fc.integer({ min: 0, max: 6 }),
      memoryUsedMiB: fc.integer({ min: 0, max: 99_999 }),
      memoryTotalMiB: fc.integer({ min: 1, max: 99_999 }),
    }),
    { maxLength: 4 },
  );
}

export function snapshotArb(
  opts: { withMig?: boolean; nameSep?: fc.Arbitrary<string> } = {},
): fc.Arbitrary<ParsedOutput> {
  return gpusArb({ nameSep: opts.nameSep }).chain((gpus) =>
    fc
      .tuple(
        processesArb(gpus),
        opts.withMig === true ? migArb(gpus) : fc.constant<MigDevice[]>([]),
        fc.stringMatching(/^\d{3}\.\d{2,3}(\.\d{2})?$/),
      )
      .map(
        ([processes, migDevices, driver]): ParsedOutput => ({
          source: 'table',
          driverVersion: driver,
          cudaVersion: '13.1',
          gpus,
          migDevices,
          processes,
          holders: [],
          kernelMounts: [],
          error: null,
        }),
      ),
  );
}
