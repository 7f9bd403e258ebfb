import type { Redis } from 'ioredis';
import { connectRedis } from './redis/connection.ts';
import { registerCommands } from '../commands/index.ts';
import type { Env } from './config/env.ts';
import type { Inventory } from './config/inventory.ts';
import { listMachines } from './config/machines.ts';
import { ApprovalStore } from './approval/approval-store.ts';
import { newIncidentId } from './incident/ids.ts';
import { IncidentLog } from './incident/log.ts';
import { TargetLock } from './incident/target-lock.ts';
import { SnoozeStore } from './watch-store/snooze-store.ts';
import type { HealthCheck } from './health/heartbeat.ts';
import type { Logger } from './logger.ts';
import type { Metrics } from './metrics/metrics.ts';
import { ObservedIncidentLog, observedPoster, observedSlackCall } from './metrics/observed.ts';
import { createDispatcher } from './queue/dispatcher.ts';
import { createSlackApp } from './slack/app.ts';
import { loadBolt } from './slack/bolt.ts';
import { alertmanagerReceiver, silencesOf } from './alertmanager/wire.ts';
import { Outbox } from './slack/outbox.ts';
import { HomePublisher, registerHome } from './slack/home.ts';
import { replayGuard } from './slack/replay-guard.ts';
import { QUEUE_DOWN } from '../commands/status.ts';
import { botKeysOf } from './auth/keys.ts';
import { botSigner } from './auth/signed-jobs.ts';

