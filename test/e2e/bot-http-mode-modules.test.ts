/**
 * The bot's memory (it must stay small): in HTTP mode it never constructs a Socket Mode client, yet Bolt's
 * index and its App require SocketModeReceiver at load, and with it @slack/socket-mode, ws and npm
 * undici (5 MiB of live V8 heap; V8 lets the old generation grow to a multiple of the live heap
 * before a full collection, so the bot's peak after command bursts moved by far more, bench/results/2026-12.md).
 * The real bot process (`dist/src/main.js bot`) in HTTP mode, with a preloaded module that records
 * every package the CommonJS loader loads, against the fake Slack.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBotWithPreload, type PreloadedBot } from '../harness/bot-with-preload.ts';

describe('the bot in HTTP mode', () => {
  let bot: PreloadedBot;

  beforeAll(async () => {
    bot = await startBotWithPreload(
      'http-modules',
      (dir) => `import { appendFileSync } from 'node:fs';
import Module from 'node:module';
// Every file the CommonJS loader compiles (Bolt and its dependencies are CommonJS).
const compile = Module.prototype._compile;
Module.prototype._compile = function (content, filename) {
  appendFileSync(${JSON.stringify(join(dir, 'loaded'))}, filename + '\\n');
  return compile.call(this, content, filename);
};
`,
    );
  }, 60_000);

  afterAll(async () => {
    await bot?.stop();
  });

  it('loads Bolt but not Socket Mode, ws or npm undici', async () => {
    await expect.poll(() => bot.output(), { timeout: 30_000 }).toMatch(/"msg":"bot started"/);
    await expect.poll(() => bot.slack.calls('auth.test').length, { timeout: 30_000 }).toBeGreaterThan(0);
    const packages = new Set(
      readFileSync(join(bot.dir, 'loaded'), 'utf8')
        .split('\n')
        .map((f) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(f)?.[1])
        .filter((p): p is string => p !== undefined),
    );
    expect(packages.has('@slack/bolt')).toBe(true);
    expect([...packages].filter((p) => ['@slack/socket-mode', 'ws', 'undici'].includes(p))).toEqual([]);
  }, 60_000);
});
