import type * as BoltModule from '@slack/bolt';
import type { Logger, webApi } from '@slack/bolt';
import { type SlackPoster, viewMetadata, viewTagOf } from './outbox.ts';

/** WebClient's retry after waiting out a 429 (its message, wrapped in a request error): the only retry safe for a post. */
function isRateLimitRetry(err: Error & { original?: Error }): boolean {
  return /^A rate limit was exceeded/.test(err.original?.message ?? err.message);
}

/** 200 messages a page: 10,000 messages of a thread or of the channel since the incident opened. */
const LOOKUP_MAX_PAGES = 50;

export interface SlackPosterOptions {
  botToken: string;
  /** The app's Web API options (base URL, retryConfig); posts keep them but retry only after a 429. */
  clientOptions: webApi.WebClientOptions & { retryConfig: webApi.RetryOptions };
  logger: Logger;
  /** The Bolt app's client: look-ups and updates go through it, and it re-emits the posts' RATE_LIMITED. */
  appClient: webApi.WebClient;
  /** Bolt as the app loaded it (src/slack/bolt.ts). */
  bolt: Pick<typeof BoltModule, 'webApi' | 'LogLevel'>;
}

/** Posts, finds and updates the bot's messages in Slack for the outbox. */
export function createSlackPoster(o: SlackPosterOptions): SlackPoster {
  const { webApi, LogLevel } = o.bolt;
  // chat.postMessage is not idempotent: a retry after a 5xx or a dropped connection can post a
  // message Slack already has. So posts are retried here only after a 429 (Slack did nothing);
  // anything else fails the pass, and the outbox, which marked the post before sending, looks
  // the message up by its metadata before posting it again.
  // WebClient hands retryConfig to p-retry 4 as is (WebClient.makeRequest), whose onFailedAttempt
  // stops the retries by throwing; @slack/web-api's RetryOptions type does not list it.
  const postRetries = {
    ...o.clientOptions.retryConfig,
    onFailedAttempt: (err: Error & { original?: Error }): void => {
      if (!isRateLimitRetry(err)) throw err;
    },
  };
  const postClient = new webApi.WebClient(o.botToken, {
    ...o.clientOptions,
    retryConfig: postRetries,
    logger: o.logger,
    logLevel: LogLevel.INFO,
  });
  // Whoever watches the app's client for 429s (metrics) sees the posts' too.
  postClient.on(webApi.WebClientEvent.RATE_LIMITED, (...args: unknown[]) =>
    o.appClient.emit(webApi.WebClientEvent.RATE_LIMITED, ...args),
  );
  return {
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
          ? await o.appClient.conversations.replies({
              channel: q.channel,
              ts: q.threadTs,
              include_all_metadata: true,
              limit: 200,
              ...(cursor ? { cursor } : {}),
            })
          : await o.appClient.conversations.history({
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
      await o.appClient.chat.update({
        channel: m.channel,
        ts: m.ts,
        text: m.text,
        ...(m.blocks ? { blocks: m.blocks } : {}),
      });
    },
  };
}
