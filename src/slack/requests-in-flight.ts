import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HTTPReceiver } from '@slack/bolt';

/**
 * The Slack requests the bot is still answering, because acks come first and threads can wait. The outbox
 * renders and posts threads on the same event loop as the acks; during a burst of commands it waits until no
 * request has been in flight for `quietMs` (the gaps between the commands of one burst do not release it), at
 * most `maxWaitMs` at a time, so a steady stream of commands delays the threads but never stops them.
 */
export class RequestsInFlight {
  private count = 0;
  private waiters: Array<() => void> = [];
  /** When the last request was answered (performance.now()), or -Infinity. */
  private lastLeftAt = Number.NEGATIVE_INFINITY;
  private quietTimer: NodeJS.Timeout | null = null;
  private readonly quietMs: number;

  /** `quietMs`: how long no request must be in flight before a wait is over. Default 50 ms. */
  constructor(o: { quietMs?: number } = {}) {
    this.quietMs = o.quietMs ?? 50;
  }

  enter(): void {
    this.count++;
    if (this.quietTimer) {
      clearTimeout(this.quietTimer);
      this.quietTimer = null;
    }
  }

  leave(): void {
    this.count = Math.max(0, this.count - 1);
    if (this.count > 0) return;
    this.lastLeftAt = performance.now();
    this.armQuiet(this.quietMs);
  }

  private armQuiet(ms: number): void {
    if (this.quietTimer || this.waiters.length === 0) return;
    this.quietTimer = setTimeout(() => {
      this.quietTimer = null;
      const waiters = this.waiters;
      this.waiters = [];
      for (const w of waiters) w();
    }, ms);
  }

  /** Resolves once no request has been in flight for the quiet time, or after `maxWaitMs`. */
  idle(maxWaitMs = 1000): Promise<void> {
    const quietLeft = this.quietMs - (performance.now() - this.lastLeftAt);
    if (this.count === 0 && quietLeft <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const w = (): void => {
        clearTimeout(t);
        resolve();
      };
      const t = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        resolve();
      }, maxWaitMs);
      this.waiters.push(w);
      if (this.count === 0) this.armQuiet(quietLeft);
    });
  }

  /** Counts every request to `receiver` from its arrival until its response is closed (sent or aborted). */
  track(receiver: HTTPReceiver): HTTPReceiver {
    const inner = receiver.requestListener;
    receiver.requestListener = (req: IncomingMessage, res: ServerResponse) => {
      this.enter();
      res.once('close', () => this.leave());
      inner(req, res);
    };
    return receiver;
  }
}
