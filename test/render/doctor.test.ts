import { describe, expect, it } from 'vitest';
import type { Finding } from '../../src/doctor/judge.ts';
import type { IncidentMeta, LoggedEvent } from '../../src/incident/events.ts';
import { renderDoctor } from '../../src/render/doctor.ts';

const meta: IncidentMeta = {
  id: 'inc_20261201_100000_abc123',
  kind: 'doctor',
  requester: 'U0BOB00001',
  channel: 'C0ONCALL01',
  targets: ['ct129'],
  text: 'doctor ct129',
  reason: null,
  createdAt: '2026-12-01T10:00:00.000Z',
};
const at = '2026-12-01T10:00:01.000Z';
// What a hostile machine could print into stderr, ending up in a finding's detail.
const hostile: Finding = {
  machineId: 'ct129',
  kind: 'container',
  check: 'fuser',
  status: 'fail',
  detail: 'fuser: exit 1: <!channel> *pwned* `x` <https://evil|click>',
  hint: 'Install psmisc in the container (apt install psmisc).',
};
const ok: Finding = {
  machineId: 'ct129',
  kind: 'container',
  check: 'ssh',
  status: 'ok',
  detail: 'root@10.0.0.129:22 (pinned host key)',
  hint: null,
};

function events(findings: Finding[]): LoggedEvent[] {
  return [
    { id: '1-0', type: 'requested', at },
    { id: '2-0', type: 'started', at, worker: 'w:1' },
    {
      id: '3-0',
      type: 'doctor_report',
      at,
      machines: ['ct129'],
      findings,
      failed: findings.filter((f) => f.status === 'fail').length,
      warned: 0,
    },
    { id: '4-0', type: 'finished', at, outcome: 'failed', durationMs: 900 },
  ];
}

describe('the doctor thread', () => {
  it('machine text is data: no mention, link or formatting can form in the table, its fallback or the parent', () => {
    const views = renderDoctor(meta, events([ok, hostile]));
    const all = JSON.stringify(views);
    expect(all).not.toContain('<!channel>');
    expect(all).not.toContain('<https://evil');
    const report = views.find((v) => v.key === 'report');
    const table = (report?.blocks ?? []).find((b) => b.type === 'table') as unknown as {
      rows: Array<Array<{ text: string }>>;
    };
    expect(table.rows.map((r) => r.map((c) => c.text))).toEqual([
      ['Machine', 'Check', 'Result', 'Detail'],
      ['ct129', 'ssh', 'ok', 'root@10.0.0.129:22 (pinned host key)'],
      ['ct129', 'fuser', 'FAIL', 'fuser: exit 1: ‹!channel› *pwned* `x` ‹https://evil|click›'],
    ]);
    expect(report?.text).toContain('&lt;!channel&gt;');
    expect(report?.text).toContain('FAIL ct129 fuser: Install psmisc in the container (apt install psmisc).');
    expect(views[0]?.text).toMatch(
      /^:stethoscope: Doctor for `ct129`, requested by <@U0BOB00001> · :warning: 1 problem that would make unstick fail on 1 machine\.$/,
    );
  });

  it('before the report: the parent says checking, and no table is posted', () => {
    const views = renderDoctor(meta, events([]).slice(0, 2));
    expect(views.map((v) => v.key)).toEqual(['parent']);
    expect(views[0]?.text).toContain('checking…');
  });
});

describe('a table never cuts a cell silently', () => {
  it("the doctor's long Detail wraps in the table block, and the fallback text carries it whole", () => {
    const long: Finding = {
      machineId: 'kpro5',
      kind: 'host',
      check: 'pct',
      status: 'warn',
      detail:
        'every inventory container of kpro5 is running, but ct131 is not in the inventory: its GPU holders cannot be placed',
      hint: null,
    };
    const report = renderDoctor(meta, events([ok, long])).find((v) => v.key === 'report');
    const table = report?.blocks.find((b) => b.type === 'table') as
      | { rows: Array<Array<{ text: string }>>; column_settings?: Array<{ is_wrapped?: boolean }> }
      | undefined;
    expect(table?.rows[2]?.[3]?.text).toBe(long.detail);
    expect(table?.column_settings?.[3]?.is_wrapped).toBe(true);
    // The fallback's cell is cut with a numbered mark, and the whole detail follows the table.
    expect(report?.text).toContain('…[1]');
    expect(report?.text).toContain(`[1] ${long.detail}`);
  });
});
