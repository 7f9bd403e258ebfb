/**
 * The verdict in the thread is true: the verdict message speaks of the target's memory
 * (held / left / freed per GPU), says what others changed in words, and is never green while a
 * target GPU is in error or missing after.
 */
import { describe, expect, it } from 'vitest';
import { verdictOf } from '../../src/gpu/verdict.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import type { UnstickLoggedEvent } from '../../src/incident/unstick-events.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { CT129_NS, gpus } from '../unstick/seed-fleet.ts';
import { diagnoseWith, s2 } from '../unstick/scenarios.ts';

const meta: IncidentMeta = {
  id: 'inc_20261130_092000_v3rd1c',
  kind: 'unstick',
  requester: 'U0REQUEST',
  channel: 'C0GPUOPS',
  targets: ['ct129'],
  text: 'ct129',
  reason: null,
  createdAt: '2026-11-30T09:20:00.000Z',
};

function verdictView(verdict: ReturnType<typeof verdictOf>) {
  const events: UnstickLoggedEvent[] = [
    { id: '1-0', type: 'verdict', at: '2026-11-30T09:24:42.000Z', verdict },
    { id: '1-1', type: 'finished', at: '2026-11-30T09:24:42.000Z', outcome: 'failed', durationMs: 1000 },
  ];
  const views = renderUnstick(meta, events);
  const v = views.find((x) => x.key === 'ev:1-0');
  const table = v?.blocks.find((b) => b.type === 'table') as { rows: Array<Array<{ text: string }>> } | undefined;
  return { views, v, rows: table?.rows.map((r) => r.map((c) => c.text)) ?? [] };
}

describe('the verdict message', () => {
  it('shows what ct129 held, what is left and what it freed, and others’ changes apart', () => {
    const allIdle = diagnoseWith(
      { gpus: gpus({}), apps: [], procs: [], targetPidNs: CT129_NS },
      { holders: [], procs: [] },
    );
    const { v, rows } = verdictView(verdictOf(s2(), allIdle));
    expect(rows[0]).toEqual(['GPU', 'Held by ct129', 'Left', 'Freed', 'GPU in use before → after', 'Now']);
    expect(rows[1]).toEqual(['0', '96,413 MiB', '0 MiB', '96,413 MiB', '96,413 → 0 MiB', 'idle']);
    expect(rows[6]).toEqual(['5', '0 MiB', '0 MiB', '0 MiB', '40,211 → 0 MiB', 'idle']);
    expect(v?.text).toContain('*Recovered* · 192,830 MiB freed');
    expect(v?.text).toContain('Outside this incident: GPU 5: 40,211 MiB freed outside this incident.');
    expect(JSON.stringify(v?.blocks)).toContain('GPU 5: 40,211 MiB freed outside this incident.');
  });

  it('a GPU missing after shows as missing, and the verdict is not green anywhere in the thread', () => {
    const none = diagnoseWith({ gpus: [], apps: [], procs: [], targetPidNs: CT129_NS }, { holders: [], procs: [] });
    const { views, v, rows } = verdictView(verdictOf(s2(), none));
    expect(rows[1]).toEqual(['0', '96,413 MiB', '?', '?', '96,413 → ? MiB', 'missing after']);
    expect(v?.text).not.toContain(':white_check_mark:');
    expect(v?.text).toContain('*Not verified*');
    expect(views[0]?.text).toMatch(/· Not verified$/);
  });
});
