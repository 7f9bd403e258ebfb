import type { Server } from 'node:http';
import type { App, CustomRoute, webApi } from '@slack/bolt';
import { loadBolt } from './bolt.ts';
import type { Logger } from '../logger.ts';
import { boltLogger } from './bolt-logger.ts';
import type { SlackPoster } from './outbox.ts';
import { nodeFetch } from '../http/node-fetch.ts';
import { createSlackPoster } from './poster.ts';
import { signatureProperties } from './replay-guard.ts';
import { withRequestWindow } from './request-time.ts';
import { RequestsInFlight } from './requests-in-flight.ts';
import { RetryUntil } from './retry-until.ts';

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
  /** The Web API client with the bot token (Bolt's own `app.client` has none: see the authorize below). */
  client: webApi.WebClient;
  poster: SlackPoster;
  /** HTTP mode: the Slack requests being answered (Socket Mode: none are counted). */
  requests: RequestsInFlight;
  start(): Promise<{ port: number | null }>;
  /** null when Slack can reach us (Socket Mode: connected; HTTP: listening), else what is wrong. */
  connectionProblem(): string | null;
  stop(): Promise<void>;
}

export function createSlackApp(o: SlackAppOptions): SlackApp {
  const bolt = loadBolt(o.mode);
  // SocketModeReceiver is read in Socket Mode only: reading it loads Socket Mode (bolt.ts).
  const { App, HTTPReceiver, LogLevel, webApi } = bolt;
  const clientOptions = {
    ...(o.apiUrl ? { slackApiUrl: o.apiUrl } : {}),
    // node:http under every Web API call: no fetch, whose first request compiles a WebAssembly parser (node-fetch.ts).
    fetch: nodeFetch,
    // A few quick retries per call; the outbox retries the rest later, so one outage never blocks other incidents for long.
    retryConfig: { retries: 4, factor: 2, minTimeout: 300, maxTimeout: 5_000 },
  };
  const logger = boltLogger(o.logger);
  const requests = new RequestsInFlight();
  // Socket Mode: our own receiver (as Bolt would build it) so that its WebSocket client uses the
  // same Web API base for apps.connections.open, and its connection state can be watched.
  const socketReceiver =
    o.mode === 'socket'
      ? new bolt.SocketModeReceiver({
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
          requests.track(
            new HTTPReceiver({
              signingSecret: o.signingSecret ?? '',
              logger,
              logLevel: LogLevel.INFO,
              customPropertiesExtractor: signatureProperties,
              ...(o.extraRoutes && o.extraRoutes.length > 0 ? { customRoutes: o.extraRoutes } : {}),
            }),
          ),
          o.now ?? Date.now,
          o.logger,
        )
      : null;
  // The bot's identity (auth.test) is ours to fetch, retried until Slack answers. Bolt's own
  // (`token`) runs auth.test once, before the first request, and keeps a failure for good: with
  // Slack's Web API down at start, every command after it got a 401 until a restart.
  let identity: { botId?: string; botUserId?: string } = {};
  const authorize = async () => ({ botToken: o.botToken, ...identity });
  const app =
    socketReceiver !== null
      ? new App({
          authorize,
          receiver: socketReceiver,
          socketMode: true,
          convoStore: false,
          clientOptions,
          logger,
          logLevel: LogLevel.INFO,
        })
      : new App({
          authorize,
          receiver: httpReceiver ?? undefined,
          // Nothing here reads context.conversation; Bolt's default in-memory store answered each
          // request's lookup with a new Error ('Conversation not found'), garbage on every ack.
          convoStore: false,
          clientOptions,
          logger,
          logLevel: LogLevel.INFO,
        });
  const client = new webApi.WebClient(o.botToken, { ...clientOptions, logger, logLevel: LogLevel.INFO });
  const webApiUp = new RetryUntil({
    attempt: () => client.auth.test(),
    what: "Slack's Web API (auth.test)",
    meanwhile:
      o.mode === 'http'
        ? 'commands are acknowledged and queued; their threads are posted once Slack answers'
        : 'nothing reaches the bot until Socket Mode connects',
    logger: o.logger,
    onSuccess: (r) => {
      identity = {
        ...(typeof r.bot_id === 'string' ? { botId: r.bot_id } : {}),
        ...(typeof r.user_id === 'string' ? { botUserId: r.user_id } : {}),
      };
    },
  });
  // Socket Mode: Slack's client gives up for good when apps.connections.open fails at start
  // (a refused connection or a 5xx); this keeps starting it until it connects.
  const socketUp =
    socketReceiver !== null
      ? new RetryUntil({
          attempt: () => app.start(),
          what: 'Socket Mode (apps.connections.open)',
          meanwhile: 'nothing reaches the bot; it connects by itself once Slack answers',
          logger: o.logger,
        })
      : null;
  const poster = createSlackPoster({
    botToken: o.botToken,
    clientOptions,
    logger,
    appClient: client,
    bolt: { webApi, LogLevel },
  });
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
    client,
    poster,
    requests,
    connectionProblem() {
      const socket = socketUp?.problem() ?? null;
      if (socket) return socket;
      const problem = socketReceiver
        ? socketState === 'connected'
          ? null
          : `Socket Mode ${socketState} for ${Math.round((Date.now() - socketSince) / 1000)} s`
        : server?.listening
          ? null
          : 'HTTP receiver not listening';
      return problem ?? webApiUp.problem();
    },
    async start() {
      void webApiUp.run();
      if (socketUp) {
        // Not awaited: the bot runs (health, outbox) while Slack is away, and says so.
        void socketUp.run();
        return { port: null };
      }
      server = (await app.start(o.host === undefined ? o.port : { port: o.port, host: o.host })) as Server;
      const addr = server.address();
      return { port: typeof addr === 'object' && addr ? addr.port : o.port };
    },
    async stop() {
      webApiUp.stop();
      socketUp?.stop();
      await app.stop();
    },
  };
}
