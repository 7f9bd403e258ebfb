import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { eventObserver } from '../../src/metrics/observe-events.ts';

const at = '2026-12-01T09:00:00.000Z';
const value = async (
  m: ReturnType<typeof createMetrics>,
  name: string,
  labels: Record<string, string>,
): Promise<number> => {
  const metric = await m.registry.getSingleMetric(name)?.get();
  return metric?.values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value ?? 0;
};

describe('counters derived from incident events', () => {
  it('expired and denied approvals, an interrupted step of a kind seen at its start, and the incident kind read once at the end', async () => {
    const m = createMetrics();
    const asked: string[] = [];
    const observe = eventObserver(m, async (id) => {
      asked.push(id);
      return 'unstick';
    });
    await observe('inc_a', { type: 'approval_expired', at, approvalId: 'apr_x', stepId: 's1' });
    await observe('inc_a', {
      type: 'approval_decided',
      at,
      approvalId: 'apr_y',
      stepId: 's1',
      decision: 'denied',
      by: 'U0BOB00001',
    });
    await observe('inc_a', {
      type: 'step_started',
      at,
      stepId: 's2',
      kind: 'host_reset',
      tier: 2,
      machineId: 'kpro5',
      explanation: 'x',
    });
    await observe('inc_a', {
      type: 'step_finished',
      at,
      stepId: 's2',
      outcome: 'interrupted',
      durationMs: 2500,
      message: 'x',
    });
    await observe('inc_b', { type: 'step_finished', at, stepId: 's2', outcome: 'done', durationMs: 10, message: 'x' });
    await observe('inc_a', { type: 'finished', at, outcome: 'failed', durationMs: 1 });
    expect(await value(m, 'gpu_medic_approval_decisions_total', { outcome: 'expired' })).toBe(1);
    expect(await value(m, 'gpu_medic_approval_decisions_total', { outcome: 'denied' })).toBe(1);
    expect(await value(m, 'gpu_medic_destructive_steps_total', { kind: 'host_reset', result: 'interrupted' })).toBe(1);
    // Another incident's step with the same id does not borrow this one's kind.
    expect(await value(m, 'gpu_medic_destructive_steps_total', { kind: 'unknown', result: 'done' })).toBe(1);
    expect(await value(m, 'gpu_medic_incidents_total', { kind: 'unstick', outcome: 'failed' })).toBe(1);
    expect(asked).toEqual(['inc_a']);
    const text = await m.registry.getSingleMetricAsString('gpu_medic_step_duration_seconds');
    expect(text).toContain('gpu_medic_step_duration_seconds_sum{kind="host_reset",outcome="interrupted"} 2.5');
  });
});
