/**
 * The unstick crash rig: the WORKER runs as its own OS process (`node dist/src/main.js worker`,
 * the compiled entry point, configured only by env and an inventory file), so a test can SIGKILL it for real at a
 * chosen moment and start another one; the bot runs in this process (real Bolt HTTP receiver,
 * signed requests, fake Slack) and can be stopped and started again on the same Redis prefix.
 * Redis is the shared one under a random prefix (every key of it removed at the end); the fleet
 * is the real-sshd one with containers as PID namespaces. Every child is killed by its PID.
 */
import { captureLogger } from '../harness/capture-logger.ts';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { ApprovalStore } from '../../src/approval/approval-store.ts';
import { ROOT, spawnMain } from '../harness/dist.ts';
import { removePrefix } from '../harness/redis-prefix.ts';
import { startBot, type Bot } from '../../src/bot.ts';
import { parseEnv } from '../../src/config/env.ts';
import type { Inventory, InventoryInput } from '../../src/config/inventory.ts';
import { validateInventory } from '../../src/config/load-inventory.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { TargetLock } from '../../src/incident/target-lock.ts';
import { queueName } from '../../src/queue/jobs.ts';
import { startFleet } from '../harness/fleet/index.ts';
import type { Fleet, FleetSpec, SignalRecord } from '../harness/fleet/types.ts';
import { startFakeSlack, type FakeSlack, type StoredMessage } from '../harness/slack/fake-slack-api.ts';
import {
  blockActionPayload,
  sendInteraction,
  sendSlashCommand,
  type SignOptions,
  type SignedResponse,
} from '../harness/slack/signed-request.ts';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const CHANNEL = 'C0ONCALL01';
const ALICE = 'U0ALICE001'; // on call: requests
export const BOB = 'U0BOB00001'; // approver
export const DAVE = 'U0DAVE0001'; // second approver

/** Timings short enough for a test, long enough that the SIGTERM → SIGKILL gap can be hit. */
const WORKER_ENV: Record<string, string> = {
  GPU_MEDIC_APPROVERS: `${BOB},${DAVE}`,
  GPU_MEDIC_TERM_GRACE_SEC: '1',
  GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5',
  GPU_MEDIC_POLL_MS: '300',
  // Shell lines: this rig tests crashes, not the agent (agent/test/ and test/fleet/agent-fleet.test.ts do).
  GPU_MEDIC_SSH_ACCESS: 'root-shell',
  GPU_MEDIC_APPROVAL_TTL_SEC: '300',
  // Many host kills on one host within minutes: the blast-radius budget (default 3 an hour) is not what this rig tests.
  GPU_MEDIC_HOST_BUDGET_PER_HOUR: '1000',
  // A SIGKILLed worker's job is handed to the next worker after ~2-3 s instead of ~30-60 s.
  GPU_MEDIC_JOB_LOCK_MS: '2000',
  GPU_MEDIC_STALLED_MS: '1000',
  LOG_LEVEL: 'info',
};

/** KEEP_CRASH_LOGS=1 keeps every worker's output in the rig's temp dir (its path is printed at the end). */
const KEEP_LOGS = process.env.KEEP_CRASH_LOGS === '1';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export interface WorkerProc {
  pid: number;
  /** stdout + stderr so far (pino JSON lines). */
  output(): string;
  alive(): boolean;
  /** SIGKILL, as a crash: no shutdown code runs. Resolves once the process is gone. */
  kill(): Promise<void>;
  /** SIGTERM (clean shutdown), SIGKILL after 10 s. */
  stop(): Promise<void>;
}

export interface Button {
  action_id: string;
  value: string;
}

export function buttonsOf(m: StoredMessage | undefined): Button[] {
  const out: Button[] = [];
  for (const b of (m?.blocks ?? []) as Array<{
    type: string;
    elements?: Array<{ type: string; action_id?: string; value?: string }>;
  }>)
    if (b.type === 'actions')
      for (const e of b.elements ?? [])
        if (e.type === 'button' && e.action_id && e.value) out.push({ action_id: e.action_id, value: e.value });
  return out;
}

export type Ev<T extends AnyLoggedEvent['type']> = Extract<AnyLoggedEvent, { type: T }>;
export function ofType<T extends AnyLoggedEvent['type']>(events: readonly AnyLoggedEvent[], type: T): Ev<T>[] {
  return events.filter((e): e is Ev<T> => e.type === type);
}

export interface CrashRigOptions {
  fleet: FleetSpec;
  /** Change the inventory document the worker and bot load (e.g. a non-root container login). */
  tweakInventory?: (inv: InventoryInput) => void;
}

