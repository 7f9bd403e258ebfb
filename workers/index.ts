import { hostname } from 'node:os';
import { Queue, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { connectRedis, type RedisSettings } from '../src/redis/connection.ts';
import { ApprovalStore } from '../src/approval/approval-store.ts';
import { BlastBudget, BudgetMemory } from '../src/approval/blast-budget.ts';
import { type Env, EnvSchema } from '../src/config/env.ts';
import type { Inventory } from '../src/config/inventory.ts';
import { listMachines, sitesOf } from '../src/config/machines.ts';
import type { HealthCheck } from '../src/health/heartbeat.ts';
import { IncidentLog } from '../src/incident/log.ts';
import { TargetLock } from '../src/incident/target-lock.ts';
import { StepGuard } from '../src/step-guard/step-guard.ts';
import { createDispatcher, type Dispatcher } from '../src/queue/dispatcher.ts';
import type { Logger } from '../src/logger.ts';
import type { Metrics } from '../src/metrics/metrics.ts';
import { ObservedIncidentLog, observedExecutor } from '../src/metrics/observed.ts';
import { JobSchema, queueName, type WatchJob, watchSchedulerId } from '../src/queue/jobs.ts';
import { SnoozeStore } from '../src/watch-store/snooze-store.ts';
import { WatchRoundStore } from '../src/watch-store/watch-round-store.ts';
import { watchKeys } from '../src/watch-store/watch-keys.ts';
import { MachineGlanceSchema } from '../src/watchdog/watch-glance.ts';
import { registerGpuMetrics } from '../src/metrics/gpu-metrics.ts';
import { registerWatchMetrics } from '../src/metrics/watchdog-metrics.ts';
import { CONDITION_KINDS, type WatchSettings } from '../src/watchdog/judge.ts';
import type { Executor } from '../src/ssh/types.ts';
import { sweepDecisions } from './decision-sweep.ts';
import { type WorkerKeys, workerKeysOf } from '../src/auth/keys.ts';
import { NonceLedger, NonceMemory } from '../src/auth/nonce-ledger.ts';
import { planKeyFor } from './plan-key.ts';
import { runDoctorJob } from './doctor.ts';
import { runStatusJob, type StatusWorkerDeps } from './status.ts';
import {
  runDecisionJob,
  runEscalateJob,
  runExpireJob,
  runRemindJob,
  runUnstickJob,
  type UnstickWorkerDeps,
} from './unstick.ts';
import { runWatchJob, type WatchdogDeps } from './watchdog.ts';

export interface WorkerGroupOptions {
  /** REDIS_URL, or the sentinels that name the primary (src/redis/connection.ts). */
  redis: RedisSettings;
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
  /** Key of the plan seal; default `planKeyFor(workerSecret, inventory)` (workers/plan-key.ts). */
  planKey?: Buffer;
  /**
   * The worker's signing key and the public keys it verifies with (src/auth/keys.ts). Default: the
   * keys of this process only (a bot in this same process, as `start` runs it, matches them).
   */
  keys?: WorkerKeys;
  /** Admins: alone may approve a host-level step past the blast-radius budget. Default none. */
  admins?: string[];
  /** Host-level destructive steps allowed per host per hour. Absent: the default of the GPU_MEDIC_HOST_BUDGET_PER_HOUR row (src/config/env.ts SETTING_ROWS). */
  hostBudgetPerHour?: number;
  /** GPU_MEDIC_WORKER_SECRET: worker-only; the plan seal key is derived from it when set. */
  workerSecret?: string;
  /** Slack user IDs who may approve host-level steps (frozen into each approval). */
  approvers?: string[];
  /** GPU_MEDIC_APPROVAL_TTL_SEC in ms. Absent: that row's default (src/config/env.ts SETTING_ROWS). */
  approvalTtlMs?: number;
  /** GPU_MEDIC_ESCALATION_APPROVERS: may also decide a card once it has waited `escalateAfterMs`. Default none. */
  escalationApprovers?: string[];
  /** GPU_MEDIC_ESCALATE_AFTER_SEC in ms; 0: no escalation. Absent: that row's default (src/config/env.ts SETTING_ROWS). */
  escalateAfterMs?: number;
  /** SIGTERM grace before SIGKILL. Absent: the default of the GPU_MEDIC_TERM_GRACE_SEC row (src/config/env.ts SETTING_ROWS). */
  graceMs?: number;
  /** How long to wait for GPU memory to be released after a kill. Absent: the default of the GPU_MEDIC_RELEASE_TIMEOUT_SEC row (src/config/env.ts SETTING_ROWS). */
  releaseTimeoutMs?: number;
  /** How often processes and memory are re-read while waiting. Absent: the default of the GPU_MEDIC_POLL_MS row (src/config/env.ts SETTING_ROWS). */
  pollIntervalMs?: number;
  /** BullMQ lock per running job; a dead worker's job is recovered once it lapses. Absent: the default of the GPU_MEDIC_JOB_LOCK_MS row (src/config/env.ts SETTING_ROWS). */
  lockDurationMs?: number;
  /** How often stalled jobs (lock lapsed) are looked for and handed back. Absent: the default of the GPU_MEDIC_STALLED_MS row (src/config/env.ts SETTING_ROWS). */
  stalledIntervalMs?: number;
  /** Where jobs, incidents, steps and SSH results are counted. Default: not counted. */
  metrics?: Metrics;
  /** How often decisions whose job was never queued are looked for (workers/decision-sweep.ts). Default 5 s. */
  decisionSweepMs?: number;
  /**
   * The watchdog (it warns before a user has to ask), when GPU_MEDIC_ALERTS_CHANNEL is set: each served site
   * queue gets one job scheduler producing a `watch` round every `intervalMs`. Absent: the sites' schedulers
   * are removed.
   */
  watch?: WatchOptions;
}

export interface WatchOptions {
  /** GPU_MEDIC_ALERTS_CHANNEL. */
  alertsChannel: string;
  /** GPU_MEDIC_WATCH_INTERVAL_SEC in ms. */
  intervalMs: number;
  settings: WatchSettings;
  /** GPU_MEDIC_WATCH_MAX_CONNECTS: machines a round reads at once. Absent: that row's default (src/config/env.ts SETTING_ROWS). */
  maxConnects?: number;
  /** Test seam (workers/watchdog.ts `beforeCommit`). */
  beforeCommit?: (machineId: string) => Promise<void>;
}

export interface WorkerGroup {
  /** What the heartbeat checks: Redis answers, and every site's BullMQ worker is running. */
  health(): Record<string, HealthCheck>;
  close(force?: boolean): Promise<void>;
}

/**
 * The defaults of the settings rows (src/config/env.ts SETTING_ROWS), for an option a caller leaves out:
 * the rows are the one place a default is written, so none is restated here.
 */
const ROW_DEFAULTS: Env = EnvSchema.parse({});

/** What every part of a worker group shares: one Redis connection, the log, the executor, the clock, the sites. */
interface Shared {
  o: WorkerGroupOptions;
  connection: Redis;
  metrics: Metrics | undefined;
  log: IncidentLog;
  executor: Executor;
  now: () => Date;
  sites: string[];
  dispatcher: Dispatcher;
}

/**
 * One BullMQ worker per site queue; the processes holding SSH keys and no Slack token. Wired in parts, in
 * this order: what the jobs share, the unstick and watchdog dependencies, the site workers that run the
 * jobs, the watch schedulers (which wait for Redis), the metrics read at scrape time, the decision sweep.
 */
export async function startWorkers(o: WorkerGroupOptions): Promise<WorkerGroup> {
  const shared = openShared(o);
  const unstickDeps = unstickDepsOf(shared);
  const watchDeps = watchDepsOf(shared);
  const workers = siteWorkers(shared, jobProcessor(shared, unstickDeps, watchDeps));
  const schedulers = startWatchSchedulers(shared);
  await schedulers.started;
  const scrape = registerScrapeMetrics(shared);
  const stopSweep = startDecisionSweep(shared, unstickDeps.approvals);
  o.logger.info({ sites: shared.sites }, 'workers started');
  const { connection, dispatcher, executor } = shared;
  return {
    health: () => ({
      redis: async () => {
        const waitingFor = schedulers.waitingFor();
        if (waitingFor !== null) return waitingFor;
        return (await connection.ping()) === 'PONG' ? null : 'Redis did not answer PONG';
      },
      queues: async () => {
        const stopped = workers.filter((w) => !w.isRunning()).map((w) => w.name);
        return stopped.length === 0 ? null : `not consuming: ${stopped.join(', ')}`;
      },
    }),
    async close(force = false) {
      schedulers.stopRetrying();
      stopSweep();
      await Promise.all(workers.map((w) => w.close(force)));
      await Promise.all([scrape.close(), schedulers.close()]);
      await dispatcher.close();
      await executor.close();
      connection.disconnect();
    },
  };
}

/** The connection, the incident log and the executor (both counted when metrics are on), the clock, the sites. */
function openShared(o: WorkerGroupOptions): Shared {
  const connection = connectRedis(o.redis, { maxRetriesPerRequest: null });
  const metrics = o.metrics;
  return {
    o,
    connection,
    metrics,
    log: metrics ? new ObservedIncidentLog(connection, o.prefix, metrics) : new IncidentLog(connection, o.prefix),
    executor: metrics ? observedExecutor(o.executor, metrics) : o.executor,
    now: o.now ?? (() => new Date()),
    sites: o.sites && o.sites.length > 0 ? o.sites : sitesOf(o.inventory),
    dispatcher: createDispatcher({ connection, prefix: o.prefix }),
  };
}

/** The stores, keys, policy and timing an unstick job and its decisions run with. */
function unstickDepsOf({ o, connection, log, executor, now, dispatcher }: Shared): UnstickWorkerDeps {
  return {
    inventory: o.inventory,
    executor,
    log,
    approvals: new ApprovalStore(connection, o.prefix),
    steps: new StepGuard(connection, o.prefix),
    lock: new TargetLock(connection, o.prefix),
    dispatcher,
    approvers: o.approvers ?? [],
    planKey: o.planKey ?? planKeyFor(o.workerSecret, o.inventory, o.logger),
    keys: o.keys ?? defaultKeys(),
    // One memory per worker process: what it saw through stays refused here even if Redis forgets.
    nonces: new NonceLedger(connection, o.prefix, new NonceMemory()),
    admins: o.admins ?? [],
    budget: new BlastBudget(connection, o.prefix, {
      limit: o.hostBudgetPerHour ?? ROW_DEFAULTS.GPU_MEDIC_HOST_BUDGET_PER_HOUR,
      memory: new BudgetMemory(),
    }),
    approvalTtlMs: o.approvalTtlMs ?? ROW_DEFAULTS.GPU_MEDIC_APPROVAL_TTL_SEC * 1000,
    escalation: {
      approvers: o.escalationApprovers ?? [],
      afterMs: o.escalateAfterMs ?? ROW_DEFAULTS.GPU_MEDIC_ESCALATE_AFTER_SEC * 1000,
    },
    timing: {
      graceMs: o.graceMs ?? ROW_DEFAULTS.GPU_MEDIC_TERM_GRACE_SEC * 1000,
      releaseTimeoutMs: o.releaseTimeoutMs ?? ROW_DEFAULTS.GPU_MEDIC_RELEASE_TIMEOUT_SEC * 1000,
      pollIntervalMs: o.pollIntervalMs ?? ROW_DEFAULTS.GPU_MEDIC_POLL_MS,
      commandTimeoutMs: o.inventory.defaults.commandTimeoutSec * 1000,
    },
    now,
    sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
    logger: o.logger,
    workerId: `${hostname()}:${process.pid}`,
  };
}

/** What a watch round reads and writes with; null when this worker runs no watchdog (no alerts channel). */
function watchDepsOf({ o, connection, executor, now }: Shared): WatchdogDeps | null {
  if (!o.watch) return null;
  return {
    inventory: o.inventory,
    executor,
    store: new WatchRoundStore(connection, o.prefix, o.watch.alertsChannel),
    snoozes: new SnoozeStore(connection, o.prefix),
    settings: o.watch.settings,
    now,
    commandTimeoutMs: o.inventory.defaults.commandTimeoutSec * 1000,
    logger: o.logger.child({ component: 'watchdog' }),
    readSinceStart: new Set<string>(),
    maxConcurrentReads: o.watch.maxConnects ?? ROW_DEFAULTS.GPU_MEDIC_WATCH_MAX_CONNECTS,
    ...(o.watch.beforeCommit ? { beforeCommit: o.watch.beforeCommit } : {}),
  };
}

/** A job by its kind: checked against the job schema, then run with the dependencies its kind needs. */
function jobProcessor(
  { o, log, executor, now, metrics }: Shared,
  unstickDeps: UnstickWorkerDeps,
  watchDeps: WatchdogDeps | null,
): (job: Job) => Promise<void> {
  async function runWatch(job: WatchJob): Promise<void> {
    if (watchDeps === null) {
      o.logger.warn({ site: job.site }, 'watch job on a worker without GPU_MEDIC_ALERTS_CHANNEL: nothing read');
      return;
    }
    if (!metrics) {
      await runWatchJob(job, watchDeps);
      return;
    }
    const start = performance.now();
    let outcome = 'failed';
    try {
      await runWatchJob(job, watchDeps);
      outcome = 'ok';
    } finally {
      metrics.watchRounds.inc({ site: job.site, outcome });
      metrics.watchRoundSeconds.observe({ site: job.site }, (performance.now() - start) / 1000);
    }
  }
  return async function processJob(job: Job): Promise<void> {
    const parsed = JobSchema.safeParse(job.data);
    if (!parsed.success) {
      o.logger.error({ jobId: job.id }, 'job data rejected');
      throw new Error('job data rejected');
    }
    const data = parsed.data;
    // Claims name the job and its attempt, so a re-run can tell its own dead attempt's claims.
    const attempt = (): UnstickWorkerDeps => ({
      ...unstickDeps,
      workerId: `${unstickDeps.workerId}:${job.id}:${job.attemptsStarted}`,
      jobId: String(job.id),
    });
    const readOnly = (): StatusWorkerDeps => ({
      inventory: o.inventory,
      executor,
      log,
      now,
      commandTimeoutMs: o.inventory.defaults.commandTimeoutSec * 1000,
      logger: o.logger,
      workerId: `${unstickDeps.workerId}:${job.id}:${job.attemptsStarted}`,
    });
    switch (data.kind) {
      case 'watch':
        await runWatch(data);
        return;
      case 'status':
        await runStatusJob(data, readOnly());
        return;
      case 'unstick':
        await runUnstickJob(data, attempt());
        return;
      case 'doctor':
        await runDoctorJob(data, readOnly());
        return;
      case 'decision':
        await runDecisionJob(data, attempt());
        return;
      case 'expire':
        await runExpireJob(data, attempt());
        return;
      case 'remind':
        await runRemindJob(data, attempt());
        return;
      case 'escalate':
        await runEscalateJob(data, attempt());
        return;
      default: {
        // A job kind this worker does not know must fail loudly, never complete silently.
        const unknown: never = data;
        throw new Error(`unknown job kind ${JSON.stringify(unknown)}`);
      }
    }
  };
}

/** One BullMQ worker per site queue, each running `processJob` (timed when metrics are on). */
function siteWorkers({ o, connection, metrics, sites }: Shared, processJob: (job: Job) => Promise<void>): Worker[] {
  return sites.map((site) => {
    const w = new Worker(
      queueName(site),
      async (job) => (metrics ? timed(metrics, job, () => processJob(job)) : processJob(job)),
      {
        connection,
        prefix: o.prefix,
        concurrency: o.concurrency ?? 8,
        lockDuration: o.lockDurationMs ?? ROW_DEFAULTS.GPU_MEDIC_JOB_LOCK_MS,
        stalledInterval: o.stalledIntervalMs ?? ROW_DEFAULTS.GPU_MEDIC_STALLED_MS,
        // After a failed fetch or completion (Redis gone), BullMQ waits this long before trying
        // again; its default, 15 s, left acknowledged jobs idle well after Redis was back (the
        // Redis-restart fault test lost incidents to it under load). One try a second is cheap.
        runRetryDelay: 1_000,
      },
    );
    w.on('error', (err) => o.logger.warn({ err, site }, 'worker error'));
    return w;
  });
}

interface WatchSchedulers {
  /** Settles once the schedulers are set, or at the first connection error (the retries go on behind it). */
  started: Promise<void>;
  /** What the worker is waiting for (Redis), or null once the schedulers are set. */
  waitingFor(): string | null;
  stopRetrying(): void;
  close(): Promise<void>;
}

/**
 * One watch scheduler per site queue (an upsert: every worker of the site writes the same one, so a round is
 * produced once per interval however many workers serve the site), or its removal when this worker runs no
 * watchdog. Set at start, but never awaited past Redis's first error: a worker started before its Redis
 * (down, or answering errors such as NOAUTH or LOADING) stays up, says what it waits for, and retries with
 * backoff.
 */
function startWatchSchedulers({ o, connection, sites }: Shared): WatchSchedulers {
  const schedulerQueues = sites.map((site) => ({
    site,
    queue: new Queue(queueName(site), { connection, prefix: o.prefix }),
  }));
  for (const { queue } of schedulerQueues)
    queue.on('error', (err) => o.logger.warn({ err }, 'watch scheduler queue error'));
  const setSchedulers = (): Promise<unknown> =>
    Promise.all(
      schedulerQueues.map(({ site, queue }) =>
        o.watch
          ? queue.upsertJobScheduler(
              watchSchedulerId(site),
              { every: o.watch.intervalMs },
              {
                name: 'watch',
                data: { kind: 'watch', site } satisfies WatchJob,
                opts: { attempts: 1, removeOnComplete: 100, removeOnFail: 100 },
              },
            )
          : queue.removeJobScheduler(watchSchedulerId(site)),
      ),
    );
  let waitingFor: string | null = 'waiting for Redis (first connection)';
  let retry: NodeJS.Timeout | null = null;
  let closing = false;
  const trySchedulers = (attempt: number): Promise<void> =>
    setSchedulers().then(
      () => {
        if (attempt > 0) o.logger.info('Redis answers: watch schedulers set');
        waitingFor = null;
      },
      (err: unknown) => {
        if (closing) return;
        const delayMs = Math.min(30_000, 500 * 2 ** Math.min(attempt, 6));
        waitingFor = `waiting for Redis: ${err instanceof Error ? err.message : String(err)}`;
        o.logger.warn({ err }, `${waitingFor}; next try in ${Math.ceil(delayMs / 1000)} s`);
        retry = setTimeout(() => void trySchedulers(attempt + 1), delayMs);
      },
    );
  connection.on('error', (err: Error) => {
    if (waitingFor === null) return;
    const now = `waiting for Redis: ${err.message}`;
    // Once per different reason: ioredis reconnects every few seconds.
    if (now !== waitingFor) o.logger.warn({ err }, now);
    waitingFor = now;
  });
  const first = trySchedulers(0);
  // With Redis there, start returns once the schedulers are set; at the first connection error it
  // returns at once and the retries go on in the background.
  const started = new Promise<void>((resolve) => {
    const onError = (): void => {
      connection.off('ready', onReady);
      resolve();
    };
    const onReady = (): void => {
      connection.off('error', onError);
      void first.then(resolve);
    };
    if (connection.status === 'ready') onReady();
    else {
      connection.once('ready', onReady);
      connection.once('error', onError);
    }
  });
  return {
    started,
    waitingFor: () => waitingFor,
    stopRetrying() {
      closing = true;
      if (retry) clearTimeout(retry);
    },
    async close() {
      await Promise.all(schedulerQueues.map(({ queue }) => queue.close()));
    },
  };
}

/**
 * What Prometheus reads at scrape time, never polled: each site queue's depth, and with the watchdog on,
 * GPU metrics from its last readings of this worker's machines and its rounds' state.
 */
function registerScrapeMetrics({ o, connection, metrics, sites, now }: Shared): { close(): Promise<void> } {
  if (!metrics) return { close: async () => {} };
  const depthQueues = sites.map((site) => ({
    site,
    queue: new Queue(queueName(site), { connection, prefix: o.prefix }),
  }));
  const stopReading = metrics.onScrape(async (g) => {
    for (const { site, queue } of depthQueues) {
      const counts = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'failed');
      for (const [state, n] of Object.entries(counts)) g.set({ site, state }, n);
    }
  });
  if (o.watch) {
    const mine = listMachines(o.inventory).filter((m) => sites.includes(m.site));
    const lastKey = watchKeys(o.prefix).last;
    registerGpuMetrics(
      metrics.registry,
      async () => {
        if (mine.length === 0) return [];
        const raws = await connection.hmget(lastKey, ...mine.map((m) => m.id));
        return raws.flatMap((raw) => {
          if (raw === null) return [];
          try {
            const g = MachineGlanceSchema.safeParse(JSON.parse(raw));
            return g.success ? [g.data] : [];
          } catch {
            return [];
          }
        });
      },
      mine,
    );
    for (const site of sites) for (const outcome of ['ok', 'failed']) metrics.watchRounds.inc({ site, outcome }, 0);
    const store = new WatchRoundStore(connection, o.prefix, o.watch.alertsChannel);
    const ids = mine.map((m) => m.id);
    registerWatchMetrics(
      metrics.registry,
      async () => {
        const [lastGood, states] = await Promise.all([
          store.lastGoodReads(ids),
          Promise.all(ids.map(async (id) => (await store.load(id)).state)),
        ]);
        return { lastGood, states };
      },
      CONDITION_KINDS,
      () => now().getTime(),
    );
  }
  return {
    async close() {
      stopReading();
      await Promise.all(depthQueues.map(({ queue }) => queue.close()));
    },
  };
}

