/**
 * The bot's memory at start (issue 26): its first Web API call (auth.test, retried until Slack
 * answers) went through fetch, which went through npm undici's dispatcher (Bolt loads it with Socket
 * Mode, and it makes itself fetch's global dispatcher), whose first connection compiles its HTTP
 * parser to WebAssembly on the main thread: a 30–40 MiB transient, most of the bot's start-up
 * peak (bench/README.md, bot memory). The real bot process (`dist/src/main.js bot`), with a
 * preloaded module that records every synchronous WebAssembly compile, against the fake Slack.
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

describe("the bot's Web API calls at start", () => {
  let slack: FakeSlack;
  let child: ChildProcess;
  const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-wasm-'));
  const counted = join(dir, 'wasm-compiles');
  let output = '';

  beforeAll(async () => {
    slack = await startFakeSlack();
    const hook = join(dir, 'count-wasm.mjs');
    writeFileSync(
      hook,
      `import { appendFileSync } from 'node:fs';
Error.stackTraceLimit = 60;
// undici compiles its HTTP parser synchronously (new WebAssembly.Module) on its first connection.
WebAssembly.Module = new Proxy(WebAssembly.Module, {
  construct(target, args) {
    appendFileSync(${JSON.stringify(counted)}, new Error().stack.split('\\n').slice(2, 60).join(' / ') + '\\n');
    return Reflect.construct(target, args);
  },
});
`,
    );
    child = await spawnMain(['bot'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/root',
        NODE_OPTIONS: `--import=${hook}`,
        REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
        GPU_MEDIC_PREFIX: `wasm${randomBytes(4).toString('hex')}`,
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

  it('are answered over connections that compile no WebAssembly parser', async () => {
    await expect.poll(() => slack.calls('auth.test').length, { timeout: 30_000 }).toBeGreaterThan(0);
    await expect.poll(() => output, { timeout: 30_000 }).toMatch(/"msg":"bot started"/);
    let compiles = '';
    try {
      compiles = readFileSync(counted, 'utf8');
    } catch {
      // never written: nothing was compiled
    }
    expect(compiles).toBe('');
  }, 60_000);
});
