import { describe, expect, it } from 'vitest';
import { isStuck } from '../../src/gpu/diagnose.ts';
import { buildHolders } from '../../src/gpu/holders.ts';
import { diagnose } from '../../src/gpu/diagnose.ts';
import { CT129_NS, CT131_JOB, TP0, TP2, app, gpus, readings, seedS2, uuid } from './seed-fleet.ts';
import { allClean, diagnoseWith, s2, s3, s5 } from './scenarios.ts';

const kinds = (d: ReturnType<typeof s2>): string[] => d.gpus.map((g) => g.kind);

describe('diagnose', () => {
  it('S2: the two ranks are held in ct129 and the container can stop them; ct131’s job is outside', () => {
    const d = s2();
    expect(kinds(d)).toEqual([
      'held_in_container',
      'idle',
      'held_in_container',
      'idle',
      'idle',
      'held_outside',
      'idle',
      'idle',
    ]);
    expect(d.gpus[0]?.sentence).toBe(
      'GPU 0: 96,413 MiB held by 1 process in ct129: PID 57 (host PID 812345) `sglang::scheduler_TP0`. The container can stop it itself.',
    );
    expect(d.gpus[5]?.sentence).toMatch(
      /^GPU 5: 40,211 MiB held by something outside ct129 \(host PID 823001 `python3 train.py --epochs 3` \(40,211 MiB\), another container or the host itself\): left alone\.$/,
    );
    expect(d.gpus[1]?.sentence).toBe('GPU 1 is idle (0 MiB used, no process).');
    expect(d.deviceOnly.map((m) => m.containerPid)).toEqual([90]);
  });

  it('memory beyond what another container\'s job holds on a GPU is still a leak, not "held outside" (but no reset candidate)', () => {
    const { host } = seedS2();
    const leaky = { ...host, gpus: gpus({ 0: 96_413, 2: 96_417, 5: 40_211 + 30_000 }) };
    const d = diagnoseWith(leaky);
    expect(d.gpus[5]?.kind).toBe('leak_beside_holders');
    expect(d.gpus[5]?.unaccountedMiB).toBe(30_000);
    expect(d.gpus[5]?.outside.map((h) => h.process.hostPid)).toEqual([823_001]);
    // Exactly what the job accounts for (plus the idle allowance) stays "held outside".
    expect(diagnoseWith({ ...host, gpus: gpus({ 0: 96_413, 2: 96_417, 5: 40_211 + 60 }) }).gpus[5]?.kind).toBe(
      'held_outside',
    );
  });

  it('S3: the container init can only be stopped from the host, and says why', () => {
    const d = s3();
    expect(kinds(d).slice(0, 3)).toEqual(['held_host_only', 'idle', 'held_in_container']);
    expect(d.gpus[0]?.holders[0]).toMatchObject({ reach: 'host', isContainerInit: true });
    expect(d.gpus[0]?.sentence).toContain(
      'the container’s init (PID 1), and a PID namespace’s init ignores signals sent from inside its namespace',
    );
    expect(d.gpus[0]?.sentence).toContain('host PID 811900');
  });

  it('S3: another user’s process is host-only when container commands do not run as root', () => {
    const { host, container } = seedS2();
    const ctUser = {
      ...container,
      procs: readings(
        [57, 63],
        [
          { ...TP0, pid: 57, nsPids: [57], uid: 1001 },
          { ...TP2, pid: 63, nsPids: [63], uid: 1000 },
        ],
      ),
    };
    // As the host sees them: shifted by the default map (container uid 1001 = host uid 101001).
    const hostShifted = {
      ...host,
      procs: readings(
        [TP0.pid, TP2.pid, CT131_JOB.pid],
        [{ ...TP0, uid: 101_001 }, { ...TP2, uid: 101_000 }, CT131_JOB],
      ),
    };
    const d = diagnoseWith(hostShifted, ctUser, { containerExecUid: 1000 });
    expect(d.gpus[0]?.kind).toBe('held_host_only');
    expect(d.gpus[0]?.holders[0]?.hostOnlyWhy).toBe(
      'it runs as uid 1001 (host uid 101001) and container commands run as uid 1000',
    );
    expect(d.gpus[2]?.kind).toBe('held_in_container');
  });

  it('a holder the container did not read: its uid from the host’s, through the container’s map from pct config', () => {
    const { host } = seedS2();
    const shifted = {
      ...host,
      procs: readings(
        [TP0.pid, TP2.pid, CT131_JOB.pid],
        [{ ...TP0, uid: 201_001 }, { ...TP2, uid: 201_000 }, CT131_JOB],
      ),
      uidMap: { kind: 'custom' as const, ranges: [{ inside: 0, host: 200_000, count: 65_536 }] },
    };
    const d = diagnoseWith(shifted, { holders: [], procs: [] }, { containerExecUid: 1000 });
    expect(d.gpus[0]?.holders[0]?.reach).toBe('host');
    expect(d.gpus[0]?.holders[0]?.hostOnlyWhy).toBe(
      'it runs as uid 1001 (host uid 201001) and container commands run as uid 1000',
    );
    expect(d.gpus[2]?.holders[0]?.reach).toBe('container');
    // Without the map the uid is unknown: no claim about it.
    const unmapped = diagnoseWith({ ...shifted, uidMap: null }, { holders: [], procs: [] }, { containerExecUid: 1000 });
    expect(unmapped.gpus[0]?.holders[0]?.reach).toBe('container');
  });

  it('a login that is not root is never said to be able to stop a holder it may not signal', () => {
    // S3's fleet: the bot logs in as fleetuser (uid unknown to it), the ranks run as root.
    const { host, container } = seedS2();
    const d = diagnoseWith(host, container, { containerExecUid: null });
    expect(d.gpus[0]?.sentence).not.toContain('can stop it itself');
    expect(d.gpus[0]?.sentence).toContain(
      'The container tries first, but its login is not root: if it may not signal it, only the host can.',
    );
    // Root in the container, or the holder's own user: said.
    expect(diagnoseWith(host, container, { containerExecUid: 0 }).gpus[0]?.sentence).toContain(
      'The container can stop it itself.',
    );
    const own = {
      ...container,
      procs: readings(
        [57, 63],
        [
          { ...TP0, pid: 57, nsPids: [57], uid: 1000 },
          { ...TP2, pid: 63, nsPids: [63], uid: 1000 },
        ],
      ),
    };
    expect(diagnoseWith(host, own, { containerExecUid: 1000 }).gpus[0]?.sentence).toContain(
      'The container can stop it itself.',
    );
  });

  it('a holder the container failed to stop escalates to the host', () => {
    const { host, container } = seedS2();
    const first = s2().gpus[2]?.holders[0]?.process;
    if (!first) throw new Error('fixture');
    const d = diagnoseWith(host, container, {
      containerFailed: [{ process: first, reason: 'still running after SIGKILL' }],
    });
    expect(d.gpus[2]?.kind).toBe('held_host_only');
    expect(d.gpus[2]?.sentence).toContain('the container could not stop it (still running after SIGKILL)');
    expect(d.gpus[0]?.kind).toBe('held_in_container');
  });

  it('S5: memory with no process anywhere is a leaked context needing a host reset', () => {
    const d = s5();
    expect(kinds(d)).toEqual(['orphaned_memory', 'idle', 'orphaned_memory', 'idle', 'idle', 'idle', 'idle', 'idle']);
    expect(d.gpus[2]?.sentence).toBe(
      'GPU 2: 96,417 MiB in use and no process anywhere on kpro5 holds it (a leaked context). Killing processes cannot free it; only a host-level GPU reset can, and a container cannot reset a GPU.',
    );
  });

  it('a GPU named in an nvidia-smi error is in error, and nothing else is concluded for it', () => {
    const g = gpus();
    const d = diagnoseWith(seedS2().host, seedS2().container, {
      errors: [{ kind: 'gpu_lost', message: 'GPU 00000000:38:00.0 is lost', busId: g[2]?.busId ?? null }],
    });
    expect(d.gpus[2]?.kind).toBe('gpu_error');
    expect(d.gpus[2]?.sentence).toContain('is in error: GPU 00000000:38:00.0 is lost');
    expect(d.error).toBeNull();
  });

  it('a holder that vanished between readings is unidentified, not orphaned', () => {
    const { host, container } = seedS2();
    const d = diagnoseWith({ ...host, procs: readings([TP0.pid], [TP0]) }, container);
    expect(d.gpus[2]?.kind).toBe('unidentified');
    expect(d.gpus[2]?.sentence).toContain('host PID 812351, which exited or could not be read');
  });

  it('matches container and host GPUs by UUID when the container numbers them differently', () => {
    const host = gpus({ 5: 96_413 });
    const ctGpus = [{ ...(host[5] ?? host[0]!), index: 0 }];
    const p = { ...TP0 };
    const d = diagnose({
      target: 'ct129',
      host: 'kpro5',
      containerGpus: ctGpus,
      hostGpus: host,
      holders: buildHolders(
        { gpus: host, apps: [app(p, 5, 96_413)], procs: readings([p.pid], [p]), targetPidNs: CT129_NS },
        { holders: [], procs: [] },
      ),
      errors: [],
    });
    expect(d.gpus).toHaveLength(1);
    expect(d.gpus[0]).toMatchObject({
      index: 0,
      hostIndex: 5,
      uuid: uuid(5),
      kind: 'held_in_container',
      usedMiB: 96_413,
    });
  });

  it('isStuck: what the flow must act on or report', () => {
    expect(
      s2()
        .gpus.filter(isStuck)
        .map((g) => g.index),
    ).toEqual([0, 2]);
    expect(allClean().gpus.filter(isStuck)).toEqual([]);
  });
});
