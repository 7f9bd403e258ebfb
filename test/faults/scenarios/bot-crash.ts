/**
 * Messages exactly once through a bot crash. The BOT runs as its own OS process
 * (`node dist/src/main.js bot`, the compiled entry point, configured only by env), renders a seeded incident into
 * the fake Slack, and is SIGKILLed at one point of the post/record sequence of one message:
 * - `before-post`: the chat.postMessage reached Slack but was never performed (the process died
 *   first, as far as Slack can tell);
 * - `after-post`: Slack stored the message, the bot died before it read the answer, so its `ts`
 *   was never recorded;
 * - `after-record`: the `ts` is in Redis and the bot died as its next Slack call went out.
 * The fake Slack performs (or not) the call, then the test kills the process synchronously from
 * inside the request, so the point is hit exactly; the state at the kill is checked (message in
 * Slack or not, ref in Redis or not). A new bot process on the same Redis prefix then finishes the
 * thread, which must equal the rendered log: each message exactly once, in order.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { AnyEvent } from '../../../src/incident/all-events.ts';
import { IncidentLog } from '../../../src/incident/log.ts';
import { renderThread } from '../../../src/render/thread.ts';
import { ROOT, spawnMain } from '../../harness/dist.ts';
import { filledExampleInventory } from '../../harness/example-inventory.ts';
import { removePrefix, REDIS_URL } from '../../harness/redis-prefix.ts';
import { startFakeSlack, type FakeSlack } from '../../harness/slack/fake-slack-api.ts';
import { checker, emptyFigures, pollUntil, type Figures } from '../lib/figures.ts';
import { judgeThread } from '../lib/threads.ts';

export type CrashPoint = 'before-post' | 'after-post' | 'after-record';
const CRASH_POINTS: readonly CrashPoint[] = ['before-post', 'after-post', 'after-record'];

const CHANNEL = 'C0ONCALL01';
const TARGETS = ['kpro5', 'kpro6', 'ct129'];

interface BotProc {
  pid: number;
  output(): string;
  alive(): boolean;
  kill(): void;
  gone: Promise<void>;
}

async function startBotProcess(env: Record<string, string>): Promise<BotProc> {
  const chunks: string[] = [];
  const child: ChildProcess = await spawnMain(['bot'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (c: Buffer) => chunks.push(c.toString()));
  child.stderr?.on('data', (c: Buffer) => chunks.push(c.toString()));
  let exited = false;
  const gone = new Promise<void>((r) => child.once('exit', () => r()));
  void gone.then(() => {
    exited = true;
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error('bot did not start');
  const proc: BotProc = {
    pid,
    gone,
    output: () => chunks.join(''),
    alive: () => !exited,
    kill: () => {
      if (!exited) process.kill(pid, 'SIGKILL');
    },
  };
  return (async () => {
    const ok = await pollUntil(() => proc.output().includes('bot started') || !proc.alive(), 30_000, 25);
    if (!ok || !proc.alive()) {
      proc.kill();
      await gone;
      throw new Error(`bot process not ready:\n${proc.output().slice(-2000)}`);
    }
    return proc;
  })();
}

/** A status incident whose thread is a parent and one reply per target, plus the parent's final update. */
async function seedIncident(log: IncidentLog): Promise<string> {
  const id = `inc_crash_${randomBytes(5).toString('hex')}`;
  const at = new Date().toISOString();
  await log.create({
    id,
    kind: 'status',
    requester: 'U0REQUEST1',
    channel: CHANNEL,
    targets: TARGETS,
    text: `status ${TARGETS.join(' ')}`,
    reason: null,
    createdAt: at,
  });
  const events: AnyEvent[] = [
    { type: 'requested', at },
    { type: 'started', at, worker: 'w1' },
    ...TARGETS.map(
      (machineId): AnyEvent => ({
        type: 'machine_error',
        at,
        machineId,
        code: 'connect_failed',
        message: `${machineId}: connection refused`,
        commands: [],
      }),
    ),
    { type: 'finished', at, outcome: 'failed', durationMs: 5 },
  ];
  for (const e of events) await log.append(id, e);
  return id;
}

const parentsOf = (slack: FakeSlack, id: string) =>
  slack.messages(CHANNEL).filter((m) => JSON.stringify(m.blocks ?? []).includes(id));
/** Thread parents of the incident (1 unless doubled). */
const postsOf = (slack: FakeSlack, id: string): number => parentsOf(slack, id).length;
/** Every message of the incident in Slack: its parents and all their replies. */
const storedOf = (slack: FakeSlack, id: string): number =>
  parentsOf(slack, id).reduce((n, p) => n + slack.thread(CHANNEL, p.ts).length, 0);

export interface BotCrashOptions {
  /** Which message of the thread's post sequence the crash hits (1: the parent, 2: the first reply, …). */
  messages: number[];
  /** Runs per (point, message). */
  runs: number;
}

