import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { App, HTTPReceiver, LogLevel, SocketModeReceiver, webApi } from '@slack/bolt';
import type { Logger } from '../logger.ts';
import { boltLogger } from './bolt-logger.ts';
import { viewMetadata, viewTagOf, type SlackPoster } from './outbox.ts';
import { requestTimeProblem, signatureProperties } from './replay-guard.ts';
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
}

export interface SlackApp {
  app: App;
  /** The Web API client with the bot token (Bolt's own `app.client` has none: see the authorize below). */
  client: webApi.WebClient;
  poster: SlackPoster;
  start(): Promise<{ port: number | null }>;
  /** null when Slack can reach us (Socket Mode: connected; HTTP: listening), else what is wrong. */
  connectionProblem(): string | null;
  stop(): Promise<void>;
}

/** WebClient's retry after waiting out a 429 (its message, wrapped in a request error): the only retry safe for a post. */
function isRateLimitRetry(err: Error & { original?: Error }): boolean {
  return /^A rate limit was exceeded/.test(err.original?.message ?? err.message);
}

/** 200 messages a page: 10,000 messages of a thread or of the channel since the incident opened. */
const LOOKUP_MAX_PAGES = 50;

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
          }),
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
          clientOptions,
          logger,
          logLevel: LogLevel.INFO,
        })
      : new App({
          authorize,
          receiver: httpReceiver ?? undefined,
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
  // chat.postMessage is not idempotent: a retry after a 5xx or a dropped connection can post a
  // message Slack already has. So posts are retried here only after a 429 (Slack did nothing);
  // anything else fails the pass, and the outbox, which marked the post before sending, looks
  // the message up by its metadata before posting it again.
  // WebClient hands retryConfig to p-retry 4 as is (WebClient.makeRequest), whose onFailedAttempt
  // stops the retries by throwing; @slack/web-api's RetryOptions type does not list it.
  const postRetries = {
    ...clientOptions.retryConfig,
    onFailedAttempt: (err: Error & { original?: Error }): void => {
      if (!isRateLimitRetry(err)) throw err;
    },
  };
  const postClient = new webApi.WebClient(o.botToken, {
    ...clientOptions,
    retryConfig: postRetries,
    logger,
    logLevel: LogLevel.INFO,
  });
  // Whoever watches the app's client for 429s (metrics) sees the posts' too.
  postClient.on(webApi.WebClientEvent.RATE_LIMITED, (...args: unknown[]) =>
    client.emit(webApi.WebClientEvent.RATE_LIMITED, ...args),
  );
  const poster: SlackPoster = {
    async post(m) {
      const r = await postClient.chat.postMessage({
        channel: m.channel,
        text: m.text,
        ...(m.threadTs ? { thread_ts: m.threadTs } : {}),
        ...(m.blocks ? { blocks: m.blocks } : {}),
        metadata: viewMetadata(m.tag),
        unfurl_links: false,
        unfurl_media: false,
      });
      if (typeof r.ts !== 'string') throw new Error('chat.postMessage returned no ts');
      return { ts: r.ts };
    },
    async findTagged(q) {
      // Every page (cursor) is read: a long thread or a busy channel must not hide the message.
      let cursor: string | undefined;
      for (let page = 0; page < LOOKUP_MAX_PAGES; page++) {
        const r = q.threadTs
          ? await client.conversations.replies({
              channel: q.channel,
              ts: q.threadTs,
              include_all_metadata: true,
              limit: 200,
              ...(cursor ? { cursor } : {}),
            })
          : await client.conversations.history({
              channel: q.channel,
              oldest: q.oldest,
              inclusive: true,
              include_all_metadata: true,
              limit: 200,
              ...(cursor ? { cursor } : {}),
            });
        for (const msg of r.messages ?? []) {
          const tag = viewTagOf(msg);
          if (tag && tag.incident === q.incident && tag.viewKey === q.viewKey && typeof msg.ts === 'string')
            return { ts: msg.ts, viewHash: tag.viewHash };
        }
        cursor = r.response_metadata?.next_cursor || undefined;
        if (!r.has_more || !cursor) return null;
      }
      throw new Error(`no answer after ${LOOKUP_MAX_PAGES} pages of ${q.channel}; will look again later`);
    },
    async update(m) {
      await client.chat.update({
        channel: m.channel,
        ts: m.ts,
        text: m.text,
        ...(m.blocks ? { blocks: m.blocks } : {}),
      });
    },
  };
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

/**
 * Bolt refuses a stale timestamp but not one in the future. Every POST carrying Slack's timestamp
 * header is checked on the absolute difference by the bot's clock and refused exactly as Bolt
 * refuses a stale one (401, no body), so a future-dated request is neither served nor replayable
 * once the bot's clock catches up. Requests without the header are left to Bolt, which refuses
 * them (401), except `ssl_check`, which runs nothing.
 */
function withRequestWindow(receiver: HTTPReceiver, now: () => number, logger: Logger): HTTPReceiver {
  const inner = receiver.requestListener;
  receiver.requestListener = (req: IncomingMessage, res: ServerResponse) => {
    const header = req.headers['x-slack-request-timestamp'];
    const problem = req.method === 'POST' && header !== undefined ? requestTimeProblem(header, now()) : null;
    if (problem !== null) {
      logger.warn({ requestTimestamp: header, problem }, 'Slack request outside the 5-minute window refused');
      // Drain the body so the client reads the answer rather than a reset connection.
      req.resume();
      res.writeHead(401);
      res.end();
      return;
    }
    inner(req, res);
  };
  return receiver;
}
