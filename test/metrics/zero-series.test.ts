/**
 * Every documented label set exists at 0 from the start, so the documented
 * alert `increase(gpu_medic_ssh_errors_total{code="host_key_mismatch"}[15m]) > 0` fires on the
 * first mismatch (a series born at 1 has no increase).
 */
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { DOCUMENTED_LABELS, zeroSeries } from '../../src/metrics/zero-series.ts';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

describe('metrics at start', () => {
  it('the documented alert series exist at 0 for every SSH endpoint before any event, and counting adds to them', async () => {
    const m = createMetrics();
    zeroSeries(m, { machines: ['kpro5', 'ct131'] });
    const text = await m.registry.metrics();
    expect(text).toContain('gpu_medic_ssh_errors_total{code="host_key_mismatch",machine="kpro5"} 0');
    expect(text).toContain('gpu_medic_ssh_errors_total{code="connect_timeout",machine="ct131"} 0');
    expect(text).toContain('gpu_medic_incidents_total{kind="unstick",outcome="failed"} 0');
    expect(text).toContain('gpu_medic_signals_total{signal="KILL",result="sent"} 0');
    expect(text).toContain('gpu_medic_approval_decisions_total{outcome="refused",reason="escalation_not_due"} 0');
    m.sshErrors.inc({ code: 'host_key_mismatch', machine: 'kpro5' });
    expect(await m.registry.metrics()).toContain(
      'gpu_medic_ssh_errors_total{code="host_key_mismatch",machine="kpro5"} 1',
    );
  });

  it('the label values zeroed are the ones docs/deploy.md lists', () => {
    const doc = readFileSync(fileURLToPath(new URL('../../docs/deploy.md', import.meta.url)), 'utf8');
    const row = (metric: string): string => doc.split('\n').find((l) => l.startsWith(`| \`${metric}\``)) ?? '';
    for (const k of DOCUMENTED_LABELS.incidentKinds) expect(row('gpu_medic_incidents_total')).toContain(k);
    for (const r of DOCUMENTED_LABELS.stepResults) expect(row('gpu_medic_destructive_steps_total')).toContain(r);
    for (const c of ['host_key_mismatch', 'connect_timeout', 'auth_failed', 'command_timeout'])
      expect(row('gpu_medic_ssh_errors_total')).toContain(c);
  });

  it('no gauge is named …_total', async () => {
    const m = createMetrics();
    zeroSeries(m, { machines: ['kpro5'] });
    const types = [...(await m.registry.metrics()).matchAll(/^# TYPE (\S+) (\S+)$/gm)];
    expect(types.filter(([, name, type]) => type === 'gauge' && name?.endsWith('_total'))).toEqual([]);
  });
});
