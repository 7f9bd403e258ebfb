/** Diagnoses of the test-fleet scenarios (S2, S3, S5, S7) from seed readings. */
import { diagnose, type ContainerFailure, type Diagnosis } from '../../src/gpu/diagnose.ts';
import { buildHolders, type HostReadings } from '../../src/gpu/holders.ts';
import type { NvidiaError } from '../../src/gpu/types.ts';
import { CT129_INIT, CT131_JOB, TP0, TP2, app, ctView, gpus, readings, seedS2 } from './seed-fleet.ts';

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
    containerExecUid: opts.containerExecUid ?? 0,
    containerFailed: opts.containerFailed ?? [],
  });
}

/** S2 + S7: ranks the container can stop; a monitor and ct131's job as bystanders. */
export const s2 = (): Diagnosis => diagnoseWith(seedS2().host);

/** S3: GPU 0 held by ct129's init, GPU 2 by a rank; ct131's job on GPU 5. */
export function s3(): Diagnosis {
  const procs = [CT129_INIT, TP2, CT131_JOB];
  return diagnoseWith(
    {
      gpus: gpus({ 0: 96_413, 2: 96_417, 5: 40_211 }),
      apps: [app(CT129_INIT, 0, 96_413), app(TP2, 2, 96_417), app(CT131_JOB, 5, 40_211)],
      procs: readings(
        procs.map((p) => p.pid),
        procs,
      ),
      targetPidNs: seedS2().host.targetPidNs,
    },
    { holders: [], procs: readings([1, 63], [ctView(CT129_INIT), ctView(TP2)]) },
  );
}

/** S5: memory on GPUs 0 and 2 with no process anywhere on kpro5. */
export function s5(): Diagnosis {
  return diagnoseWith({ gpus: gpus({ 0: 96_413, 2: 96_417 }), apps: [], procs: [], targetPidNs: seedS2().host.targetPidNs }, { holders: [], procs: [] });
}

/** After a successful run: everything idle except ct131's job, still on GPU 5. */
export function allClean(): Diagnosis {
  return diagnoseWith(
    { gpus: gpus({ 0: 0, 2: 0, 5: 40_211 }), apps: [app(CT131_JOB, 5, 40_211)], procs: readings([CT131_JOB.pid], [CT131_JOB]), targetPidNs: seedS2().host.targetPidNs },
    { holders: [], procs: [] },
  );
}

export { TP0, TP2 };
