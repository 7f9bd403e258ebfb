import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readHomeModel } from '../../src/slack/home.ts';
import { watchKeys } from '../../src/watch-store/watch-keys.ts';
import { WatchRoundStore } from '../../src/watch-store/watch-round-store.ts';
import type { Alert } from '../../src/watchdog/judge.ts';
import type { MachineGlance } from '../../src/watchdog/watch-glance.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { startStack, type Stack } from '../harness/stack.ts';
import { type AmAlert, payload, postAlerts } from './am-rig.ts';

const ALERTS = 'C0ALERTS01';
const TOKEN = 'am-token-0123456789abcdef0123456789abcdef';
const UUID = 'GPU-3f0c2a44-1b7e-4c59-9c0d-2d6a1e5b7f10';

const buttonsOf = (m: StoredMessage | undefined): string[] =>
  ((m?.blocks ?? []) as Array<{ type: string; elements?: Array<{ action_id?: string }> }>)
    .filter((b) => b.type === 'actions')
    .flatMap((b) => b.elements ?? [])
    .map((e) => e.action_id ?? '');
const shown = (m: StoredMessage | undefined): string => `${m?.text ?? ''}\n${JSON.stringify(m?.blocks ?? [])}`;

/**
 * What Slack would parse as markup (the message text and every mrkdwn or plain_text object) apart
 * from rich_text's inline elements, whose `text` Slack shows as it is: there a mention or a link can
 * only be an element of its own type.
 */
function markupParts(m: StoredMessage | undefined): { markup: string[]; richTypes: string[]; richText: string } {
  const markup: string[] = [m?.text ?? ''];
  const richTypes: string[] = [];
  let richText = '';
  const walk = (v: unknown, inRich: boolean): void => {
    if (Array.isArray(v)) {
      for (const x of v) walk(x, inRich);
      return;
    }
    if (typeof v !== 'object' || v === null) return;
    const o = v as Record<string, unknown>;
    const rich = inRich || o.type === 'rich_text';
    if (!rich && (o.type === 'mrkdwn' || o.type === 'plain_text') && typeof o.text === 'string') markup.push(o.text);
    if (rich && typeof o.type === 'string') richTypes.push(o.type);
    if (rich && o.type === 'text' && typeof o.text === 'string') richText += o.text;
    for (const x of Object.values(o)) walk(x, rich);
  };
  walk(m?.blocks ?? [], false);
  return { markup, richTypes, richText };
}

