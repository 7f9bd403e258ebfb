import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, spawnMain } from '../harness/dist.ts';
import { filledExampleInventory } from '../harness/example-inventory.ts';
import { startFakeSlack } from '../harness/slack/fake-slack-api.ts';
import { REDIS_URL, newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';
import { freePort } from '../harness/sshd.ts';

/** `gpu-medic worker` as a real process with GPU_MEDIC_METRICS_PORT set: its endpoint answers, labelled by role. */
const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-metrics-'));
const prefix = randomPrefix('metrics');
const redis = newRedis();

afterAll(async () => {
  await removePrefix(redis, prefix);
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
});

/** `dist/src/main.js <role>` with `env` (PATH, HOME, Redis and the prefix added); resolves once it logged `started`. */
async function startRole(
  role: 'worker' | 'bot',
  env: Record<string, string>,
  started: string,
): Promise<{ pid: number; out: string[]; stop(): Promise<void> }> {
  const out: string[] = [];
  const child = await spawnMain([role], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      REDIS_URL,
      GPU_MEDIC_PREFIX: prefix,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (c: Buffer) => out.push(c.toString()));
  child.stderr?.on('data', (c: Buffer) => out.push(c.toString()));
  const gone = new Promise<void>((r) => child.once('exit', () => r()));
  const stop = async (): Promise<void> => {
    child.kill('SIGKILL');
    await gone;
  };
  for (let i = 0; i < 600 && !out.join('').includes(started); i++) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`${role} exited ${child.exitCode}:\n${out.join('')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { pid: child.pid ?? 0, out, stop };
}

describe('the metrics endpoint of a started role', () => {
  it('worker: GET /metrics on the configured port and loopback, with the queue gauge and process metrics, labelled role="worker"', async () => {
    const inventory = join(dir, 'inventory.yaml');
    writeFileSync(
      inventory,
      `defaults:\n  user: root\n  keyFile: ${join(dir, 'none')}\nhosts:\n  - id: kpro5\n    address: 192.0.2.5\n    hostKeys: ['SHA256:${'A'.repeat(43)}']\n`,
    );
    const port = await freePort();
    // The endpoint is up before the workers are; their queue gauge follows once they started.
    const worker = await startRole(
      'worker',
      {
        GPU_MEDIC_INVENTORY: inventory,
        GPU_MEDIC_HEALTH_FILE: join(dir, 'worker.health.json'),
        GPU_MEDIC_METRICS_PORT: String(port),
      },
      'workers started',
    );
    const out = worker.out;
    try {
      const res = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text).toMatch(/^gpu_medic_queue_jobs\{site="default",state="waiting",role="worker"\} 0$/m);
      expect(text).toMatch(/^gpu_medic_process_resident_memory_bytes\{role="worker"\} \d+/m);
      expect(text).toMatch(/^gpu_medic_nodejs_eventloop_lag_seconds\{role="worker"\} /m);
      expect(text).toContain('# TYPE gpu_medic_ssh_errors_total counter');
      expect(out.join('')).toMatch(/metrics endpoint listening/);
      // Listening on loopback only (the default bind): /proc/net/tcp's LISTEN rows for that port.
      const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
      const listening = [readFileSync('/proc/net/tcp', 'utf8'), readFileSync('/proc/net/tcp6', 'utf8')]
        .join('\n')
        .split('\n')
        .map((l) => l.trim().split(/\s+/))
        .filter((f) => f[1]?.endsWith(`:${hexPort}`) && f[3] === '0A')
        .map((f) => f[1]);
      expect(listening).toEqual([`0100007F:${hexPort}`]);
    } finally {
      await worker.stop();
    }
  }, 90_000);

  it('bot: its V8 heap (used, total, external) and its resident set now and at its peak, read at scrape time', async () => {
    const slack = await startFakeSlack();
    const port = await freePort();
    const bot = await startRole(
      'bot',
      {
        GPU_MEDIC_INVENTORY: filledExampleInventory(),
        GPU_MEDIC_HEALTH_FILE: join(dir, 'bot.health.json'),
        GPU_MEDIC_MODE: 'http',
        SLACK_BOT_TOKEN: slack.botToken,
        SLACK_SIGNING_SECRET: 'f'.repeat(32),
        SLACK_API_URL: slack.apiUrl,
        PORT: '0',
        GPU_MEDIC_METRICS_PORT: String(port),
      },
      'bot started',
    );
    try {
      const pid = bot.pid;
      const value = (text: string, name: string): number => {
        const m = new RegExp(`^${name}\\{role="bot"\\} (\\d+(?:\\.\\d+)?(?:e\\+\\d+)?)$`, 'm').exec(text);
        if (!m?.[1]) throw new Error(`no ${name} in:\n${text.slice(0, 4000)}`);
        return Number(m[1]);
      };
      // /proc/<pid>/status of the bot, KiB, read right around the scrape.
      const procKiB = (field: string): number =>
        Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
      const hwmBefore = procKiB('VmHWM');
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const hwmAfter = procKiB('VmHWM');
      const heapUsed = value(text, 'gpu_medic_nodejs_heap_size_used_bytes');
      const heapTotal = value(text, 'gpu_medic_nodejs_heap_size_total_bytes');
      expect(heapUsed).toBeGreaterThan(1 << 20);
      expect(heapTotal).toBeGreaterThanOrEqual(heapUsed);
      expect(value(text, 'gpu_medic_nodejs_external_memory_bytes')).toBeGreaterThan(0);
      const rss = value(text, 'gpu_medic_process_resident_memory_bytes');
      const peak = value(text, 'gpu_medic_process_resident_memory_peak_bytes');
      // The peak is VmHWM, as the bench reads it from outside: between the readings before and after.
      expect(peak).toBeGreaterThanOrEqual(hwmBefore * 1024);
      expect(peak).toBeLessThanOrEqual(hwmAfter * 1024);
      expect(peak).toBeGreaterThanOrEqual(rss);
      expect(heapTotal).toBeLessThan(peak);
    } finally {
      await bot.stop();
      await slack.close();
    }
  }, 90_000);
});
