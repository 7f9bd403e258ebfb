/**
 * Every word of a verdict is true, at the pure core: a verdict speaks only of the target's memory, memory
 * no process holds is counted against every holder on the host, a GPU in error (or missing after)
 * is never green, and the advice after a denial, expiry or failure is what is really left.
 */
import { describe, expect, it } from 'vitest';
import { diagnose, type Diagnosis } from '../../src/gpu/diagnose.ts';
import { buildHolders } from '../../src/gpu/holders.ts';
import type { Gpu, NvidiaError } from '../../src/gpu/types.ts';
import { isGreen, verdictOf, type VerdictContext } from '../../src/gpu/verdict.ts';
import { planUnstick } from '../../src/plan/unstick-plan.ts';
import {
  CT129_NS,
  CT129_SERVER,
  CT131_JOB,
  MONITOR_CT_PID,
  TP0,
  TP2,
  app,
  gpus,
  readings,
  seedS2,
} from './seed-fleet.ts';
import { allClean, diagnoseWith, s2, s3, s3HostKill } from './scenarios.ts';

const LOST: NvidiaError = {
  kind: 'gpu_lost',
  message: 'Unable to determine the device handle for GPU0000:38:00.0: GPU is lost',
  busId: '00000000:38:00.0',
};
const MISMATCH: NvidiaError = {
  kind: 'nvml_version_mismatch',
  message: 'Failed to initialize NVML: Driver/library version mismatch',
  busId: null,
};

/** Both views of kpro5/ct129 with nvidia-smi failing as a whole: no GPU rows, only the error. */
function unreadable(error: NvidiaError): Diagnosis {
  const { container } = seedS2();
  return diagnoseWith({ gpus: [], apps: [], procs: [], targetPidNs: CT129_NS }, container, { errors: [error] });
}

describe('finding 1: a verdict claims only the memory the target held', () => {
  it('ct131’s job on GPU 5 ending meanwhile is not freed by ct129’s incident: it is reported apart', () => {
    const bothGone = diagnoseWith(
      { gpus: gpus({}), apps: [], procs: [], targetPidNs: CT129_NS },
      { holders: [], procs: [] },
    );
    const v = verdictOf(s2(), bothGone);
    expect(v.kind).toBe('recovered');
    expect(v.totalFreedMiB).toBe(96_413 + 96_417);
    expect(v.gpus.find((g) => g.index === 5)).toMatchObject({
      beforeMiB: 40_211,
      afterMiB: 0,
      heldMiB: 0,
      leftMiB: 0,
      freedMiB: 0,
      othersFreedMiB: 40_211,
    });
    expect(v.outside).toEqual(['GPU 5: 40,211 MiB freed outside this incident.']);
  });

  it('on a GPU shared with ct131, only ct129’s rank’s MiB count as held and freed', () => {
    const procs = [TP0, CT131_JOB];
    const shared = diagnoseWith(
      {
        gpus: gpus({ 0: 96_413 + 40_211 }),
        apps: [app(TP0, 0, 96_413), app(CT131_JOB, 0, 40_211)],
        procs: readings(
          procs.map((p) => p.pid),
          procs,
        ),
        targetPidNs: CT129_NS,
      },
      { holders: [], procs: [] },
    );
    const neighbourLeft = diagnoseWith(
      {
        gpus: gpus({ 0: 40_211 + 8_000 }),
        apps: [app(CT131_JOB, 0, 40_211 + 8_000)],
        procs: readings([CT131_JOB.pid], [CT131_JOB]),
        targetPidNs: CT129_NS,
      },
      { holders: [], procs: [] },
    );
    const v = verdictOf(shared, neighbourLeft);
    expect(v.gpus[0]).toMatchObject({ heldMiB: 96_413, leftMiB: 0, freedMiB: 96_413, othersFreedMiB: -8_000 });
    expect(v.totalFreedMiB).toBe(96_413);
    expect(v.outside).toEqual(['GPU 0: 8,000 MiB more in use, taken by processes outside this incident.']);
  });
});

