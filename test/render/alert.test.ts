import { describe, expect, it } from 'vitest';
import { rootCauses } from '../../src/gpu/root-cause.ts';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { renderAlert, type RenderContext } from '../../src/render/alert.ts';
import { renderThread } from '../../src/render/thread.ts';
import type { AlertEvent } from '../../src/watchdog/alert-events.ts';
import { alertIncidentId } from '../../src/watchdog/alert-id.ts';
import { EMPTY_WATCH_STATE, judge, type Alert } from '../../src/watchdog/judge.ts';
import { slackRefusal } from '../harness/slack/fake-slack-api.ts';

const GiB = 2 ** 30;
const T0 = Date.parse('2026-12-01T03:00:00Z');
const MIN = 60_000;

const CTX: RenderContext = {
  machines: [
    { id: 'kpro5', kind: 'host' },
    { id: 'kpro6', kind: 'host' },
    { id: 'ct129', kind: 'container', hostId: 'kpro5' },
    { id: 'ct130', kind: 'container', hostId: 'kpro5' },
    { id: 'ct200', kind: 'container', hostId: 'kpro6' },
  ],
};

/** A host reading as the watchdog sees it; the alert comes from the real judgement. */
function hostSnapshot(machineId: string, o: { ramUsedGiB?: number; used?: number[] } = {}): MachineSnapshot {
  return {
    machineId,
    view: 'host',
    takenAt: new Date(T0).toISOString(),
    gpus: [0, 1].map((i) => ({
      index: i,
      name: 'NVIDIA H200',
      busId: `00000000:0${i + 1}:00.0`,
      uuid: `GPU-0000000${i}-0000-0000-0000-000000000000`,
      memoryUsedMiB: o.used?.[i] ?? 0,
      memoryTotalMiB: 143771,
      utilizationPct: 0,
    })),
    processes: [],
    holders: [],
    kernelMounts: [],
    ram: { totalBytes: 449 * GiB, usedBytes: (o.ramUsedGiB ?? 40) * GiB, availableBytes: null },
    gpuError: null,
  };
}

function judged(machineId: string, snap: MachineSnapshot, at = T0): Alert {
  const j = judge(EMPTY_WATCH_STATE, { machineId, at, ok: true, snapshot: snap });
  const c = j.changes[0];
  if (!c) throw new Error('no alert judged');
  return c.alert;
}

/** Ghost memory as the watchdog raises it: seen at T0 − 11 min, raised at T0 (it must last 10 minutes). */
function ghost(machineId: string, used: number[]): Alert {
  const snap = hostSnapshot(machineId, { used });
  const first = judge(EMPTY_WATCH_STATE, { machineId, at: T0 - 11 * MIN, ok: true, snapshot: snap });
  const c = judge(first.next, { machineId, at: T0, ok: true, snapshot: snap }).changes[0];
  if (c?.type !== 'raise') throw new Error('ghost memory not raised');
  return c.alert;
}

function metaOf(alert: Alert, target = alert.machineId): IncidentMeta {
  return {
    id: alertIncidentId(alert),
    kind: 'alert',
    requester: 'watchdog',
    channel: 'C0ALERTS01',
    targets: [target],
    text: alert.key,
    reason: null,
    createdAt: new Date(alert.since).toISOString(),
  };
}

let seq = 0;
const logged = (e: AlertEvent): AnyLoggedEvent => ({ ...e, id: `${T0}-${seq++}` });
const at = (ms: number): string => new Date(ms).toISOString();

interface El {
  type: string;
  action_id?: string;
  value?: string;
  text?: { text: string };
  options?: Array<{ text: { text: string }; value: string }>;
}
const elementsOf = (blocks: unknown[]): El[] =>
  (blocks as Array<{ type: string; elements?: El[] }>)
    .filter((b) => b.type === 'actions')
    .flatMap((b) => b.elements ?? []);
/** Every text Slack shows: the fallback, and each text object of the blocks (not values: they are never shown). */
/**
 * Every string of a message with what Slack does with it: `mrkdwn` is parsed for markup and
 * `<…>` tokens, plain_text and table cells for `<…>` tokens at most, and a rich_text `text`
 * element (`rich`) for nothing at all (a mention there is an element of its own).
 */
