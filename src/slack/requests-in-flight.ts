import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HTTPReceiver } from '@slack/bolt';

/**
 * The Slack requests the bot is still answering (issue 26: acks first). The outbox renders and
 * posts threads on the same event loop as the acks; during a burst of commands it waits until no
 * request is in flight, at most `maxWaitMs` at a time, so a steady stream of commands delays the
 * threads but never stops them.
 */
export class RequestsInFlight {
  private count = 0;
  private waiters: Array<() => void> = [];

  enter(): void {
    this.count++;
  }

  leave(): void {
    this.count = Math.max(0, this.count - 1);
    if (this.count > 0) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Resolves once no request is in flight, or after `maxWaitMs`. */
  idle(maxWaitMs = 1000): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(resolve, maxWaitMs);
      this.waiters.push(() => {
        clearTimeout(t);
        resolve();
      });
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
