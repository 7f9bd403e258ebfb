/**
 * The watchdog's scenario files (what a user sees of its alerts): every file in this folder with
 * `settings.watch` is played end to end here (real Redis, sshd fleet, Bolt receiver, fake Slack, the workers'
 * watchdog every 2 s, the worker as its own process when a step restarts it) and must meet its own `expect:`
 * block; scenarios.test.ts leaves them to this file. On top of each file's block: the watchdog never signals
 * by itself, and every alert in the alerts channel is one message per episode.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { byLabel, expectRunClean, FILES, file, HERE } from './report-helpers.ts';
import { runScenario, type Report } from './run-scenario.ts';
import { parseScenario } from './schema.ts';

const WATCH_FILES = FILES.filter(
  (f) => parseScenario(readFileSync(join(HERE, f), 'utf8'), f).settings.watch !== undefined,
);

const alertsOf = (r: Report, kind: string, machine: string) =>
  r.alerts.filter((a) => a.kind === kind && a.machine === machine);

describe('watchdog scenario files', () => {
  it('S15, S16 and S17 are among them', () => {
    expect(WATCH_FILES.filter((f) => /^s1[5-7]-/.test(f))).toHaveLength(3);
  });
});

describe('S15 host RAM high: raise, crash and restart, edit in place, snooze, clear', () => {
  let r: Report;
  beforeAll(async () => {
    r = await runScenario(file('s15-'));
  }, 180_000);

  it('runs cleanly and meets its expect block', () => expectRunClean(r));

  it('one message, created before the restarts and edited by the new bot: its ts never changes and no second one is posted', () => {
    const [a] = alertsOf(r, 'ram_high', 'kpro5');
    const posts = r.slack.calls.filter(
      (c) => c.method === 'chat.postMessage' && c.channel === r.alertsChannel.channel && c.ok,
    );
    expect(posts.map((c) => c.ts)).toEqual([a?.messages[0]?.ts]);
    const restarts = r.steps.filter((s) => 'restart' in s.step).map((s) => s.t);
    const updates = r.slack.calls
      .filter((c) => c.method === 'chat.update' && c.ts === a?.messages[0]?.ts && c.ok)
      .map((c) => c.t);
    expect(updates.some((t) => t > (restarts[0] ?? Infinity))).toBe(true);
  });

  it('cleared while the bot was down, and shown once it was back: the clear was not lost', () => {
    const [a] = alertsOf(r, 'ram_high', 'kpro5');
    const stepT = (key: string, value: string) =>
      r.steps.find((x) => (x.step as Record<string, unknown>)[key] === value)?.t ?? NaN;
    const botDown = stepT('down', 'bot');
    const botUp = stepT('up', 'bot');
    // Events carry wall-clock times, steps ms since the first step (startedAt + startupMs, to a few ms).
    const t0 = Date.parse(r.startedAt) + r.startupMs;
    const clearedAt = Date.parse(String(a?.events.find((e) => e.type === 'alert_cleared')?.at)) - t0;
    expect(clearedAt).toBeGreaterThan(botDown);
    expect(clearedAt).toBeLessThan(botUp);
    const shown = r.slack.calls.find(
      (c) =>
        c.method === 'chat.update' && c.ts === a?.messages[0]?.ts && /Cleared/.test(JSON.stringify(c.blocks ?? c.text)),
    );
    expect(shown?.t).toBeGreaterThan(botUp);
  });

  it('the watchdog signalled nothing and nothing but reads ran', () => {
    expect(r.signals).toEqual([]);
  });
});

describe('S16 every alert kind across restarts', () => {
  let r: Report;
  beforeAll(async () => {
    r = await runScenario(file('s16-'));
  }, 240_000);

  it('runs cleanly and meets its expect block', () => expectRunClean(r));

  it('every alert kind but ram_high (S15, S17) and unreachable was raised, each alert exactly once', () => {
    const kinds = [...new Set(r.alerts.map((a) => a.kind))].sort();
    expect(kinds).toEqual([
      'ghost_memory',
      'gpu_error',
      'gpus_missing',
      'holder_stuck',
      'nvidia_smi_failing',
      'recovery_action',
      'xid',
    ]);
    expect(r.alerts.every((a) => a.raised === 1 && a.messages.length === 1)).toBe(true);
  });

  it('a snoozed alert was not edited by the change made while it was snoozed', () => {
    const [ghost] = alertsOf(r, 'ghost_memory', 'kpro1');
    expect(ghost?.events.filter((e) => e.type === 'alert_updated')).toHaveLength(1);
    const [ra] = alertsOf(r, 'recovery_action', 'kpro6');
    expect(ra?.events.filter((e) => e.type === 'alert_updated')).toHaveLength(1);
  });

  it('the watchdog signalled nothing, not even the zombie or the sleeper', () => {
    expect(r.signals).toEqual([]);
  });
});

describe('S17 Unstick from an alert: the clicker is the requester, a second person approves', () => {
  let r: Report;
  beforeAll(async () => {
    r = await runScenario(file('s17-'));
  }, 180_000);

  it('runs cleanly and meets its expect block', () => expectRunClean(r));

  it("the status and the unstick the clicks opened are alice's, in the alerts channel, and the alert logged both", () => {
    const look = byLabel(r, 'look');
    const fix = byLabel(r, 'fix');
    expect([look.kind, look.requester, look.channel]).toEqual(['status', r.users.alice, 'C0ALERTS01']);
    expect([fix.kind, fix.requester, fix.channel]).toEqual(['unstick', r.users.alice, 'C0ALERTS01']);
    const [a] = alertsOf(r, 'ram_high', 'kpro5');
    const actions = a?.events.filter((e) => e.type === 'alert_action').map((e) => [e.action, e.incidentId]);
    expect(actions).toEqual([
      ['status', look.id],
      ['unstick', fix.id],
    ]);
  });

  it('every signal came from the approved host kill, after bob approved', () => {
    const fix = byLabel(r, 'fix');
    const approved = fix.events.find((e) => e.type === 'approval_decided' && e.decision === 'approved');
    expect(approved?.by).toBe(r.users.bob);
    expect(r.signals.map((s) => s.process).sort()).toEqual(['tp0', 'tp1']);
  });
});