function slackStrings(v: { text: string; blocks: unknown[] }): Array<{ mrkdwn: boolean; rich: boolean; s: string }> {
  const out = [{ mrkdwn: true, rich: false, s: v.text }];
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node !== null && typeof node === 'object') {
      const o = node as Record<string, unknown>;
      if (typeof o.text === 'string' && typeof o.type === 'string')
        out.push({ mrkdwn: o.type === 'mrkdwn', rich: o.type === 'text', s: o.text });
      Object.values(o).forEach(walk);
    }
  };
  walk(v.blocks);
  return out;
}
/** Slack pairs code spans left to right; inside them `*` is inert. */
const outsideCode = (s: string): string => s.replace(/`[^`\n]*`/g, ' ');
const allText = (v: { text: string; blocks: unknown[] }): string => `${v.text}\n${JSON.stringify(v.blocks)}`;

describe('alert message (src/render/alert.ts)', () => {
  it('a raised container alert is one top-level message: condition, machine, since (UTC), the sentence, the next step, Status/Unstick/Snooze buttons carrying only the alert id', () => {
    const alert: Alert = {
      key: 'ct129/ram_high',
      kind: 'ram_high',
      machineId: 'ct129',
      gpu: null,
      since: T0,
      raisedAt: T0,
      sentence: 'host RAM 98 % used (440 of 449 GiB).',
      lastSeenAt: T0,
    };
    const meta = metaOf(alert);
    const views = renderAlert(meta, [logged({ type: 'alert_raised', at: at(T0), alert })], CTX);
    expect(views).toHaveLength(1);
    const v = views[0];
    if (!v) throw new Error('no view');
    expect(v.placement).toBe('parent');
    expect(v.key).toBe('parent');
    const section = JSON.stringify(v.blocks[0]);
    expect(section).toContain('*Host RAM high* on `ct129`');
    // The sentence follows as a rich_text block (machine text as data, never markup).
    expect(JSON.stringify(v.blocks[1])).toContain('Host RAM 98 % used (440 of 449 GiB).');
    expect(allText(v)).toContain('Since 2026-12-01 03:00 UTC');
    expect(allText(v)).toContain('*Next:*');
    expect(allText(v)).toContain(meta.id);
    const els = elementsOf(v.blocks);
    expect(els.map((e) => [e.type, e.action_id, e.text?.text])).toEqual([
      ['button', 'gpu_alert_status', 'Status ct129'],
      ['button', 'gpu_alert_unstick', 'Unstick ct129'],
      ['button', 'gpu_alert_snooze_1h', 'Snooze 1 h'],
      ['button', 'gpu_alert_snooze_1d', 'Snooze 1 day'],
    ]);
    expect(els.every((e) => e.value === meta.id)).toBe(true);
    expect(slackRefusal(v)).toBeNull();
  });

  it("an alert on a host offers Unstick as a pick of that host's containers only, each option `<alert id>|<container>`, plus the GPU snoozes when it has a GPU", () => {
    const raised = ghost('kpro5', [0, 96413]);
    expect(raised.kind).toBe('ghost_memory');
    const meta = metaOf(raised);
    const v = renderAlert(meta, [logged({ type: 'alert_raised', at: at(T0), alert: raised })], CTX)[0];
    if (!v) throw new Error('no view');
    expect(JSON.stringify(v.blocks[0])).toContain('`kpro5` GPU 1');
    expect(allText(v)).toContain('96,413 MiB in use that no process on the host holds');
    const els = elementsOf(v.blocks);
    const pick = els.find((e) => e.type === 'static_select');
    expect(pick?.action_id).toBe('gpu_alert_unstick_pick');
    expect(pick?.options?.map((o) => [o.text.text, o.value])).toEqual([
      ['ct129', `${meta.id}|ct129`],
      ['ct130', `${meta.id}|ct130`],
    ]);
    expect(els.filter((e) => e.type === 'button').map((e) => e.action_id)).toEqual([
      'gpu_alert_status',
      'gpu_alert_snooze_1h',
      'gpu_alert_snooze_1d',
      'gpu_alert_snooze_gpu_1h',
      'gpu_alert_snooze_gpu_1d',
    ]);
    expect(els.find((e) => e.action_id === 'gpu_alert_snooze_gpu_1h')?.text?.text).toBe('Snooze GPU 1 1 h');
    expect(slackRefusal(v)).toBeNull();
  });

  it('a host with no container in the inventory gets no Unstick control and says why', () => {
    const alert = judged('kpro7', hostSnapshot('kpro7', { ramUsedGiB: 440 }));
    const v = renderAlert(metaOf(alert), [logged({ type: 'alert_raised', at: at(T0), alert })], {
      machines: [{ id: 'kpro7', kind: 'host' }],
    })[0];
    if (!v) throw new Error('no view');
    expect(elementsOf(v.blocks).map((e) => e.action_id)).toEqual([
      'gpu_alert_status',
      'gpu_alert_snooze_1h',
      'gpu_alert_snooze_1d',
    ]);
    expect(allText(v)).toContain(
      'No container of `kpro7` is in the inventory, so *Unstick* has nothing to act on here.',
    );
  });

  it('an update says the new sentence and when it changed, in the same single message', () => {
    const alert = judged('kpro5', hostSnapshot('kpro5', { ramUsedGiB: 420 }));
    const later = { ...alert, sentence: 'host RAM 98 % used (440 of 449 GiB).', lastSeenAt: T0 + 6 * MIN };
    const views = renderAlert(
      metaOf(alert),
      [
        logged({ type: 'alert_raised', at: at(T0), alert }),
        logged({ type: 'alert_updated', at: at(T0 + 6 * MIN), alert: later }),
      ],
      CTX,
    );
    expect(views.map((v) => v.key)).toEqual(['parent']);
    const t = allText(views[0] ?? { text: '', blocks: [] });
    expect(t).toContain('Host RAM 98 % used (440 of 449 GiB).');
    expect(t).not.toContain('94 %');
    expect(t).toContain('updated 03:06 UTC');
  });

  it('once cleared it says "Cleared at HH:MM UTC (lasted N min)", keeps what it said, and has no buttons', () => {
    const alert = judged('kpro5', hostSnapshot('kpro5', { ramUsedGiB: 440 }));
    const v = renderAlert(
      metaOf(alert),
      [
        logged({ type: 'alert_raised', at: at(T0), alert }),
        logged({ type: 'alert_cleared', at: at(T0 + 38 * MIN), alert }),
      ],
      CTX,
    )[0];
    if (!v) throw new Error('no view');
    expect(JSON.stringify(v.blocks[0])).toContain('*Cleared at 03:38 UTC (lasted 38 min)*: Host RAM high on `kpro5`');
    expect(allText(v)).toContain('It said: Host RAM 98 % used (440 of 449 GiB).');
    expect(elementsOf(v.blocks)).toEqual([]);
    expect(allText(v)).not.toContain('*Next:*');
    expect(v.text).toContain('Cleared at 03:38 UTC (lasted 38 min)');
  });

  it('the seed\'s root cause that the watchdog appends to a RAM alert ("Why: …") shows on its own line, escaped, and stays once cleared', () => {
    const seed =
      'python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300 --hicache-write-policy write_through --hicache-io-backend kernel';
    const snap = hostSnapshot('kpro5', { ramUsedGiB: 440 });
    const alert = judged('kpro5', {
      ...snap,
      rootCauses: rootCauses({ commandLines: [seed], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 }),
    });
    const raised = logged({ type: 'alert_raised', at: at(T0), alert });
    const v = renderAlert(metaOf(alert), [raised], CTX)[0];
    // The sentence is a rich_text block (machine text stays inert), one line each, the flag name code-styled
    // (no look-alike backticks); the fallback text shows the same lines with mrkdwn code spans.
    type Section = { elements: Array<{ type: string; text?: string; name?: string; style?: { code?: boolean } }> };
    const said = v!.blocks[1] as unknown as { type: string; elements: Section[] };
    expect(said.type).toBe('rich_text');
    const shown = said.elements.map((sec) =>
      sec.elements.map((e) => (e.type === 'emoji' ? `:${e.name}:` : e.style?.code ? `[${e.text}]` : e.text)).join(''),
    );
    expect(shown).toEqual([
      'Host RAM 98 % used (440 of 449 GiB).\n',
      ':bulb: Why: 8 ranks × 300 GB host cache ([--hicache-size] is per rank) = 2.4 TB requested on a 449 GiB host: more than its RAM.\n',
    ]);
    expect(JSON.stringify(v!.blocks)).not.toContain('ˋ');
    expect(v!.text).toContain(':bulb: Why: 8 ranks × 300 GB host cache (`--hicache-size` is per rank)');
    const cleared = renderAlert(
      metaOf(alert),
      [raised, logged({ type: 'alert_cleared', at: at(T0 + 5 * MIN), alert })],
      CTX,
    )[0];
    expect(cleared?.text).toContain(':bulb: Why: 8 ranks × 300 GB host cache');
  });

  it('a snooze says until when and by whom, per scope, and the buttons stay', () => {
    const raised = ghost('kpro5', [96413, 0]);
    const events = [
      logged({ type: 'alert_raised', at: at(T0), alert: raised }),
      logged({ type: 'alert_snoozed', at: at(T0 + MIN), by: 'U0ALICE001', scope: 'kpro5/0', until: at(T0 + 61 * MIN) }),
      logged({
        type: 'alert_snoozed',
        at: at(T0 + 2 * MIN),
        by: 'U0BOB00001',
        scope: 'kpro5',
        until: at(T0 + 2 * MIN + 24 * 60 * MIN),
      }),
    ];
    const v = renderAlert(metaOf(raised), events, CTX)[0];
    if (!v) throw new Error('no view');
    const t = allText(v);
    expect(t).toContain('GPU 0 of `kpro5` snoozed until 2026-12-01 04:01 UTC by <@U0ALICE001>');
    expect(t).toContain('all of `kpro5` snoozed until 2026-12-02 03:02 UTC by <@U0BOB00001>');
    expect(elementsOf(v.blocks).length).toBeGreaterThan(0);
  });

  it('each click shows who clicked what and the incident it opened or why it was refused', () => {
    const alert = judged('kpro5', hostSnapshot('kpro5', { ramUsedGiB: 440 }));
    const v = renderAlert(
      metaOf(alert),
      [
        logged({ type: 'alert_raised', at: at(T0), alert }),
        logged({
          type: 'alert_action',
          at: at(T0 + MIN),
          by: 'U0ALICE001',
          action: 'status',
          incidentId: 'inc_20261201_030100_abc123',
          refused: null,
          target: 'kpro5',
        }),
        logged({
          type: 'alert_action',
          at: at(T0 + 2 * MIN),
          by: 'U0CAROL001',
          action: 'unstick',
          incidentId: null,
          refused: 'policy',
          target: 'ct129',
        }),
      ],
      CTX,
    )[0];
    if (!v) throw new Error('no view');
    const t = allText(v);
    expect(t).toContain('Status `kpro5` by <@U0ALICE001> at 03:01 UTC: incident `inc_20261201_030100_abc123`');
    expect(t).toContain(
      "Unstick `ct129` by <@U0CAROL001> at 03:02 UTC: refused: not allowed by gpu-medic's policy (user or channel)",
    );
  });

  it('hostile text in the sentence, the machine id, a container id and a clicker id stays data: no mention, link, markup or extra line forms', () => {
    const evil = '<!channel> *LIVE* <https://evil.example|click>\n> FORGED `x` &amp;';
    const alert: Alert = {
      key: 'k',
      kind: 'xid',
      machineId: `kpro5${evil}`,
      gpu: 0,
      since: T0,
      raisedAt: T0,
      sentence: `Xid 79 ${evil}`,
      lastSeenAt: T0,
    };
    const meta = metaOf(alert);
    const ctx: RenderContext = {
      machines: [
        { id: alert.machineId, kind: 'host' },
        { id: `ct${evil}`, kind: 'container', hostId: alert.machineId },
      ],
    };
    const events = [
      logged({ type: 'alert_raised', at: at(T0), alert }),
      logged({ type: 'alert_snoozed', at: at(T0), by: `U0X${evil}`, scope: alert.machineId, until: at(T0 + 60 * MIN) }),
      logged({
        type: 'alert_action',
        at: at(T0),
        by: `<@U0EVIL>`,
        action: 'unstick',
        incidentId: null,
        refused: evil,
        target: `ct${evil}`,
      }),
    ];
    const views = [
      ...renderAlert(meta, events, ctx),
      ...renderAlert(meta, [...events, logged({ type: 'alert_cleared', at: at(T0 + MIN), alert })], ctx),
    ];
    expect(views).toHaveLength(2);
    for (const v of views) {
      for (const { mrkdwn, rich, s } of slackStrings(v)) {
        if (!rich) expect(s).not.toContain('<');
        for (const line of s.split('\n')) expect(line).not.toMatch(/^[\s>]*FORGED/);
        if (mrkdwn) expect(outsideCode(s)).not.toContain('*LIVE');
      }
      expect(slackRefusal(v)).toBeNull();
      // In rich_text the data is literal text: no broadcast, link or user element came from it.
      expect(JSON.stringify(v.blocks)).not.toMatch(/"type":"(broadcast|link|user|channel)"/);
    }
  });

  it('renderThread sends alert incidents here, with the inventory context', () => {
    const alert: Alert = {
      key: 'ct129/ram_high',
      kind: 'ram_high',
      machineId: 'ct129',
      gpu: null,
      since: T0,
      raisedAt: T0,
      sentence: 'host RAM 98 % used (440 of 449 GiB).',
      lastSeenAt: T0,
    };
    const views = renderThread(metaOf(alert), [logged({ type: 'alert_raised', at: at(T0), alert })], CTX);
    expect(elementsOf(views[0]?.blocks ?? []).map((e) => e.action_id)).toContain('gpu_alert_unstick');
  });
});