export interface CrashRig {
  fleet: Fleet;
  slack: FakeSlack;
  redis: Redis;
  prefix: string;
  inventory: Inventory;
  inventoryPath: string;
  log: IncidentLog;
  lock: TargetLock;
  approvals: ApprovalStore;
  bot: Bot;
  eventsUrl(): string;
  signingSecret: string;
  /** Every worker process started so far (for the final "all stopped" check). */
  workers: WorkerProc[];
  startWorker(env?: Record<string, string>): Promise<WorkerProc>;
  /** Stops the in-process bot and starts a new one on the same Redis prefix (new port). */
  restartBot(): Promise<void>;
  slash(text: string, user?: string): Promise<{ status: number; ackText: string; incidentId: string | null }>;
  click(
    user: string,
    card: StoredMessage,
    b: Button,
    o?: SignOptions & { payload?: Record<string, unknown> },
  ): Promise<SignedResponse>;
  /** The payload a click sends (to replay the very same request). */
  clickPayload(user: string, card: StoredMessage, b: Button): Record<string, unknown>;
  events(incidentId: string): Promise<AnyLoggedEvent[]>;
  /** Polls the incident log every 15 ms until an event of `type` satisfies `pred`; returns it. */
  waitEvent<T extends AnyLoggedEvent['type']>(
    incidentId: string,
    type: T,
    pred?: (e: Ev<T>, all: readonly AnyLoggedEvent[]) => boolean,
    timeoutMs?: number,
  ): Promise<Ev<T>>;
  /** The incident's thread (parent first) once `done` holds. */
  thread(incidentId: string, done: (t: StoredMessage[]) => boolean, timeoutMs?: number): Promise<StoredMessage[]>;
  /** Job counts of a site queue (a job that stalled too often ends in `failed`). */
  jobCounts(site?: string): Promise<Record<string, number>>;
  signalsOf(hostPids: readonly number[]): SignalRecord[];
  stop(): Promise<void>;
}

