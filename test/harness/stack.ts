import { captureLogger } from './capture-logger.ts';
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { connectRedis } from '../../src/redis/connection.ts';
import { startBot, type Bot } from '../../src/bot.ts';
import { parseEnv, type Env } from '../../src/config/env.ts';
import { validateInventory } from '../../src/config/load-inventory.ts';
import type { Inventory } from '../../src/config/inventory.ts';
import { listMachines, sitesOf } from '../../src/config/machines.ts';
import { queueName } from '../../src/queue/jobs.ts';
import { startWorkerProcess } from '../../src/worker-process.ts';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.ts';
import { startMetricsServer, type MetricsServer } from '../../src/metrics/server.ts';
import type { WorkerGroup } from '../../workers/index.ts';
import { startFleet } from './fleet/index.ts';
import { removePrefix } from './redis-prefix.ts';
import type { Fleet, FleetSpec } from './fleet/types.ts';
import { startFakeSlack, type FakeSlack, type StoredMessage } from './slack/fake-slack-api.ts';
import { startSlackWithSocketMode, type FakeSocketMode } from './slack/fake-socket-mode.ts';
import { sendSlashCommand, type SignedResponse } from './slack/signed-request.ts';
import { startWorkerChild, type WorkerChild } from './worker-child.ts';
import { botSigner, type BotSigner } from '../../src/auth/signed-jobs.ts';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

export interface Stack {
  fleet: Fleet;
  slack: FakeSlack;
  /** The Socket Mode server, when the stack runs in Socket Mode. */
  socket: FakeSocketMode | null;
  /** The running bot (a new one after restartBot). */
  readonly bot: Bot;
  /** The in-process workers (with `workerProcess: true` a stand-in: the workers run in `workerChild`). */
  readonly workers: WorkerGroup;
  /** With `workerProcess: true`: the worker OS process now running (a new one after restartWorkers). */
  readonly workerChild: WorkerChild | null;
  env: Env;
  inventory: Inventory;
  /** The bot's /slack/events (its port changes when the bot restarts). */
  readonly eventsUrl: string;
  signingSecret: string;
  /** Signs as this stack's bot does (its key file, generated for this stack): for tests that build their own command deps. */
  signer: BotSigner;
  /** The key settings a worker process of this stack needs (its signing key, the bot's public key), for tests that start their own. */
  workerKeyEnv: Record<string, string>;
  prefix: string;
  redis: Redis;
  /** With `metrics: true`: the registry bot and workers count into, and its endpoint (`GET /metrics`). */
  metrics: Metrics | null;
  metricsUrl: string | null;
  /** Every log line the bot and workers wrote (for secret checks). */
  logText(): string;
  slash(
    text: string,
    o?: { user?: string; channel?: string },
  ): Promise<SignedResponse & { responseUrl: string; ackText: string; incidentId: string | null }>;
  /** Waits until the incident's thread satisfies `done` (default: parent says done), returns parent + replies. */
  threadOf(
    incidentId: string,
    o?: { channel?: string; timeoutMs?: number; done?: (t: StoredMessage[]) => boolean },
  ): Promise<StoredMessage[]>;
  /**
   * Waits until no job is waiting, active or delayed on any site queue and no fleet command log has
   * grown for `stableMs`: work an earlier step queued has finished, so a "nothing ran" check that
   * follows is not fooled by it. Throws after `timeoutMs`.
   */
  quiet(o?: { stableMs?: number; timeoutMs?: number }): Promise<void>;
  /**
   * Stops the bot and starts a new one with the same settings on the same Redis (a new HTTP port;
   * `eventsUrl` follows). What the bot knows lives in Redis; the old one keeps nothing.
   */
  restartBot(): Promise<void>;
  /**
   * Ends the workers and starts new ones on the same Redis. With `workerProcess: true` the worker
   * process is SIGKILLed, as a crash (no close, its job locks left to lapse); in-process they are
   * closed with force (running jobs are not waited for). Resolves once the new ones run.
   */
  restartWorkers(): Promise<{ killedPid: number | null; newPid: number | null }>;
  /** The two halves of restartBot, for a step that happens while the bot is down (no-op when already so). */
  stopBot(): Promise<void>;
  startBot(): Promise<void>;
  /** The two halves of restartWorkers (the worker process SIGKILLed); no-op when already so. */
  stopWorkers(): Promise<{ killedPid: number | null }>;
  startWorkers(): Promise<{ newPid: number | null }>;
  stop(): Promise<void>;
}

