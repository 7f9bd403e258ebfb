/**
 * The bot's memory (issue 26): in HTTP mode it never constructs a Socket Mode client, yet Bolt's
 * index and its App require SocketModeReceiver at load, and with it @slack/socket-mode, ws and npm
 * undici (5 MiB of live V8 heap; V8 lets the old generation grow to a multiple of the live heap
 * before a full collection, so the bot's peak after command bursts moved by far more, bench/README.md).
 * The real bot process (`dist/src/main.js bot`) in HTTP mode, with a preloaded module that records
 * every package the CommonJS loader loads, against the fake Slack.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, spawnMain } from '../harness/dist.ts';
import { filledExampleInventory } from '../harness/example-inventory.ts';
import { startFakeSlack, type FakeSlack } from '../harness/slack/fake-slack-api.ts';

describe('the bot in HTTP mode', () => {
  let slack: FakeSlack;
  let child: ChildProcess;
  const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-http-modules-'));
  const loaded = join(dir, 'loaded');
  let output = '';

  beforeAll(async () => {
    slack = await startFakeSlack();
    const hook = join(dir, 'record-loads.mjs');
    writeFileSync(
      hook,
      `import { appendFileSync } from 'node:fs';
import Module from 'node:module';
// Every file the CommonJS loader compiles (Bolt and its dependencies are CommonJS).
const compile = Module.prototype._compile;
Module.prototype._compile = function (content, filename) {
  appendFileSync(${JSON.stringify(loaded)}, filename + '\\n');
  return compile.call(this, content, filename);
};
`,
    );
    child = await spawnMain(['bot'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/root',
        NODE_OPTIONS: `--import=${hook}`,
        REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
        GPU_MEDIC_PREFIX: `httpmods${randomBytes(4).toString('hex')}`,
        GPU_MEDIC_INVENTORY: filledExampleInventory(),
        GPU_MEDIC_HEALTH_FILE: join(dir, 'health.json'),
        GPU_MEDIC_MODE: 'http',
        SLACK_BOT_TOKEN: slack.botToken,
        SLACK_SIGNING_SECRET: randomBytes(16).toString('hex'),
        SLACK_API_URL: slack.apiUrl,
        PORT: '0',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout?.on('data', (c: Buffer) => {
      output += c.toString();
    });
    child.stderr?.on('data', (c: Buffer) => {
      output += c.toString();
    });
  }, 60_000);

  afterAll(async () => {
    if (child && child.exitCode === null) {
      const gone = new Promise<void>((r) => child.once('exit', () => r()));
      child.kill('SIGKILL');
      await gone;
    }
    await slack?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('loads Bolt but not Socket Mode, ws or npm undici', async () => {
    await expect.poll(() => output, { timeout: 30_000 }).toMatch(/"msg":"bot started"/);
    await expect.poll(() => slack.calls('auth.test').length, { timeout: 30_000 }).toBeGreaterThan(0);
    const packages = new Set(
      readFileSync(loaded, 'utf8')
        .split('\n')
        .map((f) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(f)?.[1])
        .filter((p): p is string => p !== undefined),
    );
    expect(packages.has('@slack/bolt')).toBe(true);
    expect([...packages].filter((p) => ['@slack/socket-mode', 'ws', 'undici'].includes(p))).toEqual([]);
  }, 60_000);
});
