import { describe, expect, it } from 'vitest';
import { verdictOf } from '../../src/gpu/verdict.ts';
import { CT129_INIT, CT129_SERVER, CT131_JOB, app, gpus, readings, seedS2 } from './seed-fleet.ts';
import { planUnstick } from '../../src/plan/unstick-plan.ts';
import { allClean, diagnoseWith, s2, s3, s5 } from './scenarios.ts';

describe('verdictOf', () => {
  it('S2 → Recovered: 96,413 → 0 and 96,417 → 0 MiB, ct131’s job untouched', () => {
    const v = verdictOf(s2(), allClean());
    expect(v.kind).toBe('recovered');
    expect(v.title).toBe('Recovered');
    expect(v.totalFreedMiB).toBe(96_413 + 96_417);
    expect(
      v.gpus
        .filter((g) => g.index === 0 || g.index === 2 || g.index === 5)
        .map((g) => [g.index, g.beforeMiB, g.afterMiB, g.freedMiB, g.recovered, g.after]),
    ).toEqual([
      [0, 96_413, 0, 96_413, true, 'idle'],
      [2, 96_417, 0, 96_417, true, 'idle'],
      [5, 40_211, 40_211, 0, false, 'held_outside'],
    ]);
    expect(v.nextStep).toBeNull();
  });

  it("a neighbour's process exiting while the after-view is read is the neighbour's change, not the target's unfinished work", () => {
    // Two unsticks at once on kpro5: ct129's ranks (GPUs 0, 2) are freed by this incident, while
    // ct131's incident kills its job on GPU 5 just as this one reads: host nvidia-smi still lists
    // the job, its /proc entry is already gone, so GPU 5 reads as "holders changed".
    const after = diagnoseWith(
      {
        ...seedS2().host,
        gpus: gpus({ 5: 40_211 }),
        apps: [app(CT131_JOB, 5, 40_211)],
        procs: readings([CT131_JOB.pid], []),
      },
      { holders: [], procs: [] },
    );
    expect(after.gpus[5]?.kind).toBe('unidentified');
    const v = verdictOf(s2(), after);
    expect(v.kind).toBe('recovered');
    expect(v.nextStep).toBeNull();
    expect(v.outside.join(' ')).toMatch(/GPU 5: .*outside this incident/);
  });

  it('S3 after tier 1 only, the init still holding GPU 0 → Partially recovered, next step is stopping the container by hand (no kill offered)', () => {
    const afterTier1 = diagnoseWith(
      {
        ...seedS2().host,
        gpus: gpus({ 0: 96_413, 5: 40_211 }),
        apps: [app(CT129_INIT, 0, 96_413), app(CT131_JOB, 5, 40_211)],
        procs: readings([CT129_INIT.pid, CT131_JOB.pid], [CT129_INIT, CT131_JOB]),
      },
      { holders: [], procs: [] },
    );
    const v = verdictOf(s3(), afterTier1);
    expect(v.kind).toBe('partially_recovered');
    expect(v.totalFreedMiB).toBe(96_417);
    expect(v.nextStep).toBe(
      "GPU 0: held by ct129's init (PID 1); only stopping the container frees it, and every process in it ends with it. gpu-medic does not stop containers: if ct129 may stop, run `pct stop` for it on kpro5 yourself.",
    );
  });

  it('kill done but memory still leaked → Still stuck, next step is a host reset', () => {
    const v = verdictOf(s5(), s5());
    expect(v.kind).toBe('still_stuck');
    expect(v.totalFreedMiB).toBe(0);
    expect(v.nextStep).toBe(
      'GPU 0: memory with no process; a host-level GPU reset on kpro5, approved by a second person. GPU 2: memory with no process; a host-level GPU reset on kpro5, approved by a second person.',
    );
  });

  it('nothing stuck before or after', () => {
    expect(verdictOf(allClean(), allClean()).kind).toBe('nothing_stuck');
  });

  it('a GPU missing after (unreadable) is not counted as freed', () => {
    const after = { ...allClean(), gpus: allClean().gpus.filter((g) => g.index !== 2) };
    const v = verdictOf(s2(), after);
    expect(v.gpus.find((g) => g.index === 2)).toMatchObject({ afterMiB: null, freedMiB: null, recovered: false });
  });
});

describe('a zombie holder: no kill frees its memory, its parent reaping it does', () => {
  /** ct129's server after its host-level SIGKILL: a zombie its parent (host PID 811_899) has not reaped, still charged 30,000 MiB. */
  const zombieAfterKill = () => {
    const z = { ...CT129_SERVER, state: 'Z', cmdline: [] };
    const procs = readings([z.pid], [z]).map((r) => ({
      ...r,
      parents: [{ pid: 811_899, cmdline: 'python3 /opt/launch.py --serve' }],
    }));
    return diagnoseWith({ ...seedS2().host, gpus: gpus({ 3: 30_000 }), apps: [app(z, 3, 30_000)], procs });
  };

  it('after a host kill that ran: Still stuck, the advice names the parent and never says the kill "ran and still holds"', () => {
    const after = zombieAfterKill();
    expect(after.gpus[3]?.kind).toBe('held_by_zombie');
    const v = verdictOf(after, after, {
      steps: [
        {
          kind: 'host_kill',
          outcome: 'done',
          by: null,
          hostPids: [CT129_SERVER.pid],
          gpuHostIndexes: [],
          message: null,
        },
      ],
      approvers: ['U0APPROVE1'],
      requester: 'U0REQUEST1',
    });
    expect(v.kind).toBe('still_stuck');
    expect(v.nextStep).toMatch(/is a zombie \(state Z\)/);
    expect(v.nextStep).toContain('host PID 811899 `python3 /opt/launch.py --serve`, in ct129');
    expect(v.nextStep).not.toMatch(/ran and it still holds|reboot|approved by a second person/);
  });

  it('is no step target and raises no card: the plan leaves it alone, naming its parent', () => {
    const plan = planUnstick(zombieAfterKill(), { incidentId: 'inc_z', vmid: 129 });
    expect(plan.steps).toEqual([]);
    expect(plan.leftAlone.join(' ')).toMatch(/zombie.*host PID 811899/);
  });
});