describe('finding 2: unaccounted memory counts every holder on the host', () => {
  // GPU 5: ct131's live job holds 40,960 MiB and 8,192 MiB are held by no process.
  const leakBesideJob = (): Diagnosis =>
    diagnoseWith(
      {
        gpus: gpus({ 5: 40_960 + 8_192 }),
        apps: [app(CT131_JOB, 5, 40_960)],
        procs: readings([CT131_JOB.pid], [CT131_JOB]),
        targetPidNs: CT129_NS,
      },
      { holders: [], procs: [] },
    );

  it('says how much no process holds, names the job beside it, and never claims "no process anywhere" for all of it', () => {
    const g = leakBesideJob().gpus[5];
    expect(g?.unaccountedMiB).toBe(8_192);
    expect(g?.kind).toBe('leak_beside_holders');
    expect(g?.sentence).toContain('8,192 MiB of the 49,152 MiB in use is held by no process anywhere on kpro5');
    expect(g?.sentence).toContain('host PID 823001 `python3 train.py --epochs 3` (40,960 MiB)');
    expect(g?.sentence).not.toContain('49,152 MiB in use and no process anywhere');
  });

  it('offers no reset for a GPU a process still holds; the plan leaves it alone and says why', () => {
    const plan = planUnstick(leakBesideJob(), { incidentId: 'inc_t', vmid: 129 });
    expect(plan.steps.filter((s) => s.kind === 'host_reset')).toEqual([]);
    expect(plan.leftAlone.join(' ')).toMatch(/GPU 5: .*so none is offered/);
  });

  it('the verdict does not advise a host reset while the job holds the GPU', () => {
    const v = verdictOf(leakBesideJob(), leakBesideJob());
    expect(v.kind).toBe('still_stuck');
    expect(v.nextStep).toMatch(
      /^GPU 5: 8,192 MiB is held by no process, beside processes outside ct129 \(host PID 823001\)\. A reset can only run once the GPU has no process/,
    );
    expect(v.gpus[5]).toMatchObject({ heldMiB: 8_192, leftMiB: 8_192, freedMiB: 0 });
  });

  it('the reset card says how much is unaccounted, which holders were ruled out and why', () => {
    const { container } = seedS2();
    const monitorOnly = { ...container, holders: container.holders.filter((h) => h.pid === MONITOR_CT_PID) };
    const d = diagnoseWith({ gpus: gpus({ 7: 30_000 }), apps: [], procs: [], targetPidNs: CT129_NS }, monitorOnly);
    const reset = planUnstick(d, { incidentId: 'inc_t', vmid: 129 }).steps.find((s) => s.kind === 'host_reset');
    expect(reset?.gpus.map((g) => [g.index, g.usedMiB])).toEqual([[7, 30_000]]);
    expect(reset?.explanation).toContain(
      'GPU 7 (host GPU 7): 30,000 MiB unaccounted: 30,000 MiB in use, 0 MiB held by the processes host nvidia-smi lists on it',
    );
    expect(reset?.explanation).toContain(
      'Ruled out: host nvidia-smi lists no process on it, and it sees every process on kpro5 (every container and the host); PID 90 `python3` in ct129 has /dev/nvidiactl, /dev/nvidia0 open but holds no GPU memory (a monitor).',
    );
  });

  it('memory no process holds is still a reset candidate when nothing else is on the GPU', () => {
    const d = diagnoseWith(
      { gpus: gpus({ 7: 30_000 }), apps: [], procs: [], targetPidNs: CT129_NS },
      { holders: [], procs: [] },
    );
    expect(d.gpus[7]).toMatchObject({ kind: 'orphaned_memory', unaccountedMiB: 30_000 });
    expect(planUnstick(d, { incidentId: 'inc_t', vmid: 129 }).steps.map((s) => s.kind)).toEqual(['host_reset']);
  });
});

