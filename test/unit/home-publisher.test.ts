/**
 * The App Home publish loop on real Redis and the fake Slack's views.publish through the real
 * WebClient. Its clock is a test clock, so pacing (one publish per user per interval, a cap per
 * minute in all) is checked by moving the clock, never by timing.
 */
import { WebClient } from '@slack/web-api';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HomePublisher, type HomePublisherOptions } from '../../src/slack/home.ts';
import { watchKeys } from '../../src/watch-store/watch-keys.ts';
import type { MachineGlance } from '../../src/watchdog/watch-glance.ts';
import { captureLogger } from '../harness/capture-logger.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';
import { startFakeSlack, type FakeSlack } from '../harness/slack/fake-slack-api.ts';
import { silentSlackLogger } from '../harness/slack/silent-logger.ts';

const T0 = Date.parse('2026-12-01T12:00:00.000Z');

describe('App Home publish loop (real Redis, fake Slack views.publish)', () => {
  let redis: Redis;
  let slack: FakeSlack;
  let client: WebClient;
  let prefix: string;
  let clock: number;
  const running: HomePublisher[] = [];

  const glance = (machineId: string, o: Partial<MachineGlance> = {}): MachineGlance => ({
    machineId,
    at: T0,
    ok: true,
    code: null,
    gpus: 8,
    gpuMemoryUsedMiB: 0,
    gpuMemoryTotalMiB: 786_432,
    ramPct: 10,
    openAlerts: 0,
    ...o,
  });

  const publisher = (o: Partial<HomePublisherOptions> = {}): HomePublisher => {
    const p = new HomePublisher({
      redis,
      prefix,
      machineIds: ['kpro5', 'kpro6'],
      settings: { ramPct: 90, staleAfterMs: 3600_000 },
      publish: async (user, view) => {
        await client.views.publish({ user_id: user, view });
      },
      logger: captureLogger('home').logger,
      now: () => clock,
      tickMs: 20,
      perUserMinMs: 5000,
      maxPerMinute: 60,
      ...o,
    });
    running.push(p);
    p.start();
    return p;
  };
  /** Lets the loop run `n` more passes (it reads and publishes once a pass). */
  const passes = async (p: HomePublisher, n: number): Promise<void> => {
    const target = p.passes() + n;
    await slack.waitFor(() => p.passes() >= target, 20_000);
  };
  const publishes = (user: string): number => slack.homeView(user)?.publishes ?? 0;

  beforeAll(async () => {
    redis = newRedis();
    slack = await startFakeSlack();
    client = new WebClient(slack.botToken, {
      slackApiUrl: slack.apiUrl,
      logger: silentSlackLogger,
      retryConfig: { retries: 0 },
    });
  });
  afterAll(async () => {
    await slack.close();
    redis.disconnect();
  });
  beforeEach(async () => {
    prefix = randomPrefix('home');
    clock = T0;
    await redis.hset(watchKeys(prefix).last, 'kpro5', JSON.stringify(glance('kpro5')));
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((p) => p.stop()));
    slack.reset();
    await removePrefix(redis, prefix);
  });

  it('one publish per user per interval: opening Home twice at once publishes once, and again once the interval passed', async () => {
    const p = publisher();
    await p.opened('U0ALICE001');
    await slack.waitFor(() => publishes('U0ALICE001') === 1, 20_000);
    await p.opened('U0ALICE001');
    await passes(p, 10);
    expect(publishes('U0ALICE001')).toBe(1);
    clock += 5000;
    await slack.waitFor(() => publishes('U0ALICE001') === 2, 20_000);
  });

  it('at most maxPerMinute publishes in all: 15 users opening at once with a cap of 6 get 6 now and the rest as the minute goes by', async () => {
    const p = publisher({ maxPerMinute: 6 });
    const users = Array.from({ length: 15 }, (_, i) => `U0USER${String(i).padStart(4, '0')}`);
    for (const u of users) await p.opened(u);
    await slack.waitFor(() => slack.calls('views.publish').length === 6, 20_000);
    await passes(p, 10);
    expect(slack.calls('views.publish')).toHaveLength(6);
    clock += 60_000;
    await slack.waitFor(() => slack.calls('views.publish').length === 12, 20_000);
    clock += 60_000;
    await slack.waitFor(() => users.every((u) => publishes(u) === 1), 20_000);
    expect(slack.calls('views.publish')).toHaveLength(15);
  });

  it('a restarted loop does not publish an unchanged view again, and publishes when the watchdog moves', async () => {
    const first = publisher();
    await first.opened('U0ALICE001');
    await slack.waitFor(() => publishes('U0ALICE001') === 1, 20_000);
    await first.stop();
    clock += 60_000;
    const second = publisher();
    await passes(second, 10);
    expect(publishes('U0ALICE001')).toBe(1);
    await redis.hset(
      watchKeys(prefix).last,
      'kpro6',
      JSON.stringify(glance('kpro6', { ok: false, code: 'unreachable', gpus: 0, ramPct: null })),
    );
    await redis.incr(watchKeys(prefix).version);
    await slack.waitFor(() => publishes('U0ALICE001') === 2, 20_000);
    expect(JSON.stringify(slack.homeView('U0ALICE001')?.view)).toContain('`kpro6` · not read: unreachable');
  });

  it('a change the watchdog commits while a pass reads the model is published by a later pass, not lost until the next full refresh', async () => {
    // The watchdog's write lands just after the first pass read the model (its `last` readings), while
    // that pass is still under way: the reading it returns is the one from before the write.
    let modelReads = 0;
    const racing = new Proxy(redis, {
      get(target, prop) {
        if (prop === 'hgetall')
          return async (key: string) => {
            const before = await target.hgetall(key);
            if (key === watchKeys(prefix).last && ++modelReads === 1) {
              await redis.hset(
                watchKeys(prefix).last,
                'kpro6',
                JSON.stringify(glance('kpro6', { ok: false, code: 'unreachable', gpus: 0, ramPct: null })),
              );
              await redis.incr(watchKeys(prefix).version);
            }
            return before;
          };
        const v: unknown = Reflect.get(target, prop, target);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const p = publisher({ redis: racing, perUserMinMs: 0 });
    await passes(p, 1);
    expect(modelReads).toBe(1);
    await p.opened('U0ALICE001');
    // The clock stands still: no full refresh (refreshMs) can bring the change in; only the version can.
    await slack.waitFor(
      () => JSON.stringify(slack.homeView('U0ALICE001')?.view ?? '').includes('`kpro6` · not read: unreachable'),
      20_000,
    );
  });

  it('a watchdog version that moves without a change of content publishes nothing', async () => {
    const p = publisher();
    await p.opened('U0ALICE001');
    await slack.waitFor(() => publishes('U0ALICE001') === 1, 20_000);
    clock += 60_000;
    await redis.incr(watchKeys(prefix).version);
    await passes(p, 10);
    expect(publishes('U0ALICE001')).toBe(1);
  });

  it('a publish that fails is retried with a growing wait, and lands once Slack takes it', async () => {
    const p = publisher({ retryMs: 1000 });
    slack.failNext('views.publish', 2, { error: 'internal_error' });
    await p.opened('U0ALICE001');
    await slack.waitFor(() => slack.calls('views.publish').length === 1, 20_000);
    await passes(p, 5);
    expect(slack.calls('views.publish')).toHaveLength(1);
    clock += 5000; // past the per-user interval and the first wait (1 s)
    await slack.waitFor(() => slack.calls('views.publish').length === 2, 20_000);
    clock += 1500; // the second wait is 2 s: not yet
    await passes(p, 5);
    expect(slack.calls('views.publish')).toHaveLength(2);
    clock += 5000;
    await slack.waitFor(() => publishes('U0ALICE001') === 1, 20_000);
  });
});