describe('the Alertmanager receiver on the bot HTTP port (real Bolt server, real Redis, fake Slack)', () => {
  let s: Stack;
  let url: string;
  let seq = 0;

  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2 }],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      noWorkers: true,
      botEnv: { GPU_MEDIC_ALERTS_CHANNEL: ALERTS, GPU_MEDIC_ALERTMANAGER_TOKEN: TOKEN },
    });
    url = `${s.eventsUrl.replace('/slack/events', '')}/alertmanager`;
  });
  afterAll(async () => {
    await s?.stop();
  });

  const fp = (): string => (0xabc000 + seq++).toString(16);
  const xid = (
    status: 'firing' | 'resolved',
    fingerprint: string,
    summary: string,
    extra: Partial<AmAlert> = {},
  ): AmAlert => ({
    status,
    fingerprint,
    labels: { alertname: 'DcgmXidError', Hostname: 'kpro5', gpu: '1', UUID, severity: 'critical', ...extra.labels },
    annotations: { summary },
    ...(extra.startsAt ? { startsAt: extra.startsAt } : {}),
  });
  const withText = (t: string) => (): StoredMessage | undefined =>
    s.slack.messages(ALERTS).find((m) => shown(m).includes(t));

  it('a firing alert is posted once with its buttons, a repeat that says more edits it, resolved marks it cleared', async () => {
    const f = fp();
    const before = s.slack.calls('chat.postMessage').length;
    const r = await postAlerts(url, payload([xid('firing', f, 'Xid 79 on GPU 1 (first)')]), TOKEN);
    expect(r.status).toBe(200);
    const posted = await s.slack.waitFor(withText('Xid 79 on GPU 1 (first)'), 15_000);
    expect(buttonsOf(posted)).toEqual(
      expect.arrayContaining(['gpu_alert_status', 'gpu_alert_snooze_1h', 'gpu_alert_snooze_gpu_1h']),
    );
    expect(shown(posted)).toContain('From Alertmanager');
    expect(shown(posted)).toContain('|source>');
    // The same notification again (Alertmanager's retry, or a repeat saying the same): nothing new.
    expect((await postAlerts(url, payload([xid('firing', f, 'Xid 79 on GPU 1 (first)')]), TOKEN)).status).toBe(200);
    expect((await postAlerts(url, payload([xid('firing', f, 'Xid 79 on GPU 1 (again)')]), TOKEN)).status).toBe(200);
    const edited = await s.slack.waitFor(withText('Xid 79 on GPU 1 (again)'), 15_000);
    expect(edited.ts).toBe(posted.ts);
    expect((await postAlerts(url, payload([xid('resolved', f, 'Xid 79 on GPU 1 (again)')]), TOKEN)).status).toBe(200);
    const cleared = await s.slack.waitFor(() => {
      const m = s.slack.messages(ALERTS).find((x) => x.ts === posted.ts);
      return m && shown(m).includes('Cleared at') ? m : null;
    }, 15_000);
    expect(buttonsOf(cleared)).toEqual([]);
    expect(s.slack.calls('chat.postMessage').length - before).toBe(1);
  });

  it('an alert that names no machine is posted saying why it has no buttons', async () => {
    const r = await postAlerts(
      url,
      payload([
        {
          status: 'firing',
          fingerprint: fp(),
          labels: { alertname: 'DcgmXidError', Hostname: 'gpu-node-99' },
          annotations: { summary: 'Xid on an unknown node' },
        },
      ]),
      TOKEN,
    );
    expect(r.status).toBe(200);
    const m = await s.slack.waitFor(withText('Xid on an unknown node'), 15_000);
    expect(buttonsOf(m)).toEqual([]);
    expect(shown(m)).toContain('No buttons: its Hostname label (gpu-node-99) names no machine');
  });

  it('label and annotation text with Slack markup is shown as data: no mention, link or formatting forms', async () => {
    const evil = '<!channel> *bold* <https://evil.example|click> `$(reboot)`; rm -rf /';
    const r = await postAlerts(
      url,
      payload([
        {
          status: 'firing',
          fingerprint: fp(),
          labels: { alertname: evil, Hostname: evil },
          annotations: { summary: evil },
        },
      ]),
      TOKEN,
    );
    expect(r.status).toBe(200);
    const m = await s.slack.waitFor(withText('rm -rf /'), 15_000);
    const { markup, richTypes, richText } = markupParts(m);
    for (const t of markup) {
      expect(t).not.toContain('<!channel>');
      expect(t).not.toContain('<https://evil.example');
    }
    expect(markup.join('\n')).toContain('&lt;!channel&gt;');
    // In rich_text the text is data, shown as typed; no element may broadcast, link or mention.
    for (const t of ['broadcast', 'link', 'channel', 'user', 'usergroup']) expect(richTypes).not.toContain(t);
    if (richTypes.length > 0) expect(richText).toContain('<!channel> *bold*');
  });

  it('refuses a missing or wrong token (401), a body that is not JSON or not version 4 (400), one too large (413), recording nothing', async () => {
    const count = async (): Promise<number> => (await s.redis.zcard(`${s.prefix}:incidents`)) ?? 0;
    const before = await count();
    const good = payload([xid('firing', fp(), 'never shown')]);
    expect((await postAlerts(url, good, null)).status).toBe(401);
    expect((await postAlerts(url, good, `${TOKEN}x`)).status).toBe(401);
    const notJson = await postAlerts(url, '{"version": "4", ', TOKEN);
    expect(notJson.status).toBe(400);
    const v3 = await postAlerts(url, { ...good, version: '3' }, TOKEN);
    expect(v3.status).toBe(400);
    expect(v3.body).toContain('unknown payload version');
    const huge = await postAlerts(url, { ...good, pad: 'x'.repeat(2 * 1024 * 1024) }, TOKEN);
    expect(huge.status).toBe(413);
    expect(await count()).toBe(before);
    expect(s.slack.messages(ALERTS).some((m) => shown(m).includes('never shown'))).toBe(false);
  });

  /** The watchdog's commit of one raise or clear of a ghost-memory alert on kpro5 GPU 1, as a round would commit it. */
  async function watchdogCommit(type: 'raise' | 'clear', alert: Alert): Promise<void> {
    const store = new WatchRoundStore(s.redis, s.prefix, ALERTS);
    const stored = await store.load('kpro5');
    const alerts = { ...stored.state.alerts };
    if (type === 'raise') alerts[alert.key] = alert;
    else delete alerts[alert.key];
    const glance: MachineGlance = {
      machineId: 'kpro5',
      at: alert.lastSeenAt,
      ok: true,
      code: null,
      gpus: 2,
      gpuMemoryUsedMiB: 0,
      gpuMemoryTotalMiB: 0,
      ramPct: 10,
      openAlerts: Object.keys(alerts).length,
    };
    const ok = await store.commit(
      'kpro5',
      stored.raw,
      { ...stored.state, alerts, lastReadingAt: alert.lastSeenAt },
      [type === 'raise' ? { type, alert } : { type, alert, at: alert.lastSeenAt + 1000 }],
      glance,
      alert.lastSeenAt,
    );
    expect(ok).toBe(true);
  }

  const ghost = (): Alert => {
    const since = Date.now() - 600_000 - seq++ * 1000;
    return {
      key: `kpro5/ghost_memory/${UUID}`,
      kind: 'ghost_memory',
      machineId: 'kpro5',
      gpu: 1,
      gpuUuid: UUID,
      since,
      raisedAt: since,
      sentence: 'GPU 1: 30,000 MiB in use that no process on the host holds.',
      lastSeenAt: since,
    };
  };
  const amGhost = (status: 'firing' | 'resolved', f: string, summary: string): AmAlert => ({
    status,
    fingerprint: f,
    labels: {
      alertname: 'DcgmGpuMemoryHeldWhileIdle',
      Hostname: 'kpro5',
      gpu: '1',
      UUID: UUID.toUpperCase().replace('GPU-', 'GPU-'),
    },
    annotations: { summary },
  });
  const ghostMessages = (): StoredMessage[] =>
    s.slack.messages(ALERTS).filter((m) => shown(m).includes('GPU memory held with no process'));

  it('the same condition raised by the watchdog first and Alertmanager second is one message, cleared when both have cleared', async () => {
    const before = ghostMessages().length;
    const a = ghost();
    await watchdogCommit('raise', a);
    const first = await s.slack.waitFor(() => ghostMessages()[before], 15_000);
    const f = fp();
    expect(
      (await postAlerts(url, payload([amGhost('firing', f, 'framebuffer used while idle on GPU 1')]), TOKEN)).status,
    ).toBe(200);
    const joined = await s.slack.waitFor(() => {
      const m = s.slack.messages(ALERTS).find((x) => x.ts === first.ts);
      return m && shown(m).includes('Raised by the watchdog and by Alertmanager') ? m : null;
    }, 15_000);
    expect(shown(joined)).toContain('30,000 MiB'); // the watchdog's reading is what it shows
    await watchdogCommit('clear', { ...a, lastSeenAt: a.lastSeenAt + 60_000 });
    expect(
      (await postAlerts(url, payload([amGhost('resolved', f, 'framebuffer used while idle on GPU 1')]), TOKEN)).status,
    ).toBe(200);
    await s.slack.waitFor(() => {
      const m = s.slack.messages(ALERTS).find((x) => x.ts === first.ts);
      return m && shown(m).includes('Cleared at') ? m : null;
    }, 15_000);
    expect(ghostMessages().length - before).toBe(1);
    expect(await s.redis.hget(watchKeys(s.prefix).conditions, `kpro5|${UUID.toLowerCase()}|ghost_memory`)).toBeNull();
  });

  it('the same condition raised by Alertmanager first and the watchdog second is one message; the watchdog clearing first leaves it open', async () => {
    const before = ghostMessages().length;
    const f = fp();
    expect(
      (await postAlerts(url, payload([amGhost('firing', f, 'framebuffer used while idle (am first)')]), TOKEN)).status,
    ).toBe(200);
    const first = await s.slack.waitFor(() => {
      const m = ghostMessages()[before];
      return m && shown(m).includes('am first') ? m : null;
    }, 15_000);
    const a = ghost();
    await watchdogCommit('raise', a);
    await s.slack.waitFor(() => {
      const m = s.slack.messages(ALERTS).find((x) => x.ts === first.ts);
      return m && shown(m).includes('30,000 MiB') ? m : null;
    }, 15_000);
    await watchdogCommit('clear', { ...a, lastSeenAt: a.lastSeenAt + 60_000 });
    // Alertmanager still fires: the message stays open (it shows Alertmanager's words again).
    const still = await s.slack.waitFor(() => {
      const m = s.slack.messages(ALERTS).find((x) => x.ts === first.ts);
      return m && shown(m).includes('am first') ? m : null;
    }, 15_000);
    expect(shown(still)).not.toContain('Cleared at');
    // App Home lists it as open too (it is cleared only once both sources have cleared).
    const home = await readHomeModel(s.redis, s.prefix, ['kpro5'], { ramPct: 90, staleAfterMs: 60_000 }, Date.now());
    const listed = home.alerts.find((x) => x.alert?.key.startsWith('alertmanager:') && x.alert.kind === 'ghost_memory');
    expect(listed?.cleared).toBe(false);
    expect(
      (await postAlerts(url, payload([amGhost('resolved', f, 'framebuffer used while idle (am first)')]), TOKEN))
        .status,
    ).toBe(200);
    await s.slack.waitFor(() => {
      const m = s.slack.messages(ALERTS).find((x) => x.ts === first.ts);
      return m && shown(m).includes('Cleared at') ? m : null;
    }, 15_000);
    expect(ghostMessages().length - before).toBe(1);
  });
});