export interface StackOptions {
  fleet: FleetSpec;
  env?: Record<string, string>;
  /** Settings only the bot gets, over `env` (e.g. an approver removed from the bot's live list while the worker still has it). */
  botEnv?: Record<string, string>;
  /** Mutate the inventory the bot and worker load (e.g. shorter timeouts). */
  tweakInventory?: (inv: Inventory) => void;
  /** A Redis other than REDIS_URL (e.g. a private one a test stops and restarts). */
  redisUrl?: string;
  /** Run the bot in Socket Mode (the production default) against a local Socket Mode server, not HTTP. */
  socketMode?: boolean;
  /** Start no worker in this process (a test runs worker processes of its own). */
  noWorkers?: boolean;
  /** Count into one registry served over HTTP on a free loopback port, as `start` with GPU_MEDIC_METRICS_PORT does. */
  metrics?: boolean;
  /**
   * Run the workers as their own OS process (`dist/src/main.js worker`, configured by environment and an
   * inventory file like a deployed worker), so restartWorkers is a real SIGKILL. Its log lines join logText.
   */
  workerProcess?: boolean;
  /** The bot's clock (ms): Slack's request window and the time of a click. Default Date.now. */
  botNow?: () => number;
  /** App Home's per-user pace (ms) in the bot; default the bot's own (5 s, paced in test/unit/home-publisher.test.ts). */
  homePerUserMinMs?: number;
  /** Runs after the fake Slack started and before the bot does (e.g. Slack's Web API down at start). */
  beforeBotStart?: (slack: FakeSlack) => void;
}

