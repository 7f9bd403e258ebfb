/**
 * Escalation without waiting, and an init never killed, on the real sshd fleet:
 * - tier 1 escalates at once: a holder the container may not signal (EPERM) is not waited for;
 *   only the memory of the holders actually signalled is (release timeout kept short here, and
 *   the order of what happened is asserted, not wall-clock time);
 * - a container whose PID 1 holds a GPU: killing it would stop the container, so gpu-medic
 *   refuses, says why and what to do, and signals nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isSignalCommand } from '../../src/agent-grammar/templates/signal.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { runUnstickJob } from '../../workers/unstick.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import { TIMING, inventoryOf, ofType, procStart, startRig, type Rig } from './rig.ts';

let rig: Rig;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 8 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      {
        id: 'ct131',
        vmid: 131,
        host: 'kpro5',
        ownAddress: true,
        initHolds: { gpus: [{ index: 6, mib: 61_440 }], title: 'python3 -m vllm.entrypoints.openai.api_server' },
      },
    ],
  });
});

afterAll(async () => {
  await rig?.stop();
});

/** Every command in order, with what a release poll saw: the host PIDs nvidia-smi still listed. */
interface Seen {
  kind: 'signal' | 'apps' | 'other';
  signal: string | null;
  listed: number[];
}

function recording(base: Executor, seen: Seen[]): Executor {
  return {
    async exec(route, spec) {
      const r = await base.exec(route, spec);
      const apps = spec.argv[0] === 'nvidia-smi' && spec.argv.some((w) => w.startsWith('--query-compute-apps='));
      seen.push({
        kind: isSignalCommand(spec.argv) ? 'signal' : apps ? 'apps' : 'other',
        signal: isSignalCommand(spec.argv) ? (spec.argv[5] ?? null) : null,
        listed: apps
          ? r.stdout
              .split('\n')
              .flatMap((l) => (/^\S+, (\d+),/.exec(l)?.[1] ? [Number(/^\S+, (\d+),/.exec(l)?.[1])] : []))
          : [],
      });
      return r;
    },
    close: () => base.close(),
  };
}

describe('tier 1 escalates at once for what it could not signal', () => {
  it('one holder signalled, one refused with EPERM: the wait ends when the signalled one’s memory is back, while the refused one still holds; then straight to the host card', async () => {
    // The container login is fleetuser: it may signal fleetuser's process, not root's.
    const mine = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 20_000 }],
      title: 'sglang::scheduler_TP0',
      user: 'fleetuser',
    });
    const roots = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 1, mib: 30_000 }],
      title: 'sglang::scheduler_TP1',
    });
    const inventory = inventoryOf(rig.fleet, (inv) => {
      const c = inv.containers.find((x) => x.id === 'ct129');
      if (c) c.user = 'fleetuser';
    });
    const ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
    const seen: Seen[] = [];
    try {
      const id = await rig.newIncident('ct129');
      // A release timeout far longer than the test: only its order of events may decide.
      const timing = { ...TIMING, releaseTimeoutMs: 60_000 };
      await runUnstickJob(
        { kind: 'unstick', incidentId: id, machineId: 'ct129' },
        rig.deps({ inventory, executor: recording(ex, seen), timing }),
      );
      const ev = await rig.events(id);

      const term = ofType(ev, 'signalled').filter((s) => s.signal === 'TERM');
      expect(term.map((s) => [s.hostPid, s.result]).sort()).toEqual(
        [
          [mine.hostPid, 'sent'],
          [roots.hostPid, 'skipped'],
        ].sort(),
      );
      expect(term.find((s) => s.hostPid === roots.hostPid)?.reason).toMatch(/not permitted/i);
      expect(procStart(roots.hostPid)).toBe(roots.startTime);

      // The release wait: every poll after the TERM until the wait ended. It ended on a poll that
      // still listed the refused holder (it was not waited for) and no longer the signalled one.
      const termAt = seen.findIndex((s) => s.kind === 'signal' && s.signal === 'TERM');
      const polls = seen.slice(termAt + 1).filter((s) => s.kind === 'apps');
      const lastWaitPoll = polls.find((p) => !p.listed.includes(mine.hostPid));
      expect(lastWaitPoll?.listed).toContain(roots.hostPid);
      const finished = ofType(ev, 'step_finished')[0];
      expect(finished?.outcome).toBe('partial');
      expect(finished?.message).toMatch(/GPU memory came back after/);

      // Then the host-level card, for the refused holder only.
      const types = ev.map((e) => e.type);
      expect(types.indexOf('approval_requested')).toBeGreaterThan(types.indexOf('step_finished'));
      const req = ofType(ev, 'approval_requested')[0];
      expect(req?.step.kind).toBe('host_kill');
      expect(req?.step.targets.map((t) => t.hostPid)).toEqual([roots.hostPid]);
    } finally {
      await ex.close();
      await rig.fleet.endProcess(roots).catch(() => undefined);
      const holder = await rig.lock.holder('ct129');
      if (holder) await rig.lock.release('ct129', holder.incidentId);
    }
  });
});

describe('a container whose init (PID 1) holds a GPU', () => {
  it('is refused with advice (stop the container yourself): no card, no signal, the init and its container still run', async () => {
    const init = rig.fleet.initHolder('ct131');
    if (init === null) throw new Error('fleet: ct131 has no init holder');
    expect(init.containerPid).toBe(1);
    expect(rig.fleet.gpuMemory('kpro5')[6]?.usedMiB).toBe(61_440);
    const initBefore = rig.fleet.machine('ct131').initHostPid;
    const id = await rig.newIncident('ct131');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct131' }, rig.deps());
    const ev = await rig.events(id);

    const before = ofType(ev, 'diagnosis')[0]?.diagnosis;
    expect(
      before?.gpus
        .find((g) => g.index === 6)
        ?.holders.map((h) => [h.process.hostPid, h.process.containerPid, h.isContainerInit]),
    ).toEqual([[init.hostPid, 1, true]]);
    expect(ofType(ev, 'approval_requested')).toEqual([]);
    expect(ofType(ev, 'signalled')).toEqual([]);
    expect(ofType(ev, 'command').filter((c) => c.role === 'term' || c.role === 'kill')).toEqual([]);
    expect(rig.fleet.signals().filter((s) => s.id === init.id)).toEqual([]);
    expect(procStart(init.hostPid)).toBe(init.startTime);
    expect(rig.fleet.machine('ct131').initHostPid).toBe(initBefore);
    expect(rig.fleet.gpuMemory('kpro5')[6]?.usedMiB).toBe(61_440);
    const verdict = ofType(ev, 'verdict')[0]?.verdict;
    expect(verdict?.kind).toBe('still_stuck');
    expect(verdict?.nextStep).toContain("held by ct131's init (PID 1); only stopping the container frees it");
    expect(verdict?.nextStep).toContain('gpu-medic does not stop containers');
    expect(ev.at(-1)?.type).toBe('finished');
    expect(await rig.lock.holder('ct131')).toBeNull();
  });
});
