import { describe, expect, it } from 'vitest';
import {
  HOME_BLOCKS_MAX,
  renderHome,
  unstickStateOf,
  type HomeAlert,
  type HomeIncident,
  type HomeMachine,
  type HomeModel,
} from '../../src/render/home.ts';
import type { Alert } from '../../src/watchdog/judge.ts';
import type { MachineGlance } from '../../src/watchdog/watch-glance.ts';

const NOW = Date.parse('2026-12-01T12:00:00.000Z');

function glance(machineId: string, o: Partial<MachineGlance> = {}): MachineGlance {
  return {
    machineId,
    at: NOW - 60_000,
    ok: true,
    code: null,
    gpus: 8,
    gpuMemoryUsedMiB: 12_345,
    gpuMemoryTotalMiB: 786_432,
    ramPct: 42,
    openAlerts: 0,
    ...o,
  };
}

function alert(machineId: string, o: Partial<Alert> = {}): Alert {
  return {
    key: `${machineId}/ram_high`,
    kind: 'ram_high',
    machineId,
    gpu: null,
    since: NOW - 600_000,
    raisedAt: NOW - 600_000,
    sentence: 'host RAM 98 % used (439 of 449 GiB).',
    lastSeenAt: NOW - 60_000,
    ...o,
  };
}

function model(o: Partial<HomeModel> = {}): HomeModel {
  return { now: NOW, machines: [], alerts: [], incidents: [], ramPct: 90, staleAfterMs: 15 * 60_000, ...o };
}

/** Every text of the view (section, context, header), in order. */
function texts(blocks: unknown): string[] {
  const out: string[] = [];
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) n.forEach(walk);
    else if (n !== null && typeof n === 'object') {
      const o = n as Record<string, unknown>;
      if (typeof o.text === 'string') out.push(o.text);
      Object.values(o).forEach(walk);
    }
  };
  walk(blocks);
  return out;
}

/** Slack's limits for a Home view: 100 blocks, 3,000 per section or context text, 150 per header, 250 kB. */
function limitProblems(view: { type: string; blocks: unknown[] }): string[] {
  const p: string[] = [];
  if (view.type !== 'home') p.push('type');
  if (view.blocks.length > 100) p.push(`${view.blocks.length} blocks`);
  if (Buffer.byteLength(JSON.stringify(view)) > 250_000) p.push('over 250 kB');
  for (const b of view.blocks as Array<{ type: string; text?: { text: string }; elements?: Array<{ text: string }> }>) {
    if (b.type === 'header' && (b.text?.text.length ?? 0) > 150) p.push('header too long');
    if (b.type === 'section' && (b.text?.text.length ?? 0) > 3000) p.push('section too long');
    for (const e of b.elements ?? []) if (e.text.length > 3000) p.push('context too long');
  }
  return p;
}

