import { type IRedisTransaction, Job, type JobsOptions, Queue } from 'bullmq';
import type { ChainableCommander, Redis } from 'ioredis';
import { CodedError, ErrorCode } from '../errors.ts';
import { queueName, type JobData } from './jobs.ts';

/** One job of `enqueueAll`: its site queue, its data and its fixed id. */
export interface QueuedJob {
  site: string;
  data: JobData;
  jobId: string;
}

export interface Dispatcher {
  /** Enqueues a job on a site's queue; rejects with `queue_unavailable` fast when Redis is down. */
  enqueue(site: string, data: JobData, jobId: string, opts?: { delayMs?: number }): Promise<void>;
  /**
   * The writes `alongside` queues (a command's incident: `IncidentLog.openIn`) and then `jobs`, in
   * ONE MULTI on the dispatcher's connection: one Redis round trip for a slash command's ack, and
   * all or nothing (no incident without its job, no job before its incident). Rejects with
   * `queue_unavailable` as `enqueue` does.
   */
  enqueueAll(jobs: readonly QueuedJob[], alongside: (m: ChainableCommander) => void): Promise<void>;
  close(): Promise<void>;
}

export interface DispatcherOptions {
  /** A connection created with `enableOfflineQueue: false` so that an outage fails fast. */
  connection: Redis;
  /** BullMQ key prefix. */
  prefix: string;
  /** Give up after this long (the Slack ack must go out within 3 s). Default 1500 ms. */
  timeoutMs?: number;
}

/** ioredis keeps a connection's Lua scripts (defineCommand) here; every MULTI copies each onto itself. */
type WithScripts = Redis & { scriptsSet?: Record<string, unknown> };

/**
 * `multi()` with only BullMQ's job-insert scripts (`add…`) and gpu-medic's own (`gpuMedic…`) copied onto the transaction. ioredis's
 * Pipeline constructor copies every script defined on its connection onto the new object, twice
 * (name and nameBuffer): BullMQ defines 64, so each ack's MULTI built and dropped a 128-property
 * object, about 0.5 ms of the bot's CPU per status ack against 0.05 ms for the replay guard's SET
 * (bench/results/2026-12.md), and the ack must stay at the floor. The constructor runs synchronously, so nothing else
 * can see the connection's script table while it is narrowed; the EXEC sends only builtins and those scripts.
 */
function leanMulti<T>(connection: Redis, multi: () => T): T {
  const c = connection as WithScripts;
  const all = c.scriptsSet;
  if (all === undefined) return multi();
  // Rebuilt when scripts were defined since (BullMQ defines them all when it first uses a connection).
  const names = Object.keys(all);
  let lean = leanScripts.get(all);
  if (lean === undefined || lean.of !== names.length) {
    lean = { of: names.length, scripts: Object.fromEntries(names.filter(isInsertScript).map((n) => [n, all[n]])) };
    leanScripts.set(all, lean);
  }
  c.scriptsSet = lean.scripts;
  try {
    return multi();
  } finally {
    c.scriptsSet = all;
  }
}
/** BullMQ's job inserts (`add…`) and gpu-medic's own scripts (`gpuMedic…`, e.g. the incident's open in src/incident/log.ts). */
const isInsertScript = (name: string): boolean => name.startsWith('add') || name.startsWith('gpuMedic');
const leanScripts = new WeakMap<Record<string, unknown>, { of: number; scripts: Record<string, unknown> }>();

export function createDispatcher(o: DispatcherOptions): Dispatcher {
  const queues = new Map<string, Queue>();
  const timeoutMs = o.timeoutMs ?? 1500;
  const queueFor = (site: string): Queue => {
    let q = queues.get(site);
    if (!q) {
      q = new Queue(queueName(site), { connection: o.connection, prefix: o.prefix });
      // An unreachable Redis is reported per enqueue; don't let it crash the process.
      q.on('error', () => undefined);
      queues.set(site, q);
    }
    return q;
  };
  // attempts: 1 for every kind: mutating jobs are never retried blindly; a stalled job that
  // BullMQ re-runs finds its destructive steps already claimed in the step guard.
  // A fixed jobId makes a double enqueue (double click, Slack retry) a no-op.
  const jobOpts = (jobId: string, delayMs?: number): JobsOptions => ({
    jobId,
    attempts: 1,
    removeOnComplete: 1000,
    removeOnFail: 1000,
    ...(delayMs ? { delay: delayMs } : {}),
  });
  const bounded = async <T>(work: () => Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer from Redis within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([work(), timeout]);
    } catch (e) {
      throw new CodedError(ErrorCode.QueueUnavailable, `queue unavailable: ${(e as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  };
  return {
    async enqueue(site, data, jobId, eo = {}) {
      await bounded(() => queueFor(site).add(data.kind, data, jobOpts(jobId, eo.delayMs)));
    },
    async enqueueAll(jobs, alongside) {
      await bounded(async () => {
        const queued = jobs.map((j) => ({ j, q: queueFor(j.site) }));
        // BullMQ's client for the connection, its scripts defined (a round trip only for a queue's first use).
        const client = (await Promise.all(queued.map(({ q }) => q.getBackend().client)))[0];
        if (!client) {
          const m = o.connection.multi();
          alongside(m);
          await m.exec();
          return;
        }
        const tx: IRedisTransaction = leanMulti(o.connection, () => client.multi());
        // BullMQ's ioredis transaction is the connection's own ioredis MULTI, with BullMQ's
        // script runner added (bullmq ioredis-client.js): the incident's writes go in as ioredis commands.
        alongside(tx as unknown as ChainableCommander);
        // Each insert is queued on the transaction synchronously; its promise settles with the EXEC.
        const adds = queued.map(({ j, q }) => new Job(q, j.data.kind, j.data, jobOpts(j.jobId), j.jobId).addJob(tx));
        const res = await tx.exec();
        await Promise.all(adds);
        const failed = (res ?? []).find(([err]) => err !== null)?.[0];
        if (res === null || failed) throw failed ?? new Error('transaction discarded');
      });
    },
    async close() {
      await Promise.all([...queues.values()].map((q) => q.close()));
    },
  };
}
