import { describe, expect, it } from 'vitest';
import { botCrash } from './scenarios/bot-crash.ts';

describe('a real bot process SIGKILLed mid-post, then restarted', () => {
  it('before the post, after the post before its ts is recorded, after the record: every thread holds each message exactly once, in order', async () => {
    // Message 1 is the thread parent (found again with conversations.history), 3 a reply (conversations.replies).
    const f = await botCrash({ messages: [1, 3], runs: Number(process.env.SOAK_RUNS ?? 1) });
    expect(f.failures).toEqual([]);
    expect(f.crashes).toBe(6 * Number(process.env.SOAK_RUNS ?? 1));
    expect(f.duplicates).toBe(0);
    expect(f.messagesLost).toBe(0);
  }, 240_000);
});
