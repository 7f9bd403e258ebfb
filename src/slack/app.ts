import type { Server } from 'node:http';
import { App, type CustomRoute, HTTPReceiver, LogLevel, SocketModeReceiver } from '@slack/bolt';
import type { Logger } from '../logger.ts';
import { boltLogger } from './bolt-logger.ts';
import type { SlackPoster } from './outbox.ts';
import { createSlackPoster } from './poster.ts';
import { signatureProperties } from './replay-guard.ts';
import { withRequestWindow } from './request-time.ts';

export interface SlackAppOptions {
  mode: 'socket' | 'http';
  botToken: string;
  /** Socket Mode only (xapp-...). */
  appToken?: string;
  /** HTTP mode only: requests without a valid v0 signature or older than 5 minutes are refused by Bolt; replays by replay-guard.ts. */
  signingSecret?: string;
  /** Web API base (must end with /api/); default Slack's. */
  apiUrl?: string;
  /** HTTP mode listening port; 0 picks a free one. */
  port: number;
  /** HTTP mode listening address (default Node's: every interface). */
  host?: string;
  logger: Logger;
  /** The bot's clock (ms) for the request window. Default Date.now. */
  now?: () => number;
  /** HTTP mode: more routes on the same server, outside Slack's signature check (the Alertmanager receiver checks its own token). */
  extraRoutes?: CustomRoute[];
}

export interface SlackApp {
  app: App;
  poster: SlackPoster;
  start(): Promise<{ port: number | null }>;
  /** null when Slack can reach us (Socket Mode: connected; HTTP: listening), else what is wrong. */
  connectionProblem(): string | null;
  stop(): Promise<void>;
}

export function createSlackApp(o: SlackAppOptions): SlackApp {
  const clientOptions = {
    ...(o.apiUrl ? { slackApiUrl: o.apiUrl } : {}),
    // A few quick retries per call; the outbox retries the rest later, so one outage never blocks other incidents for long.
    retryConfig: { retries: 4, factor: 2, minTimeout: 300, maxTimeout: 5_000 },
  };
  const logger = boltLogger(o.logger);
  // Socket Mode: our own receiver (as Bolt would build it) so that its WebSocket client uses the
  // same Web API base for apps.connections.open, and its connection state can be watched.
  const socketReceiver =
    o.mode === 'socket'
      ? new SocketModeReceiver({
          appToken: o.appToken ?? '',
          logger,
          logLevel: LogLevel.INFO,
          installerOptions: { clientOptions },
        })
      : null;
  const httpReceiver =
    socketReceiver === null
      ? // Our own HTTPReceiver to lift the verified signature headers into the context (replay-guard.ts)
        // and to refuse requests dated outside the window in either direction before Bolt sees them.
        withRequestWindow(
          new HTTPReceiver({
            signingSecret: o.signingSecret ?? '',
            logger,
            logLevel: LogLevel.INFO,
            customPropertiesExtractor: signatureProperties,
            ...(o.extraRoutes && o.extraRoutes.length > 0 ? { customRoutes: o.extraRoutes } : {}),
          }),
          o.now ?? Date.now,
          o.logger,
        )
      : null;
  const app =
    socketReceiver !== null
      ? new App({
          token: o.botToken,
          receiver: socketReceiver,
          socketMode: true,
          clientOptions,
          logger,
          logLevel: LogLevel.INFO,
        })
      : new App({
          token: o.botToken,
          receiver: httpReceiver ?? undefined,
          clientOptions,
          logger,
          logLevel: LogLevel.INFO,
        });
  const poster = createSlackPoster({ botToken: o.botToken, clientOptions, logger, appClient: app.client });
  // Socket Mode's client says when it has Slack's hello, and when it lost the connection.
  let socketState = 'not started';
  let socketSince = Date.now();
  if (socketReceiver) {
    const track = (state: string) => () => {
      socketState = state;
      socketSince = Date.now();
    };
    for (const state of ['connecting', 'connected', 'reconnecting', 'disconnecting', 'disconnected'])
      socketReceiver.client.on(state, track(state));
  }
  let server: Server | null = null;
  return {
    app,
    poster,
    connectionProblem() {
      if (socketReceiver)
        return socketState === 'connected'
          ? null
          : `Socket Mode ${socketState} for ${Math.round((Date.now() - socketSince) / 1000)} s`;
      return server?.listening ? null : 'HTTP receiver not listening';
    },
    async start() {
      if (o.mode === 'socket') {
        await app.start();
        return { port: null };
      }
      server = (await app.start(o.host === undefined ? o.port : { port: o.port, host: o.host })) as Server;
      const addr = server.address();
      return { port: typeof addr === 'object' && addr ? addr.port : o.port };
    },
    async stop() {
      await app.stop();
    },
  };
}
