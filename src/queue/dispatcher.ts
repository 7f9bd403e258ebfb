import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { CodedError, ErrorCode } from '../errors.ts';
import { queueName, type JobData } from './jobs.ts';

export interface Dispatcher {
  /** Enqueues a job on a site's queue; rejects with `queue_unavailable` fast when Redis is down. */
  enqueue(site: string, data: JobData, jobId: string, opts?: { delayMs?: number }): Promise<void>;
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
  return {
    async enqueue(site, data, jobId, eo = {}) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer from Redis within ${timeoutMs} ms`)), timeoutMs);
      });
      try {
        // attempts: 1 for every kind: mutating jobs are never retried blindly; a stalled job that
        // BullMQ re-runs finds its destructive steps already claimed in the step guard.
        // A fixed jobId makes a double enqueue (double click, Slack retry) a no-op.
        await Promise.race([
          queueFor(site).add(data.kind, data, {
            jobId,
            attempts: 1,
            removeOnComplete: 1000,
            removeOnFail: 1000,
            ...(eo.delayMs ? { delay: eo.delayMs } : {}),
          }),
          timeout,
        ]);
      } catch (e) {
        throw new CodedError(ErrorCode.QueueUnavailable, `queue unavailable: ${(e as Error).message}`);
      } finally {
        clearTimeout(timer);
      }
    },
    async close() {
      await Promise.all([...queues.values()].map((q) => q.close()));
    },
  };
}