describe('App Home view (pure)', () => {
  it('one line per machine from its last reading; a machine never read says so', () => {
    const machines: HomeMachine[] = [
      { id: 'kpro5', glance: glance('kpro5') },
      {
        id: 'kpro6',
        glance: glance('kpro6', {
          ok: false,
          code: 'unreachable',
          gpus: 0,
          gpuMemoryUsedMiB: 0,
          gpuMemoryTotalMiB: 0,
          ramPct: null,
        }),
      },
      { id: 'ct129', glance: null },
    ];
    const all = texts(renderHome(model({ machines })).blocks).join('\n');
    expect(all).toMatch(/`kpro5` · 8 GPUs · 12,345 \/ 786,432 MiB GPU memory · RAM 42 % · read 11:59 UTC/);
    expect(all).toMatch(/`kpro6` · not read: unreachable · read 11:59 UTC/);
    expect(all).toMatch(/`ct129` · never read by the watchdog yet/);
    expect(all).toContain('3 machines (1 with trouble, 1 never read)');
  });

  it('troubled machines come first: unreachable, open alerts and RAM over the threshold before healthy ones', () => {
    const machines: HomeMachine[] = [
      { id: 'a-ok', glance: glance('a-ok') },
      { id: 'b-ram', glance: glance('b-ram', { ramPct: 95 }) },
      { id: 'c-alert', glance: glance('c-alert', { openAlerts: 2 }) },
    ];
    const lines = texts(renderHome(model({ machines })).blocks)
      .join('\n')
      .split('\n')
      .filter((l) => l.includes('· read'));
    expect(lines.map((l) => /`([a-z-]+)`/.exec(l)?.[1])).toEqual(['b-ram', 'c-alert', 'a-ok']);
    expect(lines[1]).toContain('*2 open alerts*');
    expect(lines[0]).toContain('RAM 95 % :warning:');
  });

  it('a reading older than the stale bound says how old it is', () => {
    const machines: HomeMachine[] = [{ id: 'kpro5', glance: glance('kpro5', { at: NOW - 3 * 3600_000 }) }];
    expect(texts(renderHome(model({ machines })).blocks).join('\n')).toContain('read 09:00 UTC (stale: 3 hours old)');
  });

  it('open alerts with machine, GPU, sentence and since; snoozed and cleared ones say so; an unreadable one is listed, not dropped', () => {
    const alerts: HomeAlert[] = [
      {
        incidentId: 'inc_alert_aaaa',
        alert: alert('kpro5', {
          kind: 'ghost_memory',
          gpu: 3,
          key: 'kpro5/ghost_memory/3',
          sentence: 'GPU 3: 80,000 MiB held by no process.',
        }),
        cleared: false,
        snoozedUntil: new Date(NOW + 3600_000).toISOString(),
      },
      { incidentId: 'inc_alert_bbbb', alert: alert('kpro6'), cleared: true, snoozedUntil: null },
      { incidentId: 'inc_alert_cccc', alert: null, cleared: false, snoozedUntil: null },
    ];
    const all = texts(renderHome(model({ alerts })).blocks).join('\n');
    expect(all).toContain('*Open alerts* (3)');
    expect(all).toMatch(
      /:rotating_light: `kpro5`: GPU 3: 80,000 MiB held by no process\. · since 11:50 UTC · snoozed until 13:00 UTC · `inc_alert_aaaa`/,
    );
    expect(all).toMatch(
      /:white_check_mark: `kpro6`: host RAM 98 % used \(439 of 449 GiB\)\. · cleared · `inc_alert_bbbb`/,
    );
    expect(all).toMatch(/alert `inc_alert_cccc`: its events could not be read/);
  });

  it('unstick incidents in progress with target, requester and state', () => {
    const incidents: HomeIncident[] = [
      {
        id: 'inc_20261201_115500_abcd',
        targets: ['ct129'],
        requester: 'U0REQUEST1',
        state: 'waiting for approval',
        createdAt: '2026-12-01T11:55:00.000Z',
      },
    ];
    const all = texts(renderHome(model({ incidents })).blocks).join('\n');
    expect(all).toContain(
      '`ct129` · *waiting for approval* · asked by <@U0REQUEST1> · opened 11:55 UTC · `inc_20261201_115500_abcd`',
    );
    expect(all).toContain('1 unstick in progress');
  });

  it('empty fleet, no alerts, no incidents: each part says so', () => {
    const all = texts(renderHome(model()).blocks).join('\n');
    expect(all).toContain('No open alerts.');
    expect(all).toContain('No unstick in progress.');
    expect(all).toContain('No machines in the inventory.');
  });

  it('500 machines, 300 alerts, 100 incidents: within Slack limits, and every machine is either listed or counted in "+N more"', () => {
    const machines: HomeMachine[] = Array.from({ length: 500 }, (_, i) => ({
      id: `host-${String(i).padStart(3, '0')}.example-site-long-name`,
      glance:
        i % 7 === 0
          ? null
          : glance(`host-${i}`, {
              ok: i % 5 !== 0,
              code: i % 5 === 0 ? 'command_timeout' : null,
              openAlerts: i % 11 === 0 ? 3 : 0,
            }),
    }));
    const alerts: HomeAlert[] = Array.from({ length: 300 }, (_, i) => ({
      incidentId: `inc_alert_${String(i).padStart(20, '0')}`,
      alert: alert(`host-${i}`, { sentence: `a sentence long enough to matter ${'x'.repeat(120)}` }),
      cleared: false,
      snoozedUntil: null,
    }));
    const incidents: HomeIncident[] = Array.from({ length: 100 }, (_, i) => ({
      id: `inc_20261201_115500_${i}`,
      targets: [`ct${i}`],
      requester: 'U0REQUEST1',
      state: 'running',
      createdAt: '2026-12-01T11:55:00.000Z',
    }));
    const view = renderHome(model({ machines, alerts, incidents }));
    expect(limitProblems(view)).toEqual([]);
    expect(view.blocks.length).toBeLessThanOrEqual(HOME_BLOCKS_MAX);
    const all = texts(view.blocks).join('\n');
    const listed = machines.filter((m) => all.includes(`\`${m.id}\``)).length;
    const more = Number(/\+(\d+) more machines, see `\/gpu status all`/.exec(all)?.[1] ?? '0');
    expect(listed + more).toBe(500);
    const listedAlerts = alerts.filter((a) => all.includes(`\`${a.incidentId}\``)).length;
    const moreAlerts = Number(/\+(\d+) more open alerts/.exec(all)?.[1] ?? '0');
    expect(listedAlerts + moreAlerts).toBe(300);
    expect(moreAlerts).toBeGreaterThan(0);
    const listedInc = incidents.filter((x) => all.includes(`\`${x.id}\``)).length;
    const moreInc = Number(/\+(\d+) more unsticks in progress/.exec(all)?.[1] ?? '0');
    expect(listedInc + moreInc).toBe(100);
    // The cut hides the calmest: every troubled machine is listed before any healthy one is.
    const troubled = machines.filter((m) => m.glance === null || !m.glance.ok || m.glance.openAlerts > 0);
    const firstHealthyAt = all.indexOf(':large_green_circle:');
    for (const m of troubled.slice(0, 20))
      expect(all.indexOf(`\`${m.id}\``)).toBeLessThan(firstHealthyAt === -1 ? Infinity : firstHealthyAt);
  });

  it('500 machines whose ids are long multi-byte text: still under the 250 kB view limit, with the count of the rest', () => {
    const machines: HomeMachine[] = Array.from({ length: 500 }, (_, i) => ({
      id: `${'語'.repeat(120)}${i}`,
      glance: null,
    }));
    const view = renderHome(model({ machines }));
    expect(limitProblems(view)).toEqual([]);
    const all = texts(view.blocks).join('\n');
    const listed = (all.match(/never read by the watchdog yet/g) ?? []).length;
    const more = Number(/\+(\d+) more machines/.exec(all)?.[1] ?? '0');
    expect(more).toBeGreaterThan(0);
    expect(listed + more).toBe(500);
  });

  it('the same model renders the same view (so an unchanged Home is not published again)', () => {
    const m = model({ machines: [{ id: 'kpro5', glance: glance('kpro5') }] });
    expect(JSON.stringify(renderHome(m))).toBe(JSON.stringify(renderHome(structuredClone(m))));
  });
});

describe('unstickStateOf', () => {
  it('queued, running, waiting for approval (undecided only), and null once finished', () => {
    expect(unstickStateOf([{ type: 'requested' }])).toBe('queued');
    expect(unstickStateOf([{ type: 'requested' }, { type: 'started' }])).toBe('running');
    expect(unstickStateOf([{ type: 'started' }, { type: 'approval_requested', approvalId: 'apr_1' }])).toBe(
      'waiting for approval',
    );
    expect(
      unstickStateOf([
        { type: 'started' },
        { type: 'approval_requested', approvalId: 'apr_1' },
        { type: 'approval_decided', approvalId: 'apr_1' },
      ]),
    ).toBe('running');
    expect(
      unstickStateOf([
        { type: 'started' },
        { type: 'approval_requested', approvalId: 'apr_1' },
        { type: 'approval_expired', approvalId: 'apr_1' },
      ]),
    ).toBe('running');
    expect(
      unstickStateOf([{ type: 'started' }, { type: 'approval_requested', approvalId: 'apr_1' }, { type: 'finished' }]),
    ).toBeNull();
  });
});
