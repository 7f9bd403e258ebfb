import type { Logger } from '../logger.ts';

/** Waits between tries: 1 s, 2 s, 4 s, … up to 30 s. */
const BACKOFF_MS = { first: 1000, max: 30_000 } as const;

export interface RetryUntilOptions<T> {
  /** What is tried, e.g. Slack's `auth.test`. */
  attempt: () => Promise<T>;
  /** What is waited for, in words for the log and health: "Slack's Web API (auth.test)". */
  what: string;
  logger: Logger;
  /** What the process still does meanwhile (said once in the first warning). */
  meanwhile: string;
  onSuccess?: (value: T) => void;
  backoff?: { first: number; max: number };
  now?: () => number;
}

/**
 * Tries `attempt` until it succeeds, with a doubling wait between tries, and says all along what
 * it waits for: a warning per failure (the first with what still works meanwhile), one line when
 * it succeeds, and `problem()` for the health check. `stop()` ends the wait.
 */
export class RetryUntil<T> {
  private failures = 0;
  private lastError = '';
  private since: number;
  private done = false;
  private stopped = false;
  private timer: NodeJS.Timeout | null = null;
  private nextAt = 0;
  private settle: (() => void) | null = null;
  private readonly now: () => number;
  private readonly backoff: { first: number; max: number };

  constructor(private readonly o: RetryUntilOptions<T>) {
    this.now = o.now ?? Date.now;
    this.since = this.now();
    this.backoff = o.backoff ?? BACKOFF_MS;
  }

  /** Starts the first try now; resolves once one try succeeded (or stop()). */
  run(): Promise<void> {
    return new Promise((resolve) => {
      this.settle = resolve;
      const tick = async (): Promise<void> => {
        if (this.stopped) return resolve();
        try {
          const v = await this.o.attempt();
          if (this.stopped) return resolve();
          this.done = true;
          if (this.failures > 0)
            this.o.logger.info(
              { waitedSec: Math.round((this.now() - this.since) / 1000), failures: this.failures },
              `${this.o.what} answers again after ${this.failures} failed tries`,
            );
          this.o.onSuccess?.(v);
          return resolve();
        } catch (e) {
          if (this.stopped) return resolve();
          this.failures += 1;
          this.lastError = e instanceof Error ? e.message : String(e);
          const wait = Math.min(this.backoff.max, this.backoff.first * 2 ** (this.failures - 1));
          this.nextAt = this.now() + wait;
          this.o.logger.warn(
            { err: this.lastError, failures: this.failures, retryInSec: wait / 1000 },
            `waiting for ${this.o.what}: ${this.lastError}; next try in ${wait / 1000} s${this.failures === 1 ? `; meanwhile ${this.o.meanwhile}` : ''}`,
          );
          this.timer = setTimeout(() => void tick(), wait);
        }
      };
      void tick();
    });
  }

  /** null once a try succeeded; else what is waited for, since when, and why. */
  problem(): string | null {
    if (this.done) return null;
    const forSec = Math.round((this.now() - this.since) / 1000);
    if (this.failures === 0) return `waiting for ${this.o.what} (first try for ${forSec} s)`;
    const next = Math.max(0, Math.round((this.nextAt - this.now()) / 1000));
    return `waiting for ${this.o.what} for ${forSec} s (${this.failures} failed tries, last: ${this.lastError}; next in ${next} s)`;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.settle?.();
  }
}
