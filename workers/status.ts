import type { Inventory } from '../src/config/inventory.ts';
import { findMachine, type Machine, routeFor } from '../src/config/machines.ts';
import { gpuTroubleOf } from '../src/gpu/gpu-trouble.ts';
import type { IncidentLog } from '../src/incident/log.ts';
import type { Logger } from '../src/logger.ts';
import { type SnapshotOptions, takeSnapshot } from '../src/readings/snapshot.ts';
import { hostSideOf, readHost } from '../src/readings/unstick-readings.ts';
import type { StatusJob } from '../src/queue/jobs.ts';
import type { Executor } from '../src/ssh/types.ts';

export interface StatusWorkerDeps {
  inventory: Inventory;
  executor: Executor;
  log: IncidentLog;
  now(): Date;
  commandTimeoutMs: number;
  logger: Logger;
  /** Names this worker in the `started` event (the durable log says who read the machines). */
  workerId: string;
}

/** Up to this many machines in one status job, each container's holders are placed by its host's GPU map. */
const ATTRIBUTE_MAX_MACHINES = 8;

/** The host's side of a container (GPU map, compute apps in its PID namespace), read on the host. */
function hostSideReader(machine: Machine, deps: StatusWorkerDeps): SnapshotOptions['hostSide'] {
  if (machine.kind !== 'container') return undefined;
  return async () => {
    const host = findMachine(deps.inventory, machine.hostId);
    const route = routeFor(deps.inventory, machine.hostId);
    if (!host || !route) return { host: null, problem: `the inventory has no host "${machine.hostId}"`, commands: [] };
    const r = await readHost(host, route, machine.vmid, {
      exec: (rt, s) => deps.executor.exec(rt, s),
      now: deps.now,
      commandTimeoutMs: deps.commandTimeoutMs,
    });
    return { ...hostSideOf(host, r), commands: r.commands };
  };
}

/**
 * Reads every machine of the job in parallel; each result becomes one event, framed by `started`
 * and `finished` so the durable log alone tells who read, when, and how it ended: `ok` only when
 * every machine was read with its GPUs answering (a lost GPU or a driver mismatch is not ok).
 * Read-only, so safe to retry.
 */
export async function runStatusJob(job: StatusJob, deps: StatusWorkerDeps): Promise<void> {
  const logger = deps.logger.child({ incident: job.incidentId });
  const t0 = deps.now().getTime();
  await deps.log.append(job.incidentId, { type: 'started', at: deps.now().toISOString(), worker: deps.workerId });
  // A few machines (`/gpu status ct129`): a container's holders are placed on its GPUs by its
  // host's map, at the cost of a second read on the host. Not for the status of every machine.
  const attribute = job.machines.length <= ATTRIBUTE_MAX_MACHINES;
  const read = await Promise.all(
    job.machines.map(async (id) => {
      const machine = findMachine(deps.inventory, id);
      const route = routeFor(deps.inventory, id);
      if (!machine || !route) {
        await deps.log.append(job.incidentId, {
          type: 'machine_error',
          at: deps.now().toISOString(),
          machineId: id,
          code: 'target_unknown',
          message: `this worker's inventory has no machine "${id}"`,
          commands: [],
        });
        return false;
      }
      const outcome = await takeSnapshot(
        machine,
        route,
        {
          exec: (r, s) => deps.executor.exec(r, s),
          now: deps.now,
          commandTimeoutMs: deps.commandTimeoutMs,
        },
        { commandLines: true, ...(attribute ? { hostSide: hostSideReader(machine, deps) } : {}) },
      );
      const at = deps.now().toISOString();
      if (outcome.ok) {
        await deps.log.append(job.incidentId, {
          type: 'snapshot',
          at,
          label: 'status',
          snapshot: outcome.snapshot,
          commands: outcome.commands,
        });
        // Read, but its GPUs answered an error (or no memory figure): not a success.
        const trouble = gpuTroubleOf(outcome.snapshot);
        if (trouble) logger.warn({ machine: id, gpuTrouble: trouble.kind }, 'snapshot read with GPUs in error');
        return trouble === null;
      } else {
        logger.warn({ machine: id, code: outcome.code }, 'snapshot failed');
        await deps.log.append(job.incidentId, {
          type: 'machine_error',
          at,
          machineId: id,
          code: outcome.code,
          message: outcome.message,
          commands: outcome.commands,
        });
        return false;
      }
    }),
  );
  const okCount = read.filter(Boolean).length;
  const outcome = okCount === read.length ? 'ok' : okCount === 0 ? 'failed' : 'partial';
  await deps.log.append(job.incidentId, {
    type: 'finished',
    at: deps.now().toISOString(),
    outcome,
    durationMs: deps.now().getTime() - t0,
  });
}
