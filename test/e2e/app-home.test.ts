/**
 * App Home end to end: the real bot (Bolt HTTP receiver fed signed Events API deliveries), real
 * Redis, the fake Slack's views.publish. The watchdog's keys and the incidents are written here
 * directly, in the documented shapes (src/watch-store/watch-keys.ts, src/watchdog/alert-events.ts),
 * as the watchdog and the workers write them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { watchKeys } from '../../src/watch-store/watch-keys.ts';
import { alertIncidentId } from '../../src/watchdog/alert-id.ts';
import type { Alert } from '../../src/watchdog/judge.ts';
import type { MachineGlance } from '../../src/watchdog/watch-glance.ts';
import { appHomeOpenedPayload, sendEvent } from '../harness/slack/signed-request.ts';
import { startStack, type Stack } from '../harness/stack.ts';

const ALICE = 'U0HOMEALIC';
const BOB = 'U0HOMEBOB1';
const CAROL = 'U0HOMECARL';
const DAVE = 'U0HOMEDAVE';

/** Every text of a view, joined. */
function textOf(view: Record<string, unknown> | undefined): string {
  const out: string[] = [];
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) n.forEach(walk);
    else if (n !== null && typeof n === 'object') {
      const o = n as Record<string, unknown>;
      if (typeof o.text === 'string') out.push(o.text);
      Object.values(o).forEach(walk);
    }
  };
  walk(view?.blocks);
  return out.join('\n');
}

