/** A token bucket with the clock passed in, pure but for its own count: `take(now)` says whether one more request fits. */
export class RateLimit {
  private tokens: number;
  private last: number | null = null;
  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
  ) {
    this.tokens = burst;
  }

  take(nowMs: number): boolean {
    if (this.last !== null)
      this.tokens = Math.min(this.burst, this.tokens + ((nowMs - this.last) / 1000) * this.perSecond);
    this.last = nowMs;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** Seconds until one more request fits (for Retry-After). */
  waitSec(): number {
    return Math.max(1, Math.ceil((1 - this.tokens) / this.perSecond));
  }
}
