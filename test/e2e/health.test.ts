import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runHealthCommand } from '../../src/cli/health-command.ts';
import { startPrivateRedis, type PrivateRedis } from '../faults/lib/redis-server.ts';
import { ROOT, spawnMain } from '../harness/dist.ts';
import { filledExampleInventory } from '../harness/example-inventory.ts';
import type { FakeSlack } from '../harness/slack/fake-slack-api.ts';
import { startSlackWithSocketMode, type FakeSocketMode } from '../harness/slack/fake-socket-mode.ts';

/** The example inventory with its placeholder fingerprints filled in, as an operator leaves it. */
const EXAMPLE_FILLED = filledExampleInventory();

/** The real entry point as a separate process, as the container runs it. */
async function startProcess(
  role: 'bot' | 'worker',
  env: Record<string, string>,
): Promise<{ child: ChildProcess; output: () => string; gone: Promise<void> }> {
  const chunks: string[] = [];
  const child = await spawnMain([role], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      GPU_MEDIC_INVENTORY: EXAMPLE_FILLED,
      GPU_MEDIC_HEALTH_INTERVAL_SEC: '1',
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (c: Buffer) => chunks.push(c.toString()));
  child.stderr?.on('data', (c: Buffer) => chunks.push(c.toString()));
  const gone = new Promise<void>((r) => child.once('exit', () => r()));
  return { child, output: () => chunks.join(''), gone };
}

/** `gpu-medic health <role>` against a heartbeat file: its exit code and line. */
async function health(role: string, file: string): Promise<{ code: number; line: string }> {
  let line = '';
  const out = new Writable({ write: (c: Buffer, _e, cb) => ((line += c.toString()), cb()) });
  const code = await runHealthCommand([role], { GPU_MEDIC_HEALTH_FILE: file }, out);
  return { code, line: line.trim() };
}

/** Polls the healthcheck until `want` holds (the heartbeat beats every second here). */
async function healthUntil(
  role: string,
  file: string,
  want: (h: { code: number; line: string }) => boolean,
  timeoutMs = 20_000,
) {
  const until = Date.now() + timeoutMs;
  let last = { code: -1, line: '' };
  while (Date.now() < until) {
    last = await health(role, file);
    if (want(last)) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`health never matched within ${timeoutMs} ms; last: ${JSON.stringify(last)}`);
}

describe('healthchecks report what is wrong, from the real processes (heartbeat every 1 s here)', () => {
  let dir: string;
  let redis: PrivateRedis;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gpu-medic-health-'));
    redis = await startPrivateRedis();
  });
  afterAll(async () => {
    await redis?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  it('worker: healthy; Redis down → unhealthy naming Redis; back → healthy; hung (SIGSTOP) → stale; stopped → no heartbeat', async () => {
    const file = join(dir, 'worker.json');
    const w = await startProcess('worker', {
      REDIS_URL: redis.url,
      GPU_MEDIC_PREFIX: 'health-test',
      GPU_MEDIC_HEALTH_FILE: file,
    });
    try {
      // The first beat waits for the process to start (module loading): seconds on a loaded machine.
      const ok = await healthUntil('worker', file, (h) => h.code === 0, 90_000);
      expect(ok.line).toMatch(new RegExp(`^worker \\(pid ${w.child.pid}\\) ok \\(\\d+ s ago\\): redis, queues$`));

      await redis.stop('term');
      const down = await healthUntil('worker', file, (h) => h.code === 1);
      expect(down.line).toMatch(/unhealthy .*redis: /);

      await redis.start();
      await healthUntil('worker', file, (h) => h.code === 0);

      // A process that stops answering stops writing: three missed beats (+5 s) and it is stale.
      w.child.kill('SIGSTOP');
      const stale = await healthUntil('worker', file, (h) => h.code === 1, 20_000);
      expect(stale.line).toMatch(/stale: last heartbeat \d+ s ago, expected every 1 s/);
      w.child.kill('SIGCONT');
      await healthUntil('worker', file, (h) => h.code === 0);

      w.child.kill('SIGTERM');
      await w.gone;
      expect(existsSync(file)).toBe(false);
      expect((await health('worker', file)).line).toContain('no heartbeat at');
    } finally {
      w.child.kill('SIGKILL');
      await w.gone;
    }
  }, 180_000);

  describe('bot in Socket Mode', () => {
    let slack: FakeSlack;
    let socket: FakeSocketMode;
    let close: () => Promise<void>;
    beforeAll(async () => {
      ({ slack, socket, close } = await startSlackWithSocketMode());
    });
    afterAll(() => close());

    it('healthy while connected; Slack gone → unhealthy naming Socket Mode; Redis down → the outbox and Redis named', async () => {
      const file = join(dir, 'bot.json');
      const b = await startProcess('bot', {
        REDIS_URL: redis.url,
        GPU_MEDIC_PREFIX: 'health-test',
        GPU_MEDIC_HEALTH_FILE: file,
        GPU_MEDIC_MODE: 'socket',
        SLACK_BOT_TOKEN: slack.botToken,
        SLACK_APP_TOKEN: socket.appToken,
        SLACK_API_URL: slack.apiUrl,
      });
      try {
        const ok = await healthUntil('bot', file, (h) => h.code === 0, 90_000);
        expect(ok.line).toMatch(/^bot \(pid \d+\) ok \(\d+ s ago\): redis, outbox, slack$/);
        expect(socket.connectedCount()).toBe(1);

        // Slack refuses new connections after dropping this one: the bot cannot reconnect.
        slack.failNext('apps.connections.open', 1000, { error: 'internal_error' });
        socket.refreshAll();
        const lost = await healthUntil('bot', file, (h) => h.code === 1);
        expect(lost.line).toMatch(/slack: Socket Mode (reconnecting|disconnected|disconnecting|connecting) for \d+ s/);

        slack.failNext('apps.connections.open', 0, { error: 'internal_error' });
        slack.reset();
        await redis.stop('term');
        const down = await healthUntil(
          'bot',
          file,
          (h) => /redis: /.test(h.line) && /outbox: no completed outbox pass/.test(h.line),
          30_000,
        );
        expect(down.code).toBe(1);
      } finally {
        if (!redis.running()) await redis.start();
        b.child.kill('SIGKILL');
        await b.gone;
      }
    }, 180_000);
  });
});
