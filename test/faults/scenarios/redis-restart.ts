/**
 * Redis stopped and restarted mid-incident, with the append-only persistence docker-compose uses,
 * on a PRIVATE redis-server (the shared one is never touched). During the outage every command
 * gets an ephemeral "queue unavailable, nothing was done" inside Slack's 3 s; after it, work
 * resumes without restarting the bot or the workers, and every acknowledged incident completes.
 */
import { Queue } from 'bullmq';
import { sitesOf } from '../../../src/config/machines.ts';
import { queueName } from '../../../src/queue/jobs.ts';
import { startStack, type Stack } from '../../harness/stack.ts';
import { startPrivateRedis, type PrivateRedis } from '../lib/redis-server.ts';
import { checker, emptyFigures, mergeFigures, pollUntil, sleep, type Figures } from '../lib/figures.ts';
import { settleThread, parentPosts } from '../lib/threads.ts';
import { finalChecks } from './requests.ts';

export interface RedisRestartOptions {
  /** Stop/start cycles. */
  outages: number;
  /** How long Redis stays down each time. */
  outageMs: number;
  /** Incidents acknowledged right before each stop. */
  inFlight: number;
  /** Commands sent while Redis is down, each cycle. */
  duringOutage: number;
}

const MACHINES = ['kpro5', 'kpro7', 'ct129'];

/** What the site queues hold, for a failure's detail (a job left active names the lost-reply case above). */
async function jobStates(stack: Stack): Promise<string> {
  const queues = sitesOf(stack.inventory).map(
    (site) => new Queue(queueName(site), { connection: stack.redis, prefix: stack.prefix }),
  );
  try {
    const counts = await Promise.all(
      queues.map((q) => q.getJobCounts('waiting', 'active', 'delayed', 'failed', 'completed')),
    );
    return JSON.stringify(counts);
  } finally {
    await Promise.all(queues.map((q) => q.close()));
  }
}

export async function redisRestart(o: RedisRestartOptions): Promise<Figures> {
  let f = emptyFigures();
  const check = checker(f);
  const redis: PrivateRedis = await startPrivateRedis();
  let s: Stack | null = null;
  try {
    s = await startStack({
      redisUrl: redis.url,
      fleet: {
        hosts: [
          { id: 'kpro5', gpus: 2 },
          { id: 'kpro7', gpus: 1 },
        ],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5' }],
      },
      tweakInventory: (inv) => {
        inv.defaults.commandTimeoutSec = 5;
      },
      // A job the worker was fetching as Redis stopped can be active in Redis (its moveToActive ran
      // and was persisted) while the reply never reached the worker: nobody runs it until its lock
      // lapses and the stalled check hands it back, up to lock + 2 stalled intervals (90 s at the
      // production defaults, docs/deploy.md). The short lock bounds that here to a few seconds;
      // the recovery is the same code.
      env: { GPU_MEDIC_JOB_LOCK_MS: '3000', GPU_MEDIC_STALLED_MS: '1000' },
    });
    const stack = s;
    const acked: string[] = [];
    for (let cycle = 0; cycle < o.outages; cycle++) {
      f.runs++;
      // Incidents acknowledged just before Redis goes away (their jobs are queued or running).
      const sent = await Promise.all(
        Array.from({ length: o.inFlight }, (_, i) => stack.slash(`status ${MACHINES[i % MACHINES.length]}`)),
      );
      for (const r of sent) {
        f.ackMs.push(r.elapsedMs);
        if (
          check(r.incidentId !== null, `cycle ${cycle}: a command before the outage was not queued: ${r.ackText}`) &&
          r.incidentId
        )
          acked.push(r.incidentId);
      }
      await redis.stop('term');
      f.faultsInjected++;
      const downAt = Date.now();
      // Commands during the outage: a clear ephemeral answer within Slack's 3 s, nothing done.
      let k = 0;
      while (k < o.duringOutage || Date.now() - downAt < o.outageMs) {
        if (k >= o.duringOutage * 20) break;
        const text = k % 3 === 2 ? 'unstick ct129' : k % 3 === 1 ? 'status all' : 'status kpro5';
        const r = await stack.slash(text);
        f.ackMs.push(r.elapsedMs);
        check(r.status === 200, `cycle ${cycle}: "${text}" during the outage answered HTTP ${r.status}`);
        check(r.elapsedMs < 3000, `cycle ${cycle}: "${text}" during the outage acked in ${Math.round(r.elapsedMs)} ms`);
        check(
          (r.json as { response_type?: string } | undefined)?.response_type === 'ephemeral',
          `cycle ${cycle}: answer during the outage is not ephemeral`,
        );
        check(
          /queue \(Redis\) is not answering/.test(r.ackText) && /nothing was (done|queued)/i.test(r.ackText),
          `cycle ${cycle}: "${text}" during the outage got: ${r.ackText.slice(0, 160)}`,
        );
        k++;
        if (k >= o.duringOutage) await sleep(Math.min(500, Math.max(0, o.outageMs - (Date.now() - downAt))));
      }
      await redis.start();
      const upAt = Date.now();
      // Work resumes without restarting anything: a fresh command is queued and completes.
      const resumed = await pollUntil(
        async () => {
          const r = await stack.slash('status kpro7');
          return r.incidentId ? r : null;
        },
        20_000,
        250,
      );
      check(resumed !== null, `cycle ${cycle}: commands still refused 20 s after Redis came back`);
      if (resumed?.incidentId) acked.push(resumed.incidentId);
      f.ackMs.push(resumed?.elapsedMs ?? 20_000);
      if (resumed) f.recoverMs.push(Date.now() - upAt);
    }
    // Nothing acknowledged is lost: every incident's events and thread are complete, each message once.
    for (const id of acked) {
      const v = await settleThread(stack, id, 45_000);
      if (!v.eventsComplete) f.eventsLost++;
      f.messagesLost += v.messagesOff + Math.max(0, parentPosts(stack, id) - 1);
      check(v.eventsComplete && v.threadExact, `incident ${id}: ${v.detail}; jobs ${await jobStates(stack)}`);
    }
    f = mergeFigures(f, await finalChecks(stack, MACHINES));
  } finally {
    await s?.stop().catch(() => undefined);
    await redis.destroy();
  }
  return f;
}
