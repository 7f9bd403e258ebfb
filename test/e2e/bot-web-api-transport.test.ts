/**
 * The bot's memory at start (it must stay small): its first Web API call (auth.test, retried until Slack
 * answers) went through fetch, which went through npm undici's dispatcher (Bolt loads it with Socket
 * Mode, and it makes itself fetch's global dispatcher), whose first connection compiles its HTTP
 * parser to WebAssembly on the main thread: a 30–40 MiB transient, most of the bot's start-up
 * peak (bench/results/2026-12.md, bot memory). The real bot process (`dist/src/main.js bot`), with a
 * preloaded module that records every synchronous WebAssembly compile, against the fake Slack.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBotWithPreload, type PreloadedBot } from '../harness/bot-with-preload.ts';

describe("the bot's Web API calls at start", () => {
  let bot: PreloadedBot;

  beforeAll(async () => {
    bot = await startBotWithPreload(
      'wasm',
      (dir) => `import { appendFileSync } from 'node:fs';
Error.stackTraceLimit = 60;
// undici compiles its HTTP parser synchronously (new WebAssembly.Module) on its first connection.
WebAssembly.Module = new Proxy(WebAssembly.Module, {
  construct(target, args) {
    appendFileSync(${JSON.stringify(join(dir, 'wasm-compiles'))}, new Error().stack.split('\\n').slice(2, 60).join(' / ') + '\\n');
    return Reflect.construct(target, args);
  },
});
`,
    );
  }, 60_000);

  afterAll(async () => {
    await bot?.stop();
  });

  it('are answered over connections that compile no WebAssembly parser', async () => {
    await expect.poll(() => bot.slack.calls('auth.test').length, { timeout: 30_000 }).toBeGreaterThan(0);
    await expect.poll(() => bot.output(), { timeout: 30_000 }).toMatch(/"msg":"bot started"/);
    let compiles = '';
    try {
      compiles = readFileSync(join(bot.dir, 'wasm-compiles'), 'utf8');
    } catch {
      // never written: nothing was compiled
    }
    expect(compiles).toBe('');
  }, 60_000);
});
