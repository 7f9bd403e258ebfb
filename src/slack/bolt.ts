import { createRequire, Module } from 'node:module';
import type * as BoltModule from '@slack/bolt';

const require = createRequire(import.meta.url);

/** What the bot uses of Bolt. */
export type Bolt = Pick<typeof BoltModule, 'App' | 'HTTPReceiver' | 'LogLevel' | 'SocketModeReceiver' | 'webApi'>;

/**
 * Bolt for the bot's mode. Bolt's index and its `App` require `SocketModeReceiver` when they load,
 * and with it @slack/socket-mode and npm undici, even in HTTP mode, where no Socket Mode client is
 * ever built: 5 MiB of live V8 heap, and V8 lets the old generation grow to a multiple of the live
 * heap before it collects, so the bot's peak RSS after bursts of commands moved by far more
 * (bench/results/2026-12.md), and the bot must stay small in a burst. In HTTP mode, that one module is put in the
 * CommonJS cache as a stand-in (Node documents adding `require.cache` entries) that requires the real one the
 * first time its export is read, and `App` and `HTTPReceiver` come from their own files: the index reads
 * every receiver's export as it loads, `App` reads `SocketModeReceiver` only to construct one.
 * `SocketModeReceiver` here is the index's, loaded when read. `webApi` and `LogLevel` are the
 * packages Bolt itself requires. test/e2e/bot-http-mode-modules.test.ts checks what an HTTP-mode
 * bot loads; the Socket Mode tests run the real receiver.
 */
export function loadBolt(mode: 'socket' | 'http'): Bolt {
  if (mode === 'socket') return require('@slack/bolt') as typeof BoltModule;
  deferSocketModeReceiver();
  const fromBolt = createRequire(require.resolve('@slack/bolt'));
  return {
    App: (fromBolt('./App.js') as { default: typeof BoltModule.App }).default,
    HTTPReceiver: (fromBolt('./receivers/HTTPReceiver.js') as { default: typeof BoltModule.HTTPReceiver }).default,
    LogLevel: (fromBolt('@slack/logger') as Pick<typeof BoltModule, 'LogLevel'>).LogLevel,
    webApi: fromBolt('@slack/web-api') as typeof BoltModule.webApi,
    get SocketModeReceiver() {
      return (require('@slack/bolt') as typeof BoltModule).SocketModeReceiver;
    },
  };
}

function deferSocketModeReceiver(): void {
  const path = require.resolve('@slack/bolt/dist/receivers/SocketModeReceiver.js');
  if (require.cache[path]) return;
  let real: { default: unknown } | null = null;
  const standIn = new Module(path);
  standIn.filename = path;
  standIn.loaded = true;
  standIn.exports = {
    __esModule: true,
    get default(): unknown {
      if (real === null) {
        delete require.cache[path];
        real = require(path) as { default: unknown };
      }
      return real.default;
    },
  };
  require.cache[path] = standIn;
}
