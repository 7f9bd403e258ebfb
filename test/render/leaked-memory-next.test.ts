/**
 * Memory that no process holds on a host GPU: the host view of `/gpu status` and the watchdog's
 * ghost-memory alert name the same next step, the one the unstick plan takes for it (a host-level
 * reset as its own step, tier 2, approved by a second person: any configured approver but the
 * requester; an admin only past the blast-radius budget), not "a reset by an admin".
 */
import { describe, expect, it } from 'vitest';
import { GIB, type MachineSnapshot } from '../../src/gpu/snapshot.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta, LoggedEvent } from '../../src/incident/events.ts';
import { planUnstick } from '../../src/plan/unstick-plan.ts';
import { renderAlert } from '../../src/render/alert.ts';
import { renderIncident } from '../../src/render/status.ts';
import { alertIncidentId } from '../../src/watchdog/alert-id.ts';
import { EMPTY_WATCH_STATE, judge } from '../../src/watchdog/judge.ts';
import { gpus } from '../unstick/seed-fleet.ts';
import { s5 } from '../unstick/scenarios.ts';

const T0 = Date.parse('2026-12-01T03:00:00Z');
const STEP = /offers the reset as its own step, approved by a second person/;

/** kpro5's own view: 48 GiB on GPU 5 and no compute app anywhere. */
const kpro5: MachineSnapshot = {
  machineId: 'kpro5',
  view: 'host',
  takenAt: new Date(T0).toISOString(),
  gpus: gpus({ 5: 49_152 }),
  processes: [],
  holders: [],
  kernelMounts: [],
  ram: { totalBytes: 449 * GIB, usedBytes: 40 * GIB, availableBytes: null },
  gpuError: null,
  holderRows: [],
};

/** The host view's line about GPU 5 in the first message of `/gpu status kpro5`. */
function statusLine(): string {
  const meta: IncidentMeta = {
    id: 'inc_20261201_030000_abc124',
    kind: 'status',
    requester: 'U0ALICE',
    channel: 'C0GPUOPS',
    targets: ['kpro5'],
    text: 'kpro5',
    reason: null,
    createdAt: new Date(T0).toISOString(),
  };
  const events: LoggedEvent[] = [
    { id: '1-0', type: 'snapshot', at: kpro5.takenAt, label: 'status', snapshot: kpro5, commands: [] },
  ];
  const reply = renderIncident(meta, events).find((v) => v.key === 'ev:1-0')?.text ?? '';
  return reply.split('\n').find((l) => l.includes('GPU 5: 49,152 MiB')) ?? '';
}

/** The *Next:* line of the ghost-memory alert the watchdog raises for it. */
function alertNext(): string {
  const seen = judge(EMPTY_WATCH_STATE, { machineId: 'kpro5', at: T0 - 11 * 60_000, ok: true, snapshot: kpro5 });
  const raised = judge(seen.next, { machineId: 'kpro5', at: T0, ok: true, snapshot: kpro5 }).changes[0];
  if (raised?.type !== 'raise') throw new Error('ghost memory not raised');
  const alert = raised.alert;
  const meta: IncidentMeta = {
    id: alertIncidentId(alert),
    kind: 'alert',
    requester: 'watchdog',
    channel: 'C0ALERTS01',
    targets: ['kpro5'],
    text: alert.key,
    reason: null,
    createdAt: new Date(alert.since).toISOString(),
  };
  const events: AnyLoggedEvent[] = [{ id: '1-0', type: 'alert_raised', at: new Date(T0).toISOString(), alert }];
  return (renderAlert(meta, events)[0]?.text ?? '').split('\n').find((l) => l.startsWith('*Next:*')) ?? '';
}

/** The next-step sentence with the way to run an unstick (a command, a button) left out. */
function nextStep(line: string, unstick: string): string {
  return (
    /only a host-level GPU reset frees it: .*?approved by a second person/.exec(
      line.replace(unstick, 'UNSTICK'),
    )?.[0] ?? ''
  );
}

describe('the next step for memory no process holds', () => {
  it("is what the unstick plan does: a host-level reset step that needs a second person's approval", () => {
    const reset = planUnstick(s5(), { incidentId: 'inc_20261201_030000_abc123', vmid: 129 }).steps.find(
      (s) => s.kind === 'host_reset',
    );
    expect(reset?.tier).toBe(2);
    expect(reset?.explanation).toContain("Needs a second person's approval.");
  });

  it("the host view's status names that step through `/gpu unstick`, and no reset by an admin", () => {
    const line = statusLine();
    expect(line).toMatch(STEP);
    expect(line).toContain('`/gpu unstick`');
    expect(line).not.toMatch(/admin/);
  });

  it('the ghost-memory alert says the same sentence, through its Unstick button', () => {
    const next = alertNext();
    expect(next).toMatch(STEP);
    expect(nextStep(next, '*Unstick*')).not.toBe('');
    expect(nextStep(next, '*Unstick*')).toBe(nextStep(statusLine(), '`/gpu unstick`'));
  });
});