/** The whole system on this machine: real Redis, real sshd fleet, real Bolt receiver, fake Slack. */
export async function startStack(o: StackOptions): Promise<Stack> {
  const prefix = `t${randomBytes(4).toString('hex')}`;
  const redisUrl = o.redisUrl ?? REDIS_URL;
  const signingSecret = randomBytes(16).toString('hex');
  const fleet = await startFleet(o.fleet);
  const withSocket = o.socketMode ? await startSlackWithSocketMode() : null;
  const socket = withSocket?.socket ?? null;
  const slack = withSocket?.slack ?? (await startFakeSlack());
  const { logger, lines: logLines, text: logText } = captureLogger('stack');
  const v = validateInventory(fleet.inventory());
  if (!v.inventory) throw new Error(`fleet inventory invalid: ${JSON.stringify(v.problems)}`);
  const inventory = v.inventory;
  o.tweakInventory?.(inventory);
  // The bot's and the worker's signing keys, as files (docs/security.md); the fleet's, which
  // its hosts' agents trust, so a signal on an agent host verifies.
  const keys = fleet.keys;
  const source: Record<string, string> = {
    ...keys.botEnv,
    ...keys.workerEnv,
    GPU_MEDIC_MODE: socket ? 'socket' : 'http',
    ...(socket ? { SLACK_APP_TOKEN: socket.appToken } : {}),
    SLACK_BOT_TOKEN: slack.botToken,
    SLACK_SIGNING_SECRET: signingSecret,
    SLACK_API_URL: slack.apiUrl,
    PORT: '0',
    REDIS_URL: redisUrl,
    GPU_MEDIC_PREFIX: prefix,
    // Shell lines unless o.env asks for the agent: most stack tests are not about it (agent hosts have their
    // own).
    GPU_MEDIC_SSH_ACCESS: 'root-shell',
    ...o.env,
  };
  const e = parseEnv(source, 'start');
  if (!e.env) throw new Error(`env invalid: ${JSON.stringify(e.problems)}`);
  const env = e.env;
  const b = o.botEnv ? parseEnv({ ...source, ...o.botEnv }, 'start') : e;
  if (!b.env) throw new Error(`bot env invalid: ${JSON.stringify(b.problems)}`);
  const botEnv = b.env;
  const metrics = o.metrics ? createMetrics() : null;
  const metricsServer: MetricsServer | null = metrics
    ? await startMetricsServer({
        registry: metrics.registry,
        host: '127.0.0.1',
        port: 0,
        logger: logger.child({ role: 'metrics' }),
      })
    : null;
  let generation = 1;
  let botUp = true;
  let workersUp = true;
  const botDeps = {
    ...(metrics ? { metrics } : {}),
    ...(o.botNow ? { now: o.botNow } : {}),
    ...(o.homePerUserMinMs !== undefined ? { homePerUserMinMs: o.homePerUserMinMs } : {}),
  };
  o.beforeBotStart?.(slack);
  let bot = await startBot(botEnv, inventory, logger.child({ role: 'bot' }), botDeps);
  const noWorkers: WorkerGroup = { health: () => ({}), close: async () => undefined };
  const inProcess = !o.noWorkers && !o.workerProcess;
  const startInProcess = (): Promise<WorkerGroup> =>
    startWorkerProcess(env, inventory, logger.child({ role: 'worker', generation }), metrics ?? undefined);
  let workers: WorkerGroup = inProcess ? await startInProcess() : noWorkers;
  // A worker process gets what a deployed worker gets: its settings (no Slack token) and an inventory file.
  const inventoryPath = join(tmpdir(), `gpu-medic-${prefix}-inventory.json`);
  const healthPath = join(tmpdir(), `gpu-medic-${prefix}-worker-health.json`);
  const childEnv: Record<string, string> = Object.fromEntries(
    Object.entries({
      ...source,
      GPU_MEDIC_INVENTORY: inventoryPath,
      GPU_MEDIC_HEALTH_FILE: healthPath,
      LOG_LEVEL: 'info',
    }).filter(([k]) => !/^SLACK_|^PORT$|^GPU_MEDIC_MODE$|^GPU_MEDIC_BOT_KEY_FILE$/.test(k)),
  );
  // Its pino lines join the captured ones whole (a chunk may end mid-line).
  const startChild = (): Promise<WorkerChild> => {
    let partial = '';
    return startWorkerChild(childEnv, {
      onOutput: (c) => {
        const parts = (partial + c).split('\n');
        partial = parts.pop() ?? '';
        for (const l of parts) logLines.push(`${l}\n`);
      },
    });
  };
  let workerChild: WorkerChild | null = null;
  if (o.workerProcess && !o.noWorkers) {
    // JSON is YAML: the worker reads it with the loader of a hand-written inventory.yaml.
    writeFileSync(inventoryPath, JSON.stringify(inventory, null, 2), { mode: 0o600 });
    workerChild = await startChild();
  }
  // Through the same settings as the bot and workers (a Sentinel set when the test configures one).
  const redis = connectRedis(env);
  // A test may stop its Redis on purpose; reconnecting is ioredis' job, the error is expected.
  redis.on('error', () => undefined);
  const stopBot = async (): Promise<void> => {
    if (!botUp) return;
    botUp = false;
    await bot.stop();
  };
  const startBotAgain = async (): Promise<void> => {
    if (botUp) return;
    generation++;
    bot = await startBot(botEnv, inventory, logger.child({ role: 'bot', generation }), botDeps);
    botUp = true;
  };
  const stopWorkers = async (): Promise<{ killedPid: number | null }> => {
    if (!workersUp) return { killedPid: null };
    workersUp = false;
    if (workerChild) {
      const killedPid = workerChild.pid;
      await workerChild.kill();
      return { killedPid };
    }
    if (inProcess) await workers.close(true);
    return { killedPid: null };
  };
  const startWorkers = async (): Promise<{ newPid: number | null }> => {
    if (workersUp) return { newPid: null };
    generation++;
    workersUp = true;
    if (workerChild) {
      workerChild = await startChild();
      return { newPid: workerChild.pid };
    }
    if (inProcess) workers = await startInProcess();
    return { newPid: null };
  };
  const eventsUrl = (): string => `http://127.0.0.1:${bot.port}/slack/events`;
  return {
    fleet,
    slack,
    socket,
    get bot() {
      return bot;
    },
    get workers() {
      return workers;
    },
    get workerChild() {
      return workerChild;
    },
    env,
    inventory,
    get eventsUrl() {
      return eventsUrl();
    },
    signingSecret,
    signer: botSigner(keys.bot.privateKey, env.GPU_MEDIC_SIGNED_TTL_SEC * 1000),
    workerKeyEnv: keys.workerEnv,
    prefix,
    redis,
    metrics,
    metricsUrl: metricsServer ? `http://127.0.0.1:${metricsServer.port}/metrics` : null,
    logText,
    async slash(text, so = {}) {
      const responseUrl = slack.newResponseUrl();
      const r = await sendSlashCommand(eventsUrl(), signingSecret, {
        text,
        user_id: so.user ?? 'U0REQUEST1',
        channel_id: so.channel ?? 'C0ONCALL01',
        response_url: responseUrl,
      });
      const ackText =
        typeof r.json === 'object' && r.json !== null && 'text' in r.json
          ? String((r.json as { text: unknown }).text)
          : '';
      const m = /incident `(inc_[a-z0-9_]+)`/.exec(ackText);
      return { ...r, responseUrl, ackText, incidentId: m?.[1] ?? null };
    },
    threadOf(incidentId, to = {}) {
      const channel = to.channel ?? 'C0ONCALL01';
      const done = to.done ?? ((t: StoredMessage[]) => /done|Recovered|stuck|expired/i.test(t[0]?.text ?? ''));
      return slack.waitFor(() => {
        // The parent the outbox tagged for this incident; else any message naming it (an alert message
        // also names the incidents its buttons opened, so the tag goes first).
        const all = slack.messages(channel);
        const parent =
          all.find(
            (m) => m.metadata?.event_payload.incident === incidentId && m.metadata.event_payload.view_key === 'parent',
          ) ?? all.find((m) => JSON.stringify(m.blocks ?? []).includes(incidentId));
        if (!parent) return null;
        const t = slack.thread(channel, parent.ts);
        return done(t) ? t : null;
      }, to.timeoutMs ?? 20000);
    },
    async quiet(qo = {}) {
      const stableMs = qo.stableMs ?? 300;
      const deadline = Date.now() + (qo.timeoutMs ?? 20000);
      const sites = sitesOf(inventory);
      const queues = sites.map((site) => new Queue(queueName(site), { connection: redis, prefix }));
      const logSizes = (): string => JSON.stringify(listMachines(inventory).map((m) => fleet.commandLog(m.id).length));
      try {
        let last = logSizes();
        let stableSince = Date.now();
        for (;;) {
          const counts = await Promise.all(
            queues.map((q) => q.getJobCounts('waiting', 'active', 'delayed', 'prioritized')),
          );
          const busy = counts.some((c) => Object.values(c).some((n) => n > 0));
          const now = logSizes();
          if (now !== last || busy) {
            last = now;
            stableSince = Date.now();
          } else if (Date.now() - stableSince >= stableMs) return;
          if (Date.now() > deadline)
            throw new Error(`stack not quiet after ${qo.timeoutMs ?? 20000} ms: ${JSON.stringify(counts)}`);
          await new Promise((r) => setTimeout(r, 50));
        }
      } finally {
        await Promise.all(queues.map((q) => q.close()));
      }
    },
    stopBot,
    startBot: startBotAgain,
    async restartBot() {
      await stopBot();
      await startBotAgain();
    },
    stopWorkers,
    startWorkers,
    async restartWorkers() {
      const { killedPid } = await stopWorkers();
      const { newPid } = await startWorkers();
      return { killedPid, newPid };
    },
    async stop() {
      if (botUp) await bot.stop().catch(() => undefined);
      if (workersUp) await workers.close(true).catch(() => undefined);
      if (workersUp) await workerChild?.stop().catch(() => undefined);
      rmSync(inventoryPath, { force: true });
      for (const f of keys.files) rmSync(f, { force: true });
      rmSync(healthPath, { force: true });
      await metricsServer?.close().catch(() => undefined);
      await slack.close().catch(() => undefined);
      await socket?.close().catch(() => undefined);
      await fleet.stop();
      // Leave Redis as we found it: delete only this stack's keys.
      await removePrefix(redis, prefix);
      redis.disconnect();
    },
  };
}

/** Job and incident keys under this stack's prefix (to prove "nothing was queued"); bookkeeping sets left out. */
export async function keysOf(redis: Redis, prefix: string): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
    cursor = next;
    out.push(...keys.filter((k) => k.includes(':inc:') || k.includes(':site-')));
  } while (cursor !== '0');
  return out.sort();
}