describe('finding 3: no false green on GPU errors', () => {
  it('a lost GPU that stops nvidia-smi before the run: not "Nothing was stuck", the error is the diagnosis’s', () => {
    const d = unreadable(LOST);
    expect(d.error).toEqual(LOST);
    const v = verdictOf(d, d);
    expect(v.kind).toBe('gpu_error');
    expect(isGreen(v)).toBe(false);
    expect(v.nextStep).toMatch(/GPU is lost.*A reset will not help.*reboot it and check the hardware/);
  });

  it('a lost GPU after the card: not "Recovered · 0 MiB freed"', () => {
    const v = verdictOf(s3(), unreadable(LOST));
    expect(v.kind).toBe('gpu_error');
    expect(v.title).toBe('GPU error');
    expect(v.totalFreedMiB).toBe(0);
    expect(
      v.gpus.filter((g) => g.index === 0 || g.index === 2).map((g) => [g.index, g.afterState, g.freedMiB]),
    ).toEqual([
      [0, 'missing', null],
      [2, 'missing', null],
    ]);
  });

  it('an after-view with no GPU rows and no error (Xid 79: the container’s nvidia-smi lists nothing) is "Not verified", never Recovered', () => {
    const none = diagnoseWith({ gpus: [], apps: [], procs: [], targetPidNs: CT129_NS }, { holders: [], procs: [] });
    const v = verdictOf(s2(), none);
    expect(v.kind).toBe('not_verified');
    expect(isGreen(v)).toBe(false);
    expect(v.nextStep).toMatch(/GPU 0: missing from ct129's nvidia-smi after the run.*Xid 79/);
  });

  it('one target GPU in error after, the other recovered: partial, with the error’s own next step', () => {
    const g = gpus({ 5: 40_211 });
    const after = diagnoseWith(
      {
        gpus: g,
        apps: [app(CT131_JOB, 5, 40_211)],
        procs: readings([CT131_JOB.pid], [CT131_JOB]),
        targetPidNs: CT129_NS,
      },
      { holders: [], procs: [] },
      { errors: [{ ...LOST, busId: g[2]?.busId ?? null }] },
    );
    const v = verdictOf(s2(), after);
    expect(v.kind).toBe('partially_recovered');
    expect(v.gpus.find((x) => x.index === 2)).toMatchObject({
      afterState: 'in_error',
      freedMiB: null,
      recovered: false,
    });
    expect(v.nextStep).toMatch(/^GPU 2: the GPU has fallen off the bus/);
  });

  it('each error kind has its own next step: a version mismatch means reload the modules or reboot', () => {
    const v = verdictOf(unreadable(MISMATCH), unreadable(MISMATCH));
    expect(v.kind).toBe('gpu_error');
    expect(v.nextStep).toMatch(
      /driver was upgraded while the old kernel module stayed loaded.*reload the nvidia kernel modules on kpro5.*or reboot kpro5/,
    );
    expect(v.nextStep).not.toMatch(/GPU is lost/);
  });

  it('the diagnosis of a lost GPU gives the lost GPU’s own next step, not "reset or reboot"', () => {
    const g = gpus();
    const d = diagnoseWith(seedS2().host, seedS2().container, { errors: [{ ...LOST, busId: g[2]?.busId ?? null }] });
    expect(d.gpus[2]?.sentence).toMatch(
      /^GPU 2 is in error: .*GPU is lost\. Nothing will be signalled: the GPU has fallen off the bus .*A reset will not help/,
    );
    expect(d.gpus[2]?.sentence).not.toContain('reset or reboot');
  });

  it('host nvidia-smi failing leaves the container’s GPU unreadable, not "memory with no process"', () => {
    // The container still lists its GPUs while the host's nvidia-smi fails.
    const mixed = diagnoseWithViews(gpus({ 0: 96_413 }), [], [MISMATCH]);
    expect(mixed.gpus[0]?.kind).toBe('gpu_error');
    expect(mixed.gpus[0]?.error).toEqual(MISMATCH);
  });
});

function diagnoseWithViews(containerGpus: Gpu[], hostGpus: Gpu[], errors: NvidiaError[]): Diagnosis {
  return diagnose({
    target: 'ct129',
    host: 'kpro5',
    containerGpus,
    hostGpus,
    holders: buildHolders({ gpus: hostGpus, apps: [], procs: [], targetPidNs: CT129_NS }, { holders: [], procs: [] }),
    errors,
    containerExecUid: 0,
  });
}

describe('finding 4: advice after a denial, an expiry or a failure', () => {
  const ctx = (over: Partial<VerdictContext> = {}): VerdictContext => ({
    steps: [],
    approvers: ['U0BOB', 'U0CAROL'],
    requester: 'U0ALICE',
    ...over,
  });
  // S3 after tier 1: a process of ct129 the container could not stop still holds GPU 0 and only
  // the host can stop it (not the init: an init holder is never offered a kill, as that stops the container).
  const initLeft = (): Diagnosis => {
    const d = s3HostKill();
    const held = d.gpus[0]?.holders[0]?.process;
    if (!held) throw new Error('fixture');
    return diagnoseWith(
      {
        gpus: gpus({ 0: 96_413 }),
        apps: [app(CT129_SERVER, 0, 96_413)],
        procs: readings([CT129_SERVER.pid], [CT129_SERVER]),
        targetPidNs: CT129_NS,
      },
      { holders: [], procs: [] },
      { containerFailed: [{ process: held, reason: 'kill: (71): Operation not permitted' }] },
    );
  };

  it('denied host kill: what is left, who denied it, who else can approve; never "run /gpu unstick again" as if the container could', () => {
    const steps = [
      {
        kind: 'container_signal' as const,
        outcome: 'failed' as const,
        by: null,
        hostPids: [CT129_SERVER.pid, TP2.pid],
        gpuHostIndexes: [],
        message: null,
      },
      {
        kind: 'host_kill' as const,
        outcome: 'denied' as const,
        by: 'U0BOB',
        hostPids: [CT129_SERVER.pid],
        gpuHostIndexes: [],
        message: null,
      },
    ];
    const v = verdictOf(s3HostKill(), initLeft(), ctx({ steps }));
    expect(v.nextStep).toBe(
      'GPU 0: only a host-level kill on kpro5 can free it (host PID 811900); that kill was denied by <@U0BOB>. If it is still needed, ask another approver (<@U0CAROL>) to approve a new `/gpu unstick ct129`.',
    );
    expect(v.nextStep).not.toMatch(/container can stop/);
  });

  it('denied by the only other approver: says nobody else can approve it', () => {
    const steps = [
      {
        kind: 'host_kill' as const,
        outcome: 'denied' as const,
        by: 'U0BOB',
        hostPids: [CT129_SERVER.pid],
        gpuHostIndexes: [],
        message: null,
      },
    ];
    const v = verdictOf(s3HostKill(), initLeft(), ctx({ steps, approvers: ['U0BOB', 'U0ALICE'] }));
    expect(v.nextStep).toMatch(
      /denied by <@U0BOB>\. If it is still needed, no other approver is configured \(GPU_MEDIC_APPROVERS\): nobody else can approve it\.$/,
    );
  });

  it('expired host kill: run again when an approver can answer', () => {
    const steps = [
      {
        kind: 'host_kill' as const,
        outcome: 'expired' as const,
        by: null,
        hostPids: [CT129_SERVER.pid],
        gpuHostIndexes: [],
        message: null,
      },
    ];
    expect(verdictOf(s3HostKill(), initLeft(), ctx({ steps })).nextStep).toMatch(
      /expired without a decision\. Run `\/gpu unstick ct129` again when an approver \(<@U0BOB>, <@U0CAROL>\) can answer the card\.$/,
    );
  });

  it('a host kill that ran and left the process: a reboot, not another unstick', () => {
    const steps = [
      {
        kind: 'host_kill' as const,
        outcome: 'done' as const,
        by: null,
        hostPids: [CT129_SERVER.pid],
        gpuHostIndexes: [],
        message: null,
      },
    ];
    const v = verdictOf(s3HostKill(), initLeft(), ctx({ steps }));
    expect(v.nextStep).toMatch(/the host-level kill ran and it still holds the GPU\..*dmesg on kpro5.*reboot of kpro5/);
    expect(v.nextStep).not.toMatch(/unstick/);
  });

  it('a container step that did not complete: the advice says so, and does not claim the holders started later', () => {
    const steps = [
      {
        kind: 'container_signal' as const,
        outcome: 'failed' as const,
        by: null,
        hostPids: [TP0.pid],
        gpuHostIndexes: [],
        message: 'interrupted: an earlier attempt claimed this step',
      },
    ];
    const next = verdictOf(s2(), s2(), ctx({ steps })).nextStep ?? '';
    expect(next).toContain(
      'GPU 0: still held by processes of ct129 (host PID 812345); this incident’s container step did not complete (interrupted: an earlier attempt claimed this step).',
    );
    expect(next).toContain(
      'GPU 2: still held by processes of ct129 (host PID 812351); this incident’s container step did not complete',
    );
    expect(next).not.toContain('did not target');
  });

  it('S2 with nothing left is still green: the fixes do not make every verdict red', () => {
    expect(isGreen(verdictOf(s2(), allClean()))).toBe(true);
  });
});
