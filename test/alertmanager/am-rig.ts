/** Alertmanager webhook payloads (version 4) as Alertmanager 0.25 sends them, and a POST helper. */
export interface AmAlert {
  status: 'firing' | 'resolved';
  labels: Record<string, string>;
  annotations?: Record<string, string>;
  startsAt?: string;
  endsAt?: string;
  generatorURL?: string;
  fingerprint: string;
}

export function payload(alerts: AmAlert[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    receiver: 'gpu-medic',
    status: alerts.some((a) => a.status === 'firing') ? 'firing' : 'resolved',
    alerts: alerts.map((a) => ({
      annotations: {},
      startsAt: '2026-12-01T10:00:00Z',
      endsAt: '0001-01-01T00:00:00Z',
      generatorURL: 'http://prometheus.example:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS+%3E+0',
      ...a,
    })),
    groupLabels: {},
    commonLabels: {},
    commonAnnotations: {},
    externalURL: 'http://alertmanager.example:9093',
    version: '4',
    groupKey: '{}:{alertname="DcgmXidError"}',
    truncatedAlerts: 0,
    ...extra,
  };
}

export async function postAlerts(
  url: string,
  body: unknown,
  token: string | null,
): Promise<{ status: number; body: string }> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token === null ? {} : { authorization: `Bearer ${token}` }) },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: r.status, body: await r.text() };
}