describe('App Home end to end (real Bolt receiver, Redis; fake Slack views.publish)', () => {
  let s: Stack;
  let log: IncidentLog;
  const keys = () => watchKeys(s.prefix);
  const open = (user: string, tab: 'home' | 'messages' = 'home') =>
    sendEvent(s.eventsUrl, s.signingSecret, appHomeOpenedPayload({ user, tab }));
  const home = (user: string) => s.slack.homeView(user);

  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 }],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      noWorkers: true,
      // Each change here is one more publish to ALICE: paced at 1 s, not the bot's 5 s (its pace is
      // test/unit/home-publisher.test.ts's).
      homePerUserMinMs: 1000,
    });
    log = new IncidentLog(s.redis, s.prefix);
    const glance: MachineGlance = {
      machineId: 'kpro5',
      at: Date.now(),
      ok: true,
      code: null,
      gpus: 2,
      gpuMemoryUsedMiB: 1_024,
      gpuMemoryTotalMiB: 163_118,
      ramPct: 9,
      openAlerts: 0,
    };
    await s.redis.hset(keys().last, 'kpro5', JSON.stringify(glance));
    await s.redis.incr(keys().version);
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it('opening the Home tab publishes the view for that user: each machine from its last reading, one never read says so', async () => {
    const r = await open(ALICE);
    expect(r.status).toBe(200);
    const v = await s.slack.waitFor(() => home(ALICE), 20_000);
    const t = textOf(v.view);
    expect(v.view.type).toBe('home');
    expect(t).toMatch(/`kpro5` · 2 GPUs · 1,024 \/ 163,118 MiB GPU memory · RAM 9 %/);
    expect(t).toMatch(/`ct129` · never read by the watchdog yet/);
    expect(t).toContain('No open alerts.');
  });

  it('a new alert republishes the Home of whoever opened it, with the alert; an unstick that opens and finishes comes and goes', async () => {
    await s.slack.waitFor(() => home(ALICE), 20_000);
    const before = home(ALICE)?.publishes ?? 0;
    const now = Date.now();
    const alert: Alert = {
      key: 'kpro5/ghost_memory/1',
      kind: 'ghost_memory',
      machineId: 'kpro5',
      gpu: 1,
      since: now - 700_000,
      raisedAt: now - 100_000,
      sentence: 'GPU 1: 80,000 MiB held by no process on the host.',
      lastSeenAt: now,
    };
    const id = alertIncidentId(alert);
    const meta: IncidentMeta = {
      id,
      kind: 'alert',
      requester: 'watchdog',
      channel: 'C0ALERTS01',
      targets: ['kpro5'],
      text: alert.key,
      reason: null,
      createdAt: new Date(now).toISOString(),
    };
    await log.create(meta);
    await log.append(id, { type: 'alert_raised', at: new Date(now).toISOString(), alert });
    await s.redis.zadd(keys().open, now, id);
    await s.redis.incr(keys().version);
    const withAlert = await s.slack.waitFor(() => {
      const v = home(ALICE);
      return v && v.publishes > before && textOf(v.view).includes('80,000 MiB held by no process') ? v : null;
    }, 30_000);
    expect(textOf(withAlert.view)).toMatch(
      new RegExp(
        `:rotating_light: \`kpro5\`: GPU 1: 80,000 MiB held by no process on the host\\. · since \\d\\d:\\d\\d UTC · \`${id}\``,
      ),
    );
    expect(textOf(withAlert.view)).toContain('*Open alerts* (1)');

    // An unstick opens (the index moves): it shows with its target, requester and state.
    const inc = 'inc_20261201_120000_home01';
    await log.create({
      id: inc,
      kind: 'unstick',
      requester: 'U0REQUEST1',
      channel: 'C0ONCALL01',
      targets: ['ct129'],
      text: 'unstick ct129',
      reason: null,
      createdAt: new Date().toISOString(),
    });
    await log.append(inc, { type: 'requested', at: new Date().toISOString() });
    await log.append(inc, { type: 'started', at: new Date().toISOString(), worker: 'w:1:test' });
    const withInc = await s.slack.waitFor(() => {
      const t = textOf(home(ALICE)?.view);
      return t.includes(inc) ? t : null;
    }, 30_000);
    expect(withInc).toContain(`\`ct129\` · running · asked by <@U0REQUEST1>`);
    // It finishes: gone from Home.
    await log.append(inc, { type: 'finished', at: new Date().toISOString(), outcome: 'ok', durationMs: 1000 });
    await s.slack.waitFor(() => {
      const t = textOf(home(ALICE)?.view);
      return t.includes('No unstick in progress.') && !t.includes(inc) ? t : null;
    }, 30_000);
  });

  it('the Messages tab publishes nothing, and users who never opened Home get nothing published', async () => {
    await open(BOB, 'messages');
    await s.redis.incr(keys().version);
    await s.redis.hset(
      keys().last,
      'ct129',
      JSON.stringify({
        machineId: 'ct129',
        at: Date.now(),
        ok: false,
        code: 'unreachable',
        gpus: 0,
        gpuMemoryUsedMiB: 0,
        gpuMemoryTotalMiB: 0,
        ramPct: null,
        openAlerts: 0,
      } satisfies MachineGlance),
    );
    await s.redis.incr(keys().version);
    // Alice, who opened Home, gets the change...
    await s.slack.waitFor(
      () => (textOf(home(ALICE)?.view).includes('`ct129` · not read: unreachable') ? true : null),
      30_000,
    );
    // ...and nobody else got any view.
    expect(s.slack.homeUsers()).toEqual([ALICE]);
    expect(s.slack.calls('views.publish').every((c) => c.body.user_id === ALICE)).toBe(true);
  });

  it('a Slack error on publish is logged and retried later; the bot keeps answering meanwhile', async () => {
    s.slack.setHomeTabEnabled(false);
    await open(CAROL);
    await s.slack.waitFor(
      () =>
        s.slack
          .calls('views.publish')
          .some((c) => c.body.user_id === CAROL && (c.response as { error?: string }).error === 'not_enabled'),
      20_000,
    );
    await s.slack.waitFor(
      () => (/App Home publish \(views\.publish\) failed: not_enabled/.test(s.logText()) ? true : null),
      10_000,
    );
    expect(home(CAROL)).toBeUndefined();
    // The bot is alive: a command is still acked.
    const help = await s.slash('help');
    expect(help.status).toBe(200);
    // Slack answers 5xx, then comes back: the retry gets through.
    s.slack.failNext('views.publish', 1, { status: 503 });
    s.slack.setHomeTabEnabled(true);
    const v = await s.slack.waitFor(() => home(CAROL), 60_000);
    expect(textOf(v.view)).toContain('`kpro5`');
    const attempts = s.slack.calls('views.publish').filter((c) => c.body.user_id === CAROL);
    expect(attempts.length).toBeGreaterThanOrEqual(2);
  });

  it('what each Home user was last sent is kept in Redis, for Home users only', async () => {
    await open(DAVE);
    await s.slack.waitFor(() => home(DAVE), 20_000);
    // The record is written once views.publish has answered, a moment after the fake Slack holds the view.
    const deadline = Date.now() + 20_000;
    let published: Record<string, string> = {};
    while (Date.now() < deadline) {
      published = await s.redis.hgetall(`${s.prefix}:home:published`);
      if (DAVE in published) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(Object.keys(published).sort()).toEqual([ALICE, CAROL, DAVE].sort());
  });
});

