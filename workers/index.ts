import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import type { Inventory } from '../src/config/inventory.ts';
import { sitesOf } from '../src/config/machines.ts';
import { IncidentLog } from '../src/incident/log.ts';
import type { Logger } from '../src/logger.ts';
import { JobSchema, queueName } from '../src/queue/jobs.ts';
import type { Executor } from '../src/ssh/types.ts';
import { runStatusJob } from './status.ts';

export interface WorkerGroupOptions {
  redisUrl: string;
  /** BullMQ and incident-log key prefix. */
  prefix: string;
  inventory: Inventory;
  executor: Executor;
  logger: Logger;
  /** Sites to serve; default: every site in the inventory. */
  sites?: string[];
  /** Jobs run at once per site queue. Default 8. */
  concurrency?: number;
  now?: () => Date;
}

export interface WorkerGroup {
  close(force?: boolean): Promise<void>;
}

/** One BullMQ worker per site queue; the processes holding SSH keys and no Slack token. */
export async function startWorkers(o: WorkerGroupOptions): Promise<WorkerGroup> {
  const connection = new Redis(o.redisUrl, { maxRetriesPerRequest: null });
  const log = new IncidentLog(connection, o.prefix);
  const now = o.now ?? (() => new Date());
  const sites = o.sites && o.sites.length > 0 ? o.sites : sitesOf(o.inventory);
  const workers = sites.map((site) => {
    const w = new Worker(
      queueName(site),
      async (job) => {
        const parsed = JobSchema.safeParse(job.data);
        if (!parsed.success) {
          o.logger.error({ jobId: job.id }, 'job data rejected');
          throw new Error('job data rejected');
        }
        const data = parsed.data;
        switch (data.kind) {
          case 'status':
            await runStatusJob(data, {
              inventory: o.inventory,
              executor: o.executor,
              log,
              now,
              commandTimeoutMs: o.inventory.defaults.commandTimeoutSec * 1000,
              logger: o.logger,
            });
            return;
        }
      },
      { connection, prefix: o.prefix, concurrency: o.concurrency ?? 8 },
    );
    w.on('error', (err) => o.logger.warn({ err, site }, 'worker error'));
    return w;
  });
  o.logger.info({ sites }, 'workers started');
  return {
    async close(force = false) {
      await Promise.all(workers.map((w) => w.close(force)));
      await o.executor.close();
      connection.disconnect();
    },
  };
}
