/**
 * Both roles must stay up when Redis is not (its half; Slack's is slack-at-start): started while Redis is not
 * there, two ways: nothing listens on its port yet, and a server answers but fails every command
 * (`--requirepass`: NOAUTH). Each role is its own OS process (`dist/src/main.js bot|worker`, configured by
 * environment only). Each must stay up, say what it waits for (log and health file), and once a good Redis is
 * on that port serve: the bot logs that Redis is reachable now, acks and queues a signed slash command, the
 * worker takes the job and the incident finishes.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IncidentLog } from '../../src/incident/log.ts';
import { ROOT, spawnMain } from '../harness/dist.ts';
import { filledExampleInventory } from '../harness/example-inventory.ts';
import { startFakeSlack, type FakeSlack } from '../harness/slack/fake-slack-api.ts';
import { sendSlashCommand } from '../harness/slack/signed-request.ts';
import { freePort } from '../harness/sshd.ts';
import { startPrivateRedis, type PrivateRedis } from './lib/redis-server.ts';

interface Proc {
  output(): string;
  alive(): boolean;
  stop(): Promise<void>;
}

async function startRole(role: 'bot' | 'worker', env: Record<string, string>): Promise<Proc> {
  const chunks: string[] = [];
  const child: ChildProcess = await spawnMain([role], {
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
  return {
    output: () => chunks.join(''),
    alive: () => !exited,
    async stop() {
      if (!exited) child.kill('SIGKILL');
      await gone;
    },
  };
}

/** The health file's text (each check's reason), or '' before the first write. */
function healthProblems(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

const OUTAGES = [
  { name: 'nothing listens on its port', failing: false },
  { name: 'a server answers but fails every command (NOAUTH)', failing: true },
];

describe.each(OUTAGES)('bot and worker started while Redis is not usable: $name', (outage) => {
  let slack: FakeSlack;
  let port: number;
  let bad: PrivateRedis | null = null;
  let good: PrivateRedis | null = null;
  let bot: Proc;
  let worker: Proc;
  const prefix = `rstart${randomBytes(4).toString('hex')}`;
  const secret = randomBytes(16).toString('hex');
  const botHealth = join('/tmp', `${prefix}-bot-health.json`);
  const workerHealth = join('/tmp', `${prefix}-worker-health.json`);

  beforeAll(async () => {
    slack = await startFakeSlack();
    port = await freePort();
    // The processes are not given this password: every command they send fails with NOAUTH.
    const password = randomBytes(8).toString('hex');
    if (outage.failing)
      bad = await startPrivateRedis({ port, args: ['--requirepass', password], probePassword: password });
    const common = {
      REDIS_URL: `redis://127.0.0.1:${port}`,
      GPU_MEDIC_PREFIX: prefix,
      GPU_MEDIC_INVENTORY: filledExampleInventory(),
      GPU_MEDIC_HEALTH_INTERVAL_SEC: '1',
      LOG_LEVEL: 'info',
    };
    bot = await startRole('bot', {
      ...common,
      GPU_MEDIC_MODE: 'http',
      SLACK_BOT_TOKEN: slack.botToken,
      SLACK_SIGNING_SECRET: secret,
      SLACK_API_URL: slack.apiUrl,
      PORT: '0',
      GPU_MEDIC_HEALTH_FILE: botHealth,
    });
    worker = await startRole('worker', { ...common, GPU_MEDIC_HEALTH_FILE: workerHealth });
  }, 60_000);

  afterAll(async () => {
    await bot?.stop();
    await worker?.stop();
    await bad?.destroy();
    await good?.destroy();
    await slack?.close();
    rmSync(botHealth, { force: true });
    rmSync(workerHealth, { force: true });
  }, 60_000);

  it('both stay up saying they wait for Redis; once Redis is there the bot logs that it is reachable, queues a signed command and the worker finishes it', async () => {
    await expect.poll(() => bot.output() + (bot.alive() ? '' : ' EXITED'), { timeout: 60_000 }).toMatch(/Redis/);
    await expect.poll(() => healthProblems(botHealth), { timeout: 60_000 }).toMatch(/waiting for Redis/);
    await expect.poll(() => healthProblems(workerHealth), { timeout: 60_000 }).toMatch(/waiting for Redis/);
    expect(bot.alive(), bot.output().slice(-2000)).toBe(true);
    expect(worker.alive(), worker.output().slice(-2000)).toBe(true);
    expect(bot.output()).toMatch(/waiting for Redis|Redis not reachable/);
    expect(worker.output()).toMatch(/waiting for Redis|Redis not reachable/);

    expect(bot.output()).not.toMatch(/Redis reachable now/);
    await bad?.destroy();
    bad = null;
    good = await startPrivateRedis({ port });

    const started = await (async () => {
      for (;;) {
        const m = /"port":(\d+)[^\n]*"msg":"bot started"/.exec(bot.output());
        if (m) return Number(m[1]);
        if (!bot.alive()) throw new Error(`bot exited:\n${bot.output().slice(-2000)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    // The wait the bot logged at start is over, and its log says so, so the operator knows it works now.
    await expect
      .poll(() => bot.output(), { timeout: 60_000 })
      .toMatch(/"msg":"Redis reachable now \(redis:\/\/127\.0\.0\.1:\d+\): commands are queued from now on"/);
    const url = `http://127.0.0.1:${started}/slack/events`;
    let id: string | undefined;
    await expect
      .poll(
        async () => {
          const r = await sendSlashCommand(url, secret, {
            text: 'status kpro5',
            user_id: 'U0REQUEST1',
            channel_id: 'C0ONCALL01',
            response_url: slack.newResponseUrl(),
          });
          const ack = String((r.json as { text?: unknown } | null)?.text ?? '');
          id = /incident `(inc_[a-z0-9_]+)`/.exec(ack)?.[1];
          return id ? 'queued' : ack;
        },
        { timeout: 60_000, interval: 500 },
      )
      .toBe('queued');
    const redis = new Redis(good.url);
    try {
      const log = new IncidentLog(redis, prefix);
      await expect
        .poll(async () => (await log.events(String(id))).some((e) => e.type === 'finished'), { timeout: 90_000 })
        .toBe(true);
    } finally {
      redis.disconnect();
    }
    await expect.poll(() => healthProblems(botHealth), { timeout: 30_000 }).not.toMatch(/waiting for Redis/);
    await expect.poll(() => healthProblems(workerHealth), { timeout: 30_000 }).not.toMatch(/waiting for Redis/);
    expect(bot.alive()).toBe(true);
    expect(worker.alive()).toBe(true);
  }, 240_000);
});
