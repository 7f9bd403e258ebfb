/**
 * A verdict claims only the target's memory, as a property: over random before/after views of kpro5 with
 * neighbours (another container's jobs, host processes), concurrent incidents (neighbours ending or starting
 * between the views) and leaks, the verdict for ct129 never claims more freed memory than ct129's own holders
 * held plus memory no process held, and what it does not claim is reported as others'.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { IDLE_MIB } from '../../src/gpu/snapshot.ts';
import type { GpuProcess } from '../../src/gpu/types.ts';
import { verdictOf } from '../../src/gpu/verdict.ts';
import { CT129_NS, CT131_NS, HOST_NS, gpus, readings, uuid, type FakeProc } from './seed-fleet.ts';
import { diagnoseWith } from './scenarios.ts';

const GPUS = 4;
type Owner = 'target' | 'ct131' | 'host';
interface ProcModel {
  owner: Owner;
  gpu: number;
  mibBefore: number;
  /** null: ended between the views (killed by this incident, or by a concurrent one). */
  mibAfter: number | null;
}
interface World {
  procs: ProcModel[];
  /** Processes that appear only in the after-view (a neighbour starting a job meanwhile). */
  late: Array<{ owner: Exclude<Owner, 'target'>; gpu: number; mib: number }>;
  leakBefore: number[];
  leakAfter: number[];
}

const mibArb = fc.integer({ min: 1, max: 60_000 });
const ownerArb = fc.constantFrom<Owner>('target', 'ct131', 'host');
const worldArb: fc.Arbitrary<World> = fc.record({
  procs: fc.array(
    fc.record({
      owner: ownerArb,
      gpu: fc.integer({ min: 0, max: GPUS - 1 }),
      mibBefore: mibArb,
      mibAfter: fc.option(mibArb, { freq: 2 }),
    }),
    { maxLength: 8 },
  ),
  late: fc.array(
    fc.record({
      owner: fc.constantFrom<'ct131' | 'host'>('ct131', 'host'),
      gpu: fc.integer({ min: 0, max: GPUS - 1 }),
      mib: mibArb,
    }),
    { maxLength: 3 },
  ),
  leakBefore: fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 30_000 })), {
    minLength: GPUS,
    maxLength: GPUS,
  }),
  leakAfter: fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 30_000 })), {
    minLength: GPUS,
    maxLength: GPUS,
  }),
});

const NS: Record<Owner, string> = { target: CT129_NS, ct131: CT131_NS, host: HOST_NS };

function fake(i: number, owner: Owner): FakeProc {
  const pid = 700_000 + i;
  return {
    pid,
    nsPids: owner === 'host' ? [pid] : [pid, 100 + i],
    uid: 100_000,
    ns: NS[owner],
    comm: 'python3',
    start: 40_000_000 + i,
    cmdline: ['python3', `job${i}.py`],
  };
}

function view(rows: Array<{ proc: FakeProc; gpu: number; mib: number }>, leak: readonly number[]) {
  const used: Record<number, number> = {};
  for (let g = 0; g < GPUS; g++)
    used[g] = (leak[g] ?? 0) + rows.filter((r) => r.gpu === g).reduce((n, r) => n + r.mib, 0);
  const apps: GpuProcess[] = rows.map((r) => ({
    gpuIndex: r.gpu,
    gpuUuid: uuid(r.gpu),
    pid: r.proc.pid,
    type: 'C',
    name: 'python3',
    usedMiB: r.mib,
  }));
  const procs = rows.map((r) => r.proc);
  return diagnoseWith(
    {
      gpus: gpus(used).slice(0, GPUS),
      apps,
      procs: readings([...new Set(procs.map((p) => p.pid))], procs),
      targetPidNs: CT129_NS,
    },
    { holders: [], procs: [] },
  );
}

function verdictFor(w: World) {
  const procs = w.procs.map((p, i) => ({ ...p, proc: fake(i, p.owner) }));
  const late = w.late.map((p, i) => ({ ...p, proc: fake(100 + i, p.owner) }));
  const before = view(
    procs.map((p) => ({ proc: p.proc, gpu: p.gpu, mib: p.mibBefore })),
    w.leakBefore,
  );
  const after = view(
    [
      ...procs.flatMap((p) => (p.mibAfter === null ? [] : [{ proc: p.proc, gpu: p.gpu, mib: p.mibAfter }])),
      ...late.map((p) => ({ proc: p.proc, gpu: p.gpu, mib: p.mib })),
    ],
    w.leakAfter,
  );
  return { before, after, verdict: verdictOf(before, after) };
}

/** What ct129's incident could at most free on a GPU: its own holders' MiB and memory no process held. */
function targetBound(w: World, gpu: number): number {
  const own = w.procs.filter((p) => p.owner === 'target' && p.gpu === gpu).reduce((n, p) => n + p.mibBefore, 0);
  const leak = w.leakBefore[gpu] ?? 0;
  return own + (leak > IDLE_MIB ? leak : 0);
}

describe('verdict property: freed ≤ held by the target', () => {
  it('per GPU and in total, freed never exceeds what ct129’s holders held plus memory no process held', () => {
    fc.assert(
      fc.property(worldArb, (w) => {
        const { verdict } = verdictFor(w);
        let bound = 0;
        for (const g of verdict.gpus) {
          const b = targetBound(w, g.index ?? -1);
          bound += b;
          expect(g.freedMiB ?? 0).toBeGreaterThanOrEqual(0);
          expect(g.freedMiB ?? 0).toBeLessThanOrEqual(b);
          expect(g.heldMiB).toBe(b);
        }
        expect(verdict.totalFreedMiB).toBeLessThanOrEqual(bound);
      }),
      { numRuns: 300 },
    );
  });

  it('whatever the GPU’s memory changed by and the incident did not free is the others’ change, reported in words', () => {
    fc.assert(
      fc.property(worldArb, (w) => {
        const { verdict } = verdictFor(w);
        for (const g of verdict.gpus) {
          if (g.beforeMiB === null || g.afterMiB === null || g.freedMiB === null || g.othersFreedMiB === null)
            throw new Error('every number is known here');
          expect(g.freedMiB + g.othersFreedMiB).toBe(g.beforeMiB - g.afterMiB);
          const said = verdict.outside.some((s) => s.startsWith(`GPU ${g.index}: `));
          expect(said).toBe(Math.abs(g.othersFreedMiB) > IDLE_MIB);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('a GPU where ct129 held nothing and nothing was leaked is never freed by ct129’s incident', () => {
    fc.assert(
      fc.property(worldArb, (w) => {
        const { verdict } = verdictFor(w);
        for (const g of verdict.gpus) if (targetBound(w, g.index ?? -1) === 0) expect(g.freedMiB).toBe(0);
      }),
      { numRuns: 300 },
    );
  });
});
