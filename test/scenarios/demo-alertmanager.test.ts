/**
 * The README's Alertmanager picture (test/scenarios/demo-alertmanager.yaml, screenshot.ts) is a
 * scenario like any other: played end to end here (the bot's real /alertmanager receiver, with the
 * token the runner set; the watchdog; Redis; the fake Slack), so what the picture shows is what
 * gpu-medic does. DCGM's Xid is posted once with the watchdog's buttons and says it came from
 * Alertmanager; DCGM's idle-memory alert joins the watchdog's message for the same GPU.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { expectRunClean, file } from './report-helpers.ts';
import { runScenario, type Report } from './run-scenario.ts';

/** The alerts channel as Slack shows it at the end: each message's last posted or edited blocks. */
function alertsChannel(r: Report): Array<{ ts: string; blocks: unknown[] }> {
  const last = new Map<string, unknown[]>();
  for (const c of r.slack.calls)
    if ((c.method === 'chat.postMessage' || c.method === 'chat.update') && c.ok && c.ts !== null)
      if (c.channel === r.alertsChannel.channel) last.set(c.ts, Array.isArray(c.blocks) ? c.blocks : []);
  return [...last].map(([ts, blocks]) => ({ ts, blocks }));
}

const controlsOf = (m: { blocks: unknown[] } | undefined): string[] =>
  ((m?.blocks ?? []) as Array<{ type: string; elements?: Array<{ action_id?: string }> }>)
    .filter((b) => b.type === 'actions')
    .flatMap((b) => b.elements ?? [])
    .map((e) => e.action_id ?? '');

describe('the demo of Alertmanager alerts (the README picture)', () => {
  let r: Report;
  let channel: Array<{ ts: string; blocks: unknown[] }>;
  beforeAll(async () => {
    r = await runScenario(file('demo-alertmanager'));
    channel = alertsChannel(r);
  }, 180_000);

  it('runs cleanly and meets its expect block', () => expectRunClean(r));

  it('the bot took the notification: 200, one alert raised, one joined', () => {
    const step = r.steps.find((s) => 'alertmanager' in s.step);
    expect(step?.result.status).toBe(200);
    expect(JSON.parse(String(step?.result.body))).toMatchObject({ alerts: 2, outcomes: { raised: 1, joined: 1 } });
  });

  it("DCGM's Xid appears once, from Alertmanager, with Status, Unstick and Snooze", () => {
    const xid = channel.filter((m) => JSON.stringify(m.blocks).includes('Xid 79 on GPU 1 of kpro5'));
    expect(xid).toHaveLength(1);
    expect(JSON.stringify(xid[0]?.blocks)).toContain('From Alertmanager: `DcgmXidError`');
    expect(controlsOf(xid[0])).toEqual(
      expect.arrayContaining([
        'gpu_alert_status',
        'gpu_alert_unstick_pick',
        'gpu_alert_snooze_1h',
        'gpu_alert_snooze_gpu_1h',
      ]),
    );
  });

  it('the idle-memory alert and the watchdog make one message for GPU 5, saying both raised it', () => {
    const ghost = channel.filter((m) => JSON.stringify(m.blocks).includes('DcgmGpuMemoryHeldWhileIdle'));
    expect(ghost).toHaveLength(1);
    expect(JSON.stringify(ghost[0]?.blocks)).toContain('Raised by the watchdog and by Alertmanager');
    expect(channel).toHaveLength(2);
  });

  it('nothing was signalled', () => {
    expect(r.signals).toEqual([]);
  });
});