/** A decision stored by the bot whose job it then failed to queue is not lost: queued from here. Returns its stop. */
function startDecisionSweep({ o, log, dispatcher, now }: Shared, approvals: ApprovalStore): () => void {
  const sweepDeps = { approvals, log, inventory: o.inventory, dispatcher, now, logger: o.logger, graceMs: 3000 };
  let sweeping = false;
  const sweep = setInterval(() => {
    if (sweeping) return;
    sweeping = true;
    sweepDecisions(sweepDeps)
      .catch((err: unknown) => o.logger.warn({ err }, 'decision sweep failed'))
      .finally(() => {
        sweeping = false;
      });
  }, o.decisionSweepMs ?? 5000);
  return () => clearInterval(sweep);
}

function defaultKeys(): WorkerKeys {
  const k = workerKeysOf({ GPU_MEDIC_BOT_PUBLIC_KEY_FILES: [], GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: [] });
  if (!k.ok) throw new Error(k.why);
  return k.value;
}

/** A job's wait in its queue (beyond any delay it was given on purpose) and its run, by kind and result. */
async function timed(m: Metrics, job: Job, run: () => Promise<void>): Promise<void> {
  const kind = typeof job.name === 'string' && /^[a-z_]{1,20}$/.test(job.name) ? job.name : 'unknown';
  const started = Date.now();
  m.jobWaitSeconds.observe({ kind }, Math.max(0, started - job.timestamp - (job.opts.delay ?? 0)) / 1000);
  try {
    await run();
    m.jobRunSeconds.observe({ kind, result: 'completed' }, (Date.now() - started) / 1000);
  } catch (e) {
    m.jobRunSeconds.observe({ kind, result: 'failed' }, (Date.now() - started) / 1000);
    throw e;
  }
}