describe('App Home over Socket Mode (the production default)', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: { hosts: [{ id: 'kpro5', gpus: 1, ramTotalGiB: 64, ramUsedGiB: 8 }] },
      socketMode: true,
      noWorkers: true,
    });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("an app_home_opened envelope is acked and publishes that user's Home", async () => {
    const socket = s.socket;
    if (!socket) throw new Error('no Socket Mode server');
    await socket.waitForConnection(20_000);
    const ack = await socket.deliver('events_api', appHomeOpenedPayload({ user: ALICE }), { timeoutMs: 10_000 });
    expect(ack.envelopeId).toBeTruthy();
    const v = await s.slack.waitFor(() => s.slack.homeView(ALICE), 20_000);
    expect(textOf(v.view)).toMatch(/`kpro5` · never read by the watchdog yet/);
    expect(s.slack.homeUsers()).toEqual([ALICE]);
  });
});

describe('App Home with the real watchdog writing its keys', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: { hosts: [{ id: 'kpro5', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 }] },
      env: {
        GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01',
        GPU_MEDIC_WATCH_INTERVAL_SEC: '2',
        GPU_MEDIC_WATCH_GHOST_SEC: '0',
      },
      homePerUserMinMs: 1000,
    });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("the watchdog's reading and its RAM alert reach the Home of who opened it, and the cleared alert leaves it; nothing is signalled", async () => {
    await sendEvent(s.eventsUrl, s.signingSecret, appHomeOpenedPayload({ user: ALICE }));
    await s.slack.waitFor(
      () => (/`kpro5` · 2 GPUs · .* · RAM 9 %/.test(textOf(s.slack.homeView(ALICE)?.view)) ? true : null),
      60_000,
    );
    await s.fleet.setRam('kpro5', { totalGiB: 449, usedGiB: 440 });
    const withAlert = await s.slack.waitFor(() => {
      const t = textOf(s.slack.homeView(ALICE)?.view);
      return /:rotating_light: `kpro5`: .*98 %/.test(t) ? t : null;
    }, 60_000);
    expect(withAlert).toContain('*Open alerts* (1)');
    expect(withAlert).toMatch(/`kpro5` · 2 GPUs · .* · RAM 98 % :warning: · \*1 open alert\*/);
    await s.fleet.setRam('kpro5', { totalGiB: 449, usedGiB: 40 });
    await s.slack.waitFor(
      () => (textOf(s.slack.homeView(ALICE)?.view).includes('No open alerts.') ? true : null),
      60_000,
    );
    expect(s.slack.homeUsers()).toEqual([ALICE]);
    expect(s.fleet.signals()).toEqual([]);
  });
});
