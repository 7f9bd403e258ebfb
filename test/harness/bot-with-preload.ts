/**
 * The real bot process (`dist/src/main.js bot`, HTTP mode) with a module preloaded before it
 * (`NODE_OPTIONS=--import`), against the fake Slack: for tests of what the bot does as it starts
 * (what it loads, what it compiles), seen from inside the process without changing its code.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT, spawnMain } from './dist.ts';
import { filledExampleInventory } from './example-inventory.ts';
import { startFakeSlack, type FakeSlack } from './slack/fake-slack-api.ts';

export interface PreloadedBot {
  slack: FakeSlack;
  /** A scratch directory of this bot's own, removed by stop(); the preload may write its findings here. */
  dir: string;
  /** Everything the bot printed so far (stdout and stderr). */
  output(): string;
  stop(): Promise<void>;
}

/** `preload(dir)` is the preloaded module's source; it may name files in `dir`. */
export async function startBotWithPreload(name: string, preload: (dir: string) => string): Promise<PreloadedBot> {
  const dir = mkdtempSync(join(tmpdir(), `gpu-medic-${name}-`));
  const slack = await startFakeSlack();
  const hook = join(dir, 'preload.mjs');
  writeFileSync(hook, preload(dir));
  let output = '';
  const child: ChildProcess = await spawnMain(['bot'], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      NODE_OPTIONS: `--import=${hook}`,
      REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
      GPU_MEDIC_PREFIX: `${name.replace(/[^a-z]/g, '')}${randomBytes(4).toString('hex')}`,
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
  const collect = (c: Buffer): void => {
    output += c.toString();
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  return {
    slack,
    dir,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const gone = new Promise<void>((r) => child.once('exit', () => r()));
        child.kill('SIGKILL');
        await gone;
      }
      await slack.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