/** SIGKILLs a real bot process at each point of the post/record sequence and checks every thread afterwards. */
export async function botCrash(o: BotCrashOptions): Promise<Figures & { duplicates: number; crashes: number }> {
  const f = { ...emptyFigures(), duplicates: 0, crashes: 0 };
  const check = checker(f);
  const slack = await startFakeSlack();
  const redis = new Redis(REDIS_URL);
  const prefix = `crashbot${randomBytes(4).toString('hex')}`;
  const env = {
    GPU_MEDIC_MODE: 'http',
    SLACK_BOT_TOKEN: slack.botToken,
    SLACK_SIGNING_SECRET: randomBytes(16).toString('hex'),
    SLACK_API_URL: slack.apiUrl,
    PORT: '0',
    REDIS_URL,
    GPU_MEDIC_PREFIX: prefix,
    GPU_MEDIC_INVENTORY: filledExampleInventory(),
    GPU_MEDIC_HEALTH_FILE: join('/tmp', `${prefix}-health.json`),
    LOG_LEVEL: 'info',
  };
  const log = new IncidentLog(redis, prefix);
  const procs: BotProc[] = [];
  try {
    for (const point of CRASH_POINTS) {
      for (const nth of o.messages) {
        for (let run = 0; run < o.runs; run++) {
          const what = `${point} of message ${nth} (run ${run + 1})`;
          f.runs++;
          const bot = await startBotProcess(env);
          procs.push(bot);
          const id = await seedIncident(log);
          // The parent carries the incident id in its blocks; replies name the parent's ts.
          const parentTs = (): string | undefined =>
            slack.messages(CHANNEL).find((m) => JSON.stringify(m.blocks ?? []).includes(id))?.ts;
          const ofIncident = (body: Record<string, unknown>): boolean =>
            JSON.stringify(body.blocks ?? '').includes(id) ||
            (body.thread_ts !== undefined && body.thread_ts === parentTs());
          // Which post is the nth of this incident: counted as they arrive; for after-record, the call after it.
          let seen = 0;
          let nextCall = false;
          let state: { inSlack: number } | null = null;
          const killed = new Promise<void>((resolve) => {
            slack.interceptNext({
              method: '*',
              match: (b, method) => {
                if (nextCall) return true;
                if (method !== 'chat.postMessage' || !ofIncident(b)) return false;
                seen++;
                if (seen < nth) return false;
                if (point === 'after-record') {
                  nextCall = true;
                  return false;
                }
                return true;
              },
              perform: point === 'after-post',
              then: () => {
                bot.kill();
                state = { inSlack: storedOf(slack, id) };
                resolve();
              },
            });
          });
          const hit = await Promise.race([
            killed.then(() => true),
            new Promise<boolean>((r) => setTimeout(() => r(false), 20_000)),
          ]);
          bot.kill();
          await bot.gone;
          f.faultsInjected++;
          if (!check(hit, `${what}: the crash point was never reached:\n${bot.output().slice(-1500)}`)) continue;
          f.crashes++;
          const refs = await log.slackRefs(id);
          const s = state as { inSlack: number } | null;
          // The state at the kill proves which point was hit.
          const wantInSlack = point === 'before-post' ? nth - 1 : nth;
          check(
            s !== null && s.inSlack === wantInSlack,
            `${what}: ${s?.inSlack} messages in Slack at the kill, expected ${wantInSlack}`,
          );
          check(
            refs.size === (point === 'after-record' ? nth : nth - 1),
            `${what}: ${refs.size} refs recorded at the kill, expected ${point === 'after-record' ? nth : nth - 1}`,
          );

          const again = await startBotProcess(env);
          procs.push(again);
          const meta = await log.meta(id);
          const views = meta ? renderThread(meta, await log.events(id)) : [];
          const threadLength = (): number =>
            slack.thread(
              CHANNEL,
              slack.messages(CHANNEL).find((m) => JSON.stringify(m.blocks ?? []).includes(id))?.ts ?? '',
            ).length;
          // Settled when the log is rendered (out of the dirty set) and the thread is at least complete.
          await pollUntil(
            async () => (await redis.sismember(`${prefix}:dirty`, id)) === 0 && threadLength() >= views.length,
            30_000,
            100,
          );
          const verdict = await judgeThread({ redis, prefix, slack }, id);
          const posted = threadLength();
          if (process.env.GPU_MEDIC_CRASH_DEBUG === '1') process.stderr.write(`${what}: ${verdict.detail}\n`);
          const dup = Math.max(0, posted - views.length) + Math.max(0, postsOf(slack, id) - 1);
          f.duplicates += dup;
          f.messagesLost += verdict.messagesOff;
          check(verdict.threadExact, `${what}: thread not exact after the restart: ${verdict.detail}`);
          check(dup === 0, `${what}: ${dup} message(s) posted twice`);
          again.kill();
          await again.gone;
        }
      }
    }
  } finally {
    for (const p of procs) p.kill();
    await Promise.all(procs.map((p) => p.gone));
    await slack.close();
    await removePrefix(redis, prefix);
    redis.disconnect();
  }
  return f;
}
