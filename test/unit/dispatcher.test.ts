/**
 * The dispatcher's one-MULTI enqueue (`enqueueAll`) against real Redis: the job and the writes
 * beside it land together, and the connection's other BullMQ scripts still run afterwards (the
 * transaction is built with only the job-insert scripts copied onto it, src/queue/dispatcher.ts).
 */
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, type Dispatcher } from '../../src/queue/dispatcher.ts';
import { queueName } from '../../src/queue/jobs.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';

let redis: Redis;
let prefix: string;
let dispatcher: Dispatcher;

beforeAll(() => {
  redis = newRedis();
  prefix = randomPrefix('dispatcher');
  dispatcher = createDispatcher({ connection: redis, prefix });
});

afterAll(async () => {
  await dispatcher.close();
  await removePrefix(redis, prefix);
  redis.disconnect();
});

describe('enqueueAll', () => {
  it('queues each job with the writes beside it, and the connection keeps every script it had', async () => {
    const scripts = (c: Redis): string[] =>
      Object.keys((c as Redis & { scriptsSet?: Record<string, unknown> }).scriptsSet ?? {}).sort();
    for (const n of [1, 2]) {
      await dispatcher.enqueueAll(
        [
          {
            site: 'default',
            data: { kind: 'status', incidentId: `inc_${n}`, machines: ['kpro5'] },
            jobId: `inc_${n}-a`,
          },
          { site: 'lab', data: { kind: 'status', incidentId: `inc_${n}`, machines: ['lab1'] }, jobId: `inc_${n}-b` },
        ],
        (m) => m.set(`${prefix}:beside:${n}`, 'written'),
      );
    }
    const before = scripts(redis);
    expect(before.length).toBeGreaterThan(10);
    const queue = new Queue(queueName('default'), { connection: redis, prefix });
    const lab = new Queue(queueName('lab'), { connection: redis, prefix });
    try {
      const job = await queue.getJob('inc_2-a');
      expect(job?.data).toEqual({ kind: 'status', incidentId: 'inc_2', machines: ['kpro5'] });
      expect((await lab.getJob('inc_1-b'))?.data).toEqual({ kind: 'status', incidentId: 'inc_1', machines: ['lab1'] });
      expect(await redis.mget(`${prefix}:beside:1`, `${prefix}:beside:2`)).toEqual(['written', 'written']);
      // Scripts other than the inserts, on the same connection, after the narrowed MULTIs.
      expect(await queue.getJobCounts('wait')).toEqual({ wait: 2 });
      await job?.remove();
      expect(await queue.getJobCounts('wait')).toEqual({ wait: 1 });
      expect(scripts(redis)).toEqual(before);
    } finally {
      await queue.close();
      await lab.close();
    }
  });
});
