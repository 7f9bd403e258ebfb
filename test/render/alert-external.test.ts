import { describe, expect, it } from 'vitest';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { renderAlert } from '../../src/render/alert.ts';
import type { Alert } from '../../src/watchdog/judge.ts';

const meta = (targets: string[]): IncidentMeta => ({
  id: 'inc_alert_0123456789abcdef0123',
  kind: 'alert',
  requester: 'alertmanager',
  channel: 'C0ALERTS01',
  targets,
  text: 'alertmanager X',
  reason: null,
  createdAt: '2026-12-01T10:00:00.000Z',
});
const alert = (o: Partial<Alert> = {}): Alert => ({
  key: 'alertmanager:abc',
  kind: 'external',
  machineId: 'kpro5',
  gpu: null,
  since: Date.parse('2026-12-01T10:00:00Z'),
  raisedAt: Date.parse('2026-12-01T10:00:00Z'),
  sentence: 'summary',
  lastSeenAt: 0,
  ...o,
});
const raised = (a: Alert, generatorURL: string | null, unmatched: string | null = null): AnyLoggedEvent =>
  ({
    id: '1-0',
    type: 'alert_raised',
    at: '2026-12-01T10:00:01.000Z',
    alert: a,
    external: { alertname: 'Node*Down*', fingerprint: 'abc', generatorURL, labels: {}, unmatched },
  }) as AnyLoggedEvent;
const all = (v: ReturnType<typeof renderAlert>): string => JSON.stringify(v);

describe('an Alertmanager alert message (pure render)', () => {
  it('links back to generatorURL without letting the URL close the link or add its own; other schemes are not linked', () => {
    const v = renderAlert(meta(['kpro5']), [raised(alert(), 'http://p:9090/graph?g0.expr=a>b|evil&x=<@U1>')]);
    const text = all(v);
    expect(text).toContain('<http://p:9090/graph?g0.expr=a%3Eb%7Cevil&amp;x=%3C@U1%3E|source>');
    expect(text).not.toContain('|evil');
    expect(all(renderAlert(meta(['kpro5']), [raised(alert(), 'javascript:alert(1)')]))).not.toContain('javascript:');
  });

  it('an unknown alert name is its title, escaped; an unmatched alert says why and has no actions', () => {
    const v = renderAlert(meta([]), [
      raised(alert({ machineId: '' }), null, 'its Hostname label (x) names no machine'),
    ]);
    const text = all(v);
    expect(text).toContain('Node∗Down∗');
    expect(text).toContain('No buttons: its Hostname label (x) names no machine');
    expect(text).not.toContain('"type":"actions"');
  });
});
