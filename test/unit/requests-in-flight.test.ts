import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RequestsInFlight } from '../../src/slack/requests-in-flight.ts';

/** Whether `p` has settled once the pending timers and microtasks up to now have run. */
async function settledNow(p: Promise<void>): Promise<boolean> {
  let done = false;
  void p.then(() => {
    done = true;
  });
  await vi.advanceTimersByTimeAsync(0);
  return done;
}

describe('RequestsInFlight.idle (fake timers)', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('with no request answered lately it resolves at once', async () => {
    const r = new RequestsInFlight({ quietMs: 50 });
    expect(await settledNow(r.idle())).toBe(true);
  });

  it('a gap between two requests of a burst shorter than the quiet time does not release it; the quiet time after the last one does', async () => {
    const r = new RequestsInFlight({ quietMs: 50 });
    r.enter();
    const p = r.idle(10_000);
    r.leave();
    await vi.advanceTimersByTimeAsync(10);
    // The next command of the burst arrives 10 ms after the first was answered.
    r.enter();
    await vi.advanceTimersByTimeAsync(10);
    r.leave();
    await vi.advanceTimersByTimeAsync(49);
    expect(await settledNow(p)).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await settledNow(p)).toBe(true);
  });

  it('right after a request was answered a new wait also waits out the quiet time', async () => {
    const r = new RequestsInFlight({ quietMs: 50 });
    r.enter();
    r.leave();
    await vi.advanceTimersByTimeAsync(20);
    const p = r.idle(10_000);
    await vi.advanceTimersByTimeAsync(29);
    expect(await settledNow(p)).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await settledNow(p)).toBe(true);
  });

  it('a stream of requests with short gaps holds a wait back for at most maxWaitMs', async () => {
    const r = new RequestsInFlight({ quietMs: 50 });
    r.enter();
    const p = r.idle(1000);
    for (let t = 0; t < 990; t += 10) {
      r.leave();
      await vi.advanceTimersByTimeAsync(5);
      r.enter();
      await vi.advanceTimersByTimeAsync(5);
    }
    expect(await settledNow(p)).toBe(false);
    await vi.advanceTimersByTimeAsync(10);
    expect(await settledNow(p)).toBe(true);
    r.leave();
  });
});