function waitReady(r: Redis, ms: number): Promise<void> {
  if (r.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('redis not ready')), ms);
    r.once('ready', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

/** The URL without its password, for a log line. */
function redactRedisUrl(url: string): string {
  return url.replace(/^(rediss?:\/\/)[^@/]*@/, '$1***@');
}

/** Why the first connection failed, in words an operator can act on. */
function redisReason(err: Error | null): string {
  if (!err) return 'no answer within 5 s';
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return `${err.message} (the host name does not resolve here; "redis" exists only inside docker compose)`;
  if (code === 'ECONNREFUSED') return `${err.message} (nothing listens there: is Redis running? see docs/deploy.md)`;
  return err.message;
}

export interface Bot {
  port: number | null;
  /** The Alertmanager receiver's own port, when it has one. */
  alertmanagerPort: number | null;
  outbox: Outbox;
  /** What the heartbeat checks: Redis answers, the outbox loop turns, Slack can reach us. */
  health(): Record<string, HealthCheck>;
  stop(): Promise<void>;
}

/** The outbox loop runs every 100 ms; one and a half heartbeats (at least 5 s) without a completed pass means it is stuck or failing. */
const outboxStaleMs = (env: Env): number => Math.max(5000, env.GPU_MEDIC_HEALTH_INTERVAL_SEC * 1500);

/** The Slack-facing process: Bolt, commands, the outbox. Holds Slack tokens and no SSH key. */
/** What tests inject. `now`: the bot's clock (ms) for Slack's request window and the commands (a click's time); default Date.now. */
export interface BotDeps {
  now?: () => number;
  /** Where Slack calls, retries and the bot's incident events (approval clicks) are counted. Default: not counted. */
  metrics?: Metrics;
  /** App Home's pace: at most one publish per user per this many ms (HomePublisher's perUserMinMs). Default 5 s. */
  homePerUserMinMs?: number;
}

export async function startBot(env: Env, inventory: Inventory, logger: Logger, deps: BotDeps = {}): Promise<Bot> {
  // Commands must fail fast when Redis is down (the ack is due within 3 s): no offline queue.
  const fast = connectRedis(env, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  const steady = connectRedis(env, { maxRetriesPerRequest: null });
  let lastRedisError: Error | null = null;
  fast.on('error', (err: Error) => {
    lastRedisError = err;
    logger.debug({ err }, 'redis (commands) error');
  });
  steady.on('error', (err) => logger.debug({ err }, 'redis (outbox) error'));
  // Without an offline queue, commands sent before the first connect would fail: wait for it (bounded).
  const reachedAtStart = await waitReady(fast, 5000).then(
    () => true,
    () => {
      logger.warn(
        { redis: redactRedisUrl(env.REDIS_URL), reason: redisReason(lastRedisError) },
        `Redis not reachable at start (${redactRedisUrl(env.REDIS_URL)}: ${redisReason(lastRedisError)}); commands will answer "queue unavailable" until it is`,
      );
      return false;
    },
  );
  // The operator who read the line above learns when the wait is over, and need not restart anything.
  if (!reachedAtStart)
    fast.once('ready', () =>
      logger.info(
        { redis: redactRedisUrl(env.REDIS_URL) },
        `Redis reachable now (${redactRedisUrl(env.REDIS_URL)}): commands are queued from now on`,
      ),
    );
  // The Alertmanager receiver (src/alertmanager/), when configured: a route here or a port of its own.
  const alertmanager = alertmanagerReceiver(
    env,
    inventory,
    fast,
    logger.child({ component: 'alertmanager' }),
    deps.now,
  );
  const slack = createSlackApp({
    ...(alertmanager.route ? { extraRoutes: [alertmanager.route] } : {}),
    mode: env.GPU_MEDIC_MODE,
    botToken: env.SLACK_BOT_TOKEN ?? '',
    ...(env.SLACK_APP_TOKEN ? { appToken: env.SLACK_APP_TOKEN } : {}),
    ...(env.SLACK_SIGNING_SECRET ? { signingSecret: env.SLACK_SIGNING_SECRET } : {}),
    ...(env.SLACK_API_URL ? { apiUrl: env.SLACK_API_URL } : {}),
    port: env.PORT,
    host: env.GPU_MEDIC_BIND_ADDRESS,
    logger,
    ...(deps.now ? { now: deps.now } : {}),
  });
  // A correctly signed request delivered a second time (within Bolt's 5-minute window) runs nothing.
  slack.app.use(
    replayGuard({
      redis: fast,
      prefix: env.GPU_MEDIC_PREFIX,
      logger: logger.child({ component: 'replay-guard' }),
      unavailableText: QUEUE_DOWN,
      ...(deps.now ? { now: deps.now } : {}),
    }),
  );
  const dispatcher = createDispatcher({ connection: fast, prefix: env.GPU_MEDIC_PREFIX });
  // The bot's signing key (requests, decisions) and the workers' public keys (cards): docs/security.md.
  const keys = botKeysOf(env);
  if (!keys.ok) throw new Error(keys.why);
  if (!env.GPU_MEDIC_BOT_KEY_FILE || env.GPU_MEDIC_WORKER_PUBLIC_KEY_FILES.length === 0)
    logger.warn(
      'GPU_MEDIC_BOT_KEY_FILE or GPU_MEDIC_WORKER_PUBLIC_KEY_FILES is not set: this bot signs and verifies with keys of this process only, so only a worker in this same process (`start`) acts on it; see docs/security.md',
    );
  const signer = botSigner(keys.value.signing, env.GPU_MEDIC_SIGNED_TTL_SEC * 1000);
  const metrics = deps.metrics;
  if (metrics) {
    const { webApi } = loadBolt(env.GPU_MEDIC_MODE);
    // The Web API client waits out a 429 and sends the call again: that is a retry.
    slack.client.on(webApi.WebClientEvent.RATE_LIMITED, (_sec: number, req: { url?: unknown }) => {
      const method = typeof req?.url === 'string' ? /\/([a-z]+\.[a-zA-Z.]+)$/.exec(req.url)?.[1] : undefined;
      metrics.slackRetries.inc({ method: method ?? 'unknown', reason: 'rate_limited' });
    });
  }
  registerCommands(slack.app, {
    inventory,
    log: metrics
      ? new ObservedIncidentLog(fast, env.GPU_MEDIC_PREFIX, metrics)
      : new IncidentLog(fast, env.GPU_MEDIC_PREFIX),
    dispatcher,
    policy: {
      allowedChannels: env.GPU_MEDIC_ALLOWED_CHANNELS,
      allowedUsers: env.GPU_MEDIC_ALLOWED_USERS,
      approvers: env.GPU_MEDIC_APPROVERS,
      admins: env.GPU_MEDIC_ADMINS,
      escalationApprovers: env.GPU_MEDIC_ESCALATION_APPROVERS,
    },
    // The same clock as Slack's request window: a click is timed where it is checked.
    now: () => new Date(deps.now ? deps.now() : Date.now()),
    newIncidentId: () => newIncidentId(new Date()),
    logger: logger.child({ component: 'commands' }),
    lock: new TargetLock(fast, env.GPU_MEDIC_PREFIX),
    approvals: new ApprovalStore(fast, env.GPU_MEDIC_PREFIX, { signer }),
    signer,
    lockTtlMs: (env.GPU_MEDIC_APPROVAL_TTL_SEC + 30 * 60) * 1000,
    alertsChannel: env.GPU_MEDIC_ALERTS_CHANNEL ?? null,
    snoozes: new SnoozeStore(fast, env.GPU_MEDIC_PREFIX),
    ...silencesOf(env),
  });
  const outbox = new Outbox({
    log: new IncidentLog(steady, env.GPU_MEDIC_PREFIX),
    poster: metrics ? observedPoster(slack.poster, metrics) : slack.poster,
    logger: logger.child({ component: 'outbox' }),
    render: { machines: listMachines(inventory) },
    // Acks first: during a burst of commands the threads wait until the bot has answered them.
    yieldTo: () => slack.requests.idle(),
    plans: {
      workerPublicKeys: keys.value.workerPublic,
      commandTimeoutMs: inventory.defaults.commandTimeoutSec * 1000,
    },
  });
  // App Home: the fleet at a glance for whoever opened the Home tab, republished as it changes.
  const home = new HomePublisher({
    redis: steady,
    prefix: env.GPU_MEDIC_PREFIX,
    machineIds: listMachines(inventory).map((m) => m.id),
    settings: { ramPct: env.GPU_MEDIC_WATCH_RAM_PCT, staleAfterMs: 3 * env.GPU_MEDIC_WATCH_INTERVAL_SEC * 1000 },
    // Counted as the outbox's calls are (a failed publish is retried on the next change).
    publish: async (user, view) => {
      const call = () => slack.client.views.publish({ user_id: user, view });
      await (metrics ? observedSlackCall(metrics)('views.publish', call) : call());
    },
    logger: logger.child({ component: 'home' }),
    ...(deps.homePerUserMinMs !== undefined ? { perUserMinMs: deps.homePerUserMinMs } : {}),
  });
  registerHome(slack.app, home, logger.child({ component: 'home' }));
  const { port } = await slack.start();
  const alertmanagerPort = await alertmanager.start();
  outbox.start();
  home.start();
  const startedAt = Date.now();
  logger.info(
    { mode: env.GPU_MEDIC_MODE, port, ...(env.GPU_MEDIC_MODE === 'http' ? { bind: env.GPU_MEDIC_BIND_ADDRESS } : {}) },
    'bot started',
  );
  return {
    port,
    alertmanagerPort,
    outbox,
    health: () => ({
      // Says what it waits for: a bot started before its Redis stays up and answers "queue unavailable".
      redis: async () => {
        const where = redactRedisUrl(env.REDIS_URL);
        try {
          return (await fast.ping()) === 'PONG' ? null : `waiting for Redis at ${where}: no PONG`;
        } catch (err) {
          return `waiting for Redis at ${where}: ${redisReason(lastRedisError ?? (err instanceof Error ? err : null))}`;
        }
      },
      outbox: async () => {
        // Counted from the start until the first pass completes.
        const age = Date.now() - (outbox.lastPassAt() ?? startedAt);
        return age <= outboxStaleMs(env)
          ? null
          : `no completed outbox pass for ${Math.round(age / 1000)} s (Redis unreachable?)`;
      },
      slack: async () => slack.connectionProblem(),
    }),
    async stop() {
      await alertmanager.stop();
      await home.stop();
      await outbox.stop();
      await slack.stop();
      await dispatcher.close();
      fast.disconnect();
      steady.disconnect();
    },
  };
}
