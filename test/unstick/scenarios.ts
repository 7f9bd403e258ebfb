/** Diagnoses of the test-fleet scenarios (S2, S3, S5, S7) from seed readings. */
import { diagnose, type ContainerFailure, type Diagnosis } from '../../src/gpu/diagnose.ts';
import { buildHolders, type HostReadings } from '../../src/gpu/holders.ts';
import type { NvidiaError } from '../../src/gpu/types.ts';
import {
  CT129_INIT,
  CT129_SERVER,
  CT131_JOB,
  TP2,
  app,
  ctView,
  gpus,
  readings,
  seedS2,
  type FakeProc,
} from './seed-fleet.ts';

export function diagnoseWith(
  host: HostReadings,
  containerHolders = seedS2().container,
  opts: { errors?: NvidiaError[]; containerExecUid?: number | null; containerFailed?: ContainerFailure[] } = {},
): Diagnosis {
  return diagnose({
    target: 'ct129',
    host: 'kpro5',
    containerGpus: host.gpus,
    hostGpus: host.gpus,
    holders: buildHolders(host, containerHolders),
    errors: opts.errors ?? [],
    containerExecUid: opts.containerExecUid === undefined ? 0 : opts.containerExecUid,
    containerFailed: opts.containerFailed ?? [],
  });
}

/** S2 + S7: ranks the container can stop; a monitor and ct131's job as bystanders. */
export const s2 = (): Diagnosis => diagnoseWith(seedS2().host);

/** GPU 0 held by `gpu0`, GPU 2 by a rank; ct131's job on GPU 5 (the S3 shapes). */
function s3With(gpu0: FakeProc, opts: Parameters<typeof diagnoseWith>[2] = {}): Diagnosis {
  const procs = [gpu0, TP2, CT131_JOB];
  return diagnoseWith(
    {
      gpus: gpus({ 0: 96_413, 2: 96_417, 5: 40_211 }),
      apps: [app(gpu0, 0, 96_413), app(TP2, 2, 96_417), app(CT131_JOB, 5, 40_211)],
      procs: readings(
        procs.map((p) => p.pid),
        procs,
      ),
      targetPidNs: seedS2().host.targetPidNs,
    },
    { holders: [], procs: readings([ctView(gpu0).pid, 63], [ctView(gpu0), ctView(TP2)]) },
    opts,
  );
}

/** S3: GPU 0 held by ct129's init, GPU 2 by a rank; ct131's job on GPU 5. */
export const s3 = (): Diagnosis => s3With(CT129_INIT);

/**
 * S3 as a host-level kill: GPU 0 held by a process of ct129 the container could not stop (not its
 * init: an init holder is never killed), GPU 2 by a rank; ct131's job on GPU 5.
 */
export function s3HostKill(): Diagnosis {
  const p = CT129_SERVER;
  const identity = {
    hostPid: p.pid,
    containerPid: 71,
    startTimeTicks: p.start,
    cmdline: p.cmdline.join(' '),
    pidNs: p.ns,
  };
  return s3With(p, { containerFailed: [{ process: identity, reason: 'EPERM: Operation not permitted' }] });
}

/** S5: memory on GPUs 0 and 2 with no process anywhere on kpro5. */
export function s5(): Diagnosis {
  return diagnoseWith(
    { gpus: gpus({ 0: 96_413, 2: 96_417 }), apps: [], procs: [], targetPidNs: seedS2().host.targetPidNs },
    { holders: [], procs: [] },
  );
}

/** After a successful run: everything idle except ct131's job, still on GPU 5. */
export function allClean(): Diagnosis {
  return diagnoseWith(
    {
      gpus: gpus({ 0: 0, 2: 0, 5: 40_211 }),
      apps: [app(CT131_JOB, 5, 40_211)],
      procs: readings([CT131_JOB.pid], [CT131_JOB]),
      targetPidNs: seedS2().host.targetPidNs,
    },
    { holders: [], procs: [] },
  );
}