export async function startCrashRig(o: CrashRigOptions): Promise<CrashRig> {
  const prefix = `tcrash${randomBytes(4).toString('hex')}`;
  const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-crash-'));
  const fleet = await startFleet(o.fleet);
  const slack = await startFakeSlack();
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const doc = fleet.inventory();
  o.tweakInventory?.(doc);
  const v = validateInventory(doc);
  if (!v.inventory) throw new Error(`fleet inventory invalid: ${JSON.stringify(v.problems)}`);
  const inventory = v.inventory;
  // JSON is YAML: the worker reads it with the same loader as a hand-written inventory.yaml.
  const inventoryPath = join(dir, 'inventory.yaml');
  writeFileSync(inventoryPath, JSON.stringify(doc, null, 2));
  const signingSecret = randomBytes(16).toString('hex');
  // The bot's and the worker's signing keys, as files, each role its own (a worker acts only on what is
  // signed).
  const keys = fleet.keys;
  const { logger } = captureLogger('crash-bot', 'info');
  const botEnv = parseEnv(
    {
      GPU_MEDIC_MODE: 'http',
      SLACK_BOT_TOKEN: slack.botToken,
      SLACK_SIGNING_SECRET: signingSecret,
      SLACK_API_URL: slack.apiUrl,
      PORT: '0',
      REDIS_URL,
      GPU_MEDIC_PREFIX: prefix,
      GPU_MEDIC_INVENTORY: inventoryPath,
      ...WORKER_ENV,
      ...keys.botEnv,
    },
    'bot',
  );
  if (!botEnv.env) throw new Error(`bot env invalid: ${JSON.stringify(botEnv.problems)}`);
  const env = botEnv.env;
  const queues = new Map<string, Queue>();
  const workers: WorkerProc[] = [];

  const startWorker = async (extra: Record<string, string> = {}): Promise<WorkerProc> => {
    const chunks: string[] = [];
    const child: ChildProcess = await spawnMain(['worker'], {
      cwd: ROOT,
      // Only what a deployed worker gets: no Slack setting, nothing inherited from the test runner.
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/root',
        REDIS_URL,
        GPU_MEDIC_PREFIX: prefix,
        GPU_MEDIC_INVENTORY: inventoryPath,
        ...WORKER_ENV,
        ...keys.workerEnv,
        ...extra,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (c: Buffer): void => {
      chunks.push(c.toString());
      if (KEEP_LOGS) appendFileSync(join(dir, `worker-${child.pid ?? 0}.log`), c);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    let exited = false;
    const gone = new Promise<void>((r) => child.once('exit', () => r()));
    void gone.then(() => {
      exited = true;
    });
    const pid = child.pid;
    if (pid === undefined) throw new Error('worker did not start');
    const proc: WorkerProc = {
      pid,
      output: () => chunks.join(''),
      alive: () => !exited,
      async kill() {
        if (!exited) process.kill(pid, 'SIGKILL');
        await gone;
      },
      async stop() {
        if (exited) return;
        process.kill(pid, 'SIGTERM');
        const t = setTimeout(() => {
          if (!exited) process.kill(pid, 'SIGKILL');
        }, 10_000);
        await gone;
        clearTimeout(t);
      },
    };
    workers.push(proc);
    // Ready once it says its BullMQ workers run (bounded).
    const until = Date.now() + 30_000;
    while (!proc.output().includes('workers started')) {
      if (!proc.alive()) throw new Error(`worker exited at start:\n${proc.output()}`);
      if (Date.now() > until) {
        await proc.kill();
        throw new Error(`worker not ready in 30 s:\n${proc.output()}`);
      }
      await sleep(25);
    }
    return proc;
  };

  let bot = await startBot(env, inventory, logger.child({ role: 'bot' }));
  const log = new IncidentLog(redis, prefix);
  const rig: CrashRig = {
    fleet,
    slack,
    redis,
    prefix,
    inventory,
    inventoryPath,
    log,
    lock: new TargetLock(redis, prefix),
    approvals: new ApprovalStore(redis, prefix),
    get bot() {
      return bot;
    },
    eventsUrl: () => `http://127.0.0.1:${bot.port}/slack/events`,
    signingSecret,
    workers,
    startWorker,
    async restartBot() {
      await bot.stop();
      bot = await startBot(env, inventory, logger.child({ role: 'bot', generation: 2 }));
    },
    async slash(text, user = ALICE) {
      const r = await sendSlashCommand(rig.eventsUrl(), signingSecret, {
        text,
        user_id: user,
        channel_id: CHANNEL,
        response_url: slack.newResponseUrl(),
      });
      const ackText =
        typeof r.json === 'object' && r.json !== null && 'text' in r.json
          ? String((r.json as { text: unknown }).text)
          : '';
      const m = /incident `(inc_[a-z0-9_]+)`/.exec(ackText);
      return { status: r.status, ackText, incidentId: m?.[1] ?? null };
    },
    clickPayload(user, card, b) {
      return blockActionPayload({
        user,
        channel: CHANNEL,
        messageTs: card.ts,
        threadTs: card.thread_ts ?? card.ts,
        actionId: b.action_id,
        value: b.value,
        responseUrl: slack.newResponseUrl(),
      });
    },
    click(user, card, b, co = {}) {
      const { payload, ...sign } = co;
      return sendInteraction(rig.eventsUrl(), signingSecret, payload ?? rig.clickPayload(user, card, b), sign);
    },
    events: (id) => log.events(id),
    async waitEvent(id, type, pred = () => true, timeoutMs = 30_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const all = await log.events(id);
        const hit = ofType(all, type).find((e) => pred(e, all));
        if (hit) return hit;
        if (Date.now() > until)
          throw new Error(`no matching event in ${timeoutMs} ms; log: ${all.map((e) => e.type).join(', ')}`);
        await sleep(15);
      }
    },
    thread(id, done, timeoutMs = 30_000) {
      return slack.waitFor(() => {
        const parent = slack.messages(CHANNEL).find((m) => JSON.stringify(m.blocks ?? []).includes(id));
        if (!parent) return null;
        const t = slack.thread(CHANNEL, parent.ts);
        return done(t) ? t : null;
      }, timeoutMs);
    },
    async jobCounts(site = 'default') {
      let q = queues.get(site);
      if (!q) {
        q = new Queue(queueName(site), { connection: redis, prefix });
        queues.set(site, q);
      }
      return q.getJobCounts('active', 'waiting', 'delayed', 'completed', 'failed');
    },
    signalsOf(pids) {
      return fleet.signals().filter((s) => pids.includes(s.hostPid));
    },
    async stop() {
      for (const w of workers) await w.kill().catch(() => undefined);
      await bot.stop().catch(() => undefined);
      for (const q of queues.values()) await q.close().catch(() => undefined);
      await slack.close().catch(() => undefined);
      await fleet.stop();
      await removePrefix(redis, prefix);
      redis.disconnect();
      if (KEEP_LOGS) process.stdout.write(`worker logs kept in ${dir}\n`);
      else rmSync(dir, { recursive: true, force: true });
    },
  };
  return rig;
}
