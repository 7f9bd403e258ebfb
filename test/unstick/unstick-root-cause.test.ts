/**
 * The unstick diagnosis says why, not only what: root causes from the target's own GPU holders and
 * their parents (the launcher above a TP rank), against the host's RAM and the GPUs the container
 * sees. Other containers' processes on the same host are never read into it.
 */
import { describe, expect, it } from 'vitest';
import type { ProcReading } from '../../src/gpu/holders.ts';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { diagnoseReadings, type TargetReadings } from '../../src/readings/unstick-readings.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { CT131_JOB, TP0, TP2, gpus, seedS2 } from './seed-fleet.ts';

const GiB = 2 ** 30;
/** The seed incident's launch (../shared/seeds/000_*.txt), as /proc shows it. */
const SEED =
  'python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300 --hicache-write-policy write_through --hicache-io-backend kernel';
const SEED_WHY =
  '8 ranks × 300 GB host cache (`--hicache-size` is per rank) = 2.4 TB requested on a 449 GiB host: more than its RAM.';

function snapshot(machineId: string, view: 'host' | 'container', ramGiB: number, gpuCount: number): MachineSnapshot {
  return {
    machineId,
    view,
    takenAt: '2026-12-01T12:00:00.000Z',
    gpus: gpus().slice(0, gpuCount),
    processes: [],
    holders: [],
    kernelMounts: [],
    ram: { totalBytes: ramGiB * GiB, usedBytes: ramGiB * 0.98 * GiB, availableBytes: null },
    gpuError: null,
  };
}

/** seedS2's readings with parents added by PID (host readings and container readings alike). */
function withParents(parents: Record<number, string[]>, ctGpus = 8, hostRamGiB = 449): TargetReadings {
  const seed = seedS2();
  const add = (rs: readonly ProcReading[]): ProcReading[] =>
    rs.map((r) =>
      parents[r.pid] ? { ...r, parents: (parents[r.pid] ?? []).map((cmdline, i) => ({ pid: 500 + i, cmdline })) } : r,
    );
  return {
    container: {
      snapshot: snapshot('ct129', 'container', 64, ctGpus),
      readings: { ...seed.container, procs: add(seed.container.procs) },
      commands: [],
    },
    host: {
      snapshot: snapshot('kpro5', 'host', hostRamGiB, 8),
      readings: { ...seed.host, procs: add(seed.host.procs) },
      commands: [],
    },
  };
}

const diagnosed = (r: TargetReadings) => diagnoseReadings('ct129', 'kpro5', r, { containerExecUid: 0 });

describe('root causes in the unstick diagnosis', () => {
  it("the seed: ranks titled sglang::scheduler_TP0/TP2 under the launcher → the host-cache sentence against the host's 449 GiB, not the container's own RAM", () => {
    const d = diagnosed(withParents({ [TP0.pid]: [SEED, 'bash'], [TP2.pid]: [SEED, 'bash'] }));
    expect(d.causes?.map((c) => c.sentence)).toEqual([
      SEED_WHY,
      "Each rank reserves 93 % of its GPU's memory (`--mem-fraction-static` 0.93), so little is left for anything else on that GPU.",
    ]);
  });

  it("the container's own view of the launcher counts too (its /proc shows the same parent), against the GPUs the container sees", () => {
    const d = diagnosed(withParents({ 57: [SEED.replace(' --mem-fraction-static 0.93', '')] }, 4));
    expect(d.causes?.map((c) => c.kind)).toEqual(['host_memory_over_ram', 'ranks_over_gpus']);
    expect(d.causes?.[1]?.sentence).toBe('`--tp-size` 8 asks for 8 GPUs, and this machine sees 4.');
  });

  it("another container's job on the same host is never read into the target's causes", () => {
    const d = diagnosed(withParents({ [CT131_JOB.pid]: [SEED] }));
    expect(d.causes).toBeUndefined();
  });

  it('unknown programs get no guess: no causes at all', () => {
    expect(
      diagnosed(
        withParents({ [TP0.pid]: ['python3 train.py --tp-size 8 --hicache-size 300 --enable-hierarchical-cache'] }),
      ).causes,
    ).toBeUndefined();
  });

  it('the diagnosis message has a Why line per cause, its flag names as code, and nothing else of the command line', () => {
    const d = diagnosed(withParents({ [TP0.pid]: [`${SEED} <!channel> \`reboot\``] }));
    const meta: IncidentMeta = {
      id: 'inc_20261201_120000_abc123',
      kind: 'unstick',
      requester: 'U0ALICE',
      channel: 'C0GPUOPS',
      targets: ['ct129'],
      text: 'ct129',
      reason: null,
      createdAt: '2026-12-01T12:00:00.000Z',
    };
    const views = renderUnstick(meta, [
      { id: '1-0', type: 'diagnosis', at: '2026-12-01T12:00:01.000Z', label: 'before', diagnosis: d },
    ]);
    const msg = views.find((v) => v.key === 'ev:1-0');
    expect(msg?.text).toContain(`• Why: ${SEED_WHY}`);
    expect(JSON.stringify(msg)).not.toMatch(/<!channel>|reboot|kimi/);
  });

  it("a cause the before table said is not said again by the host's table or the diagnosis; one it did not say is", () => {
    const d = diagnosed(withParents({ [TP0.pid]: [SEED, 'bash'], [TP2.pid]: [SEED, 'bash'] }));
    const [first, second] = d.causes ?? [];
    if (!first || !second) throw new Error('fixture: the seed has two causes');
    const meta: IncidentMeta = {
      id: 'inc_20261201_120000_abc124',
      kind: 'unstick',
      requester: 'U0ALICE',
      channel: 'C0GPUOPS',
      targets: ['ct129'],
      text: 'ct129',
      reason: null,
      createdAt: '2026-12-01T12:00:00.000Z',
    };
    const at = '2026-12-01T12:00:01.000Z';
    const views = renderUnstick(meta, [
      {
        id: '1-0',
        type: 'snapshot',
        at,
        label: 'before',
        snapshot: { ...snapshot('ct129', 'container', 449, 8), rootCauses: [first] },
        commands: [],
      },
      {
        id: '1-1',
        type: 'snapshot',
        at,
        label: 'before',
        snapshot: { ...snapshot('kpro5', 'host', 449, 8), rootCauses: [first] },
        commands: [],
      },
      { id: '1-2', type: 'diagnosis', at, label: 'before', diagnosis: d },
    ]);
    const text = (key: string): string => views.find((v) => v.key === key)?.text ?? '';
    expect(text('ev:1-0')).toContain(`:bulb: Why: ${SEED_WHY}`);
    expect(text('ev:1-1')).not.toContain('Why:');
    expect(text('ev:1-2')).not.toContain(SEED_WHY);
    expect(text('ev:1-2')).toContain(`• Why: ${second.sentence}`);
  });
});
