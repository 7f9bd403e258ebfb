/**
 * What a slash command's ack costs in Redis, counted with Redis's own MONITOR on the real bot
 * (Bolt's HTTP receiver, the replay guard, the commands) against real Redis. A round trip is one
 * command, or one MULTI … EXEC block (ioredis sends a MULTI as one write); commands that Lua
 * scripts run are left out (they run inside the EVAL that called them).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
import { Queue } from 'bullmq';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBot, type Bot } from '../../src/bot.ts';
import { parseEnv } from '../../src/config/env.ts';
import { validateInventory } from '../../src/config/load-inventory.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { createLogger } from '../../src/logger.ts';
import { queueName } from '../../src/queue/jobs.ts';
import { filledExampleInventoryText } from '../harness/example-inventory.ts';
import { writeTestKeys } from '../harness/keys.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';
import { startFakeSlack, type FakeSlack } from '../harness/slack/fake-slack-api.ts';
import { sendSlashCommand } from '../harness/slack/signed-request.ts';

interface Seen {
  source: string;
  args: string[];
}

/** The bot's command connection's round trips among `seen`: the connection that wrote the replay record. */
function roundTrips(seen: readonly Seen[], prefix: string): string[][] {
  const source = seen.find(
    (c) => c.args[0]?.toLowerCase() === 'set' && c.args[1]?.startsWith(`${prefix}:replay:`),
  )?.source;
  const trips: string[][] = [];
  let open: string[] | null = null;
  for (const c of seen) {
    if (c.source !== source) continue;
    const name = (c.args[0] ?? '').toLowerCase();
    if (open) {
      open.push(name);
      if (name === 'exec' || name === 'discard') open = null;
    } else if (name === 'multi') {
      open = [name];
      trips.push(open);
    } else trips.push([name]);
  }
  return trips;
}

describe('a slash command ack against real Redis (MONITOR)', () => {
  const redis = newRedis();
  const prefix = randomPrefix('ackredis');
  const signingSecret = 'ack-redis-signing-secret';
  let monitor: ChildProcess;
  let slack: FakeSlack;
  let bot: Bot;
  let url: string;
  const seen: Seen[] = [];

  beforeAll(async () => {
    slack = await startFakeSlack();
    const keys = writeTestKeys(tmpdir(), prefix);
    const e = parseEnv(
      {
        ...keys.botEnv,
        GPU_MEDIC_MODE: 'http',
        SLACK_BOT_TOKEN: slack.botToken,
        SLACK_SIGNING_SECRET: signingSecret,
        SLACK_API_URL: slack.apiUrl,
        PORT: '0',
        REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
        GPU_MEDIC_PREFIX: prefix,
      },
      'bot',
    );
    if (!e.env) throw new Error(`env invalid: ${JSON.stringify(e.problems)}`);
    const v = validateInventory(parse(filledExampleInventoryText()));
    if (!v.inventory) throw new Error(`inventory invalid: ${JSON.stringify(v.problems)}`);
    bot = await startBot(e.env, v.inventory, createLogger({ name: 'ack-redis', level: 'silent' }));
    url = `http://127.0.0.1:${bot.port}/slack/events`;
    // redis-cli's MONITOR: each line `<time> [<db> <client addr>] "<command>" "<arg>" …`, in execution order.
    const started = new Promise<void>((resolve) => {
      monitor = spawn('redis-cli', ['-u', process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', 'monitor'], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      createInterface({ input: monitor.stdout as NodeJS.ReadableStream }).on('line', (line) => {
        if (line === 'OK') resolve();
        const m = /^\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
        if (!m || m[1] === 'lua') return;
        const args = [...(m[2] ?? '').matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((a) => a[1] ?? '');
        seen.push({ source: m[1] ?? '', args });
      });
    });
    await started;
  }, 30_000);

  afterAll(async () => {
    monitor?.kill();
    await bot?.stop();
    await slack?.close();
    await removePrefix(redis, prefix);
    redis.disconnect();
  });

  /** Sends one command and returns the ack's text and the bot's round trips from sending it to a marker after its ack. */
  async function slash(text: string): Promise<{ ack: string; trips: string[][] }> {
    seen.length = 0;
    const r = await sendSlashCommand(url, signingSecret, {
      command: '/gpu',
      text,
      user_id: 'U0REQUEST1',
      channel_id: 'C0ONCALL01',
      response_url: slack.newResponseUrl(),
    });
    expect(r.status).toBe(200);
    // MONITOR delivers in execution order: once this marker is seen, every command before it has been.
    const marker = `${prefix}:marker:${Date.now()}`;
    await redis.exists(marker);
    for (let i = 0; i < 200 && !seen.some((c) => c.args[1] === marker); i++)
      await new Promise((r) => setTimeout(r, 10));
    const ack = typeof r.json === 'object' && r.json !== null && 'text' in r.json ? String(r.json.text) : r.body;
    return { ack, trips: roundTrips(seen, prefix) };
  }

  it('`/gpu help` costs one round trip (the replay record); `/gpu status kpro5` one more: the incident, its event and its job in one MULTI', async () => {
    // A first command loads BullMQ's scripts and checks its Redis version: once per connection, not per ack.
    await slash('status kpro5');
    const help = await slash('help');
    expect(help.ack).toMatch(/status/);
    expect(help.trips).toEqual([['set']]);

    const status = await slash('status kpro5');
    const id = /incident `(inc_[a-z0-9_]+)`/.exec(status.ack)?.[1];
    expect(id).toBeDefined();
    expect(status.trips).toHaveLength(2);
    expect(status.trips[0]).toEqual(['set']);
    const tx = status.trips[1] ?? [];
    // Two scripts in the MULTI: the incident (meta, indexes, its first event, the dirty mark) and
    // BullMQ's job insert. Seven separate commands in a MULTI cost the bot about 50-65 µs of CPU
    // against about 20 µs for this (the ack's CPU): each queued command is a reply and a promise of its own.
    expect(tx).toHaveLength(4);
    expect(tx[0]).toBe('multi');
    expect(tx.slice(1, 3).every((n) => n === 'evalsha' || n === 'eval')).toBe(true);
    expect(tx.at(-1)).toBe('exec');

    // Everything that MULTI carried is there: the incident, its `requested` event, its job.
    const log = new IncidentLog(redis, prefix);
    expect((await log.meta(id ?? ''))?.targets).toEqual(['kpro5']);
    expect((await log.events(id ?? '')).map((ev) => ev.type)).toEqual(['requested']);
    const queue = new Queue(queueName('lab'), { connection: redis, prefix });
    try {
      expect((await queue.getJob(`${id}-lab`))?.data).toEqual({
        kind: 'status',
        incidentId: id,
        machines: ['kpro5'],
      });
    } finally {
      await queue.close();
    }
  }, 30_000);
});
