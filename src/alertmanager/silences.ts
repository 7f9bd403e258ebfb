/**
 * An Alertmanager silence for a snoozed alert (GPU_MEDIC_ALERTMANAGER_URL), through its API v2
 * (`POST /api/v2/silences`). The matchers are the alert's own labels, each an exact match, so the
 * silence covers that alert and nothing broader; it ends when the snooze ends.
 */
import { nodeFetch } from '../http/node-fetch.ts';

export interface SilenceRequest {
  matchers: Array<{ name: string; value: string; isRegex: false; isEqual: true }>;
  startsAt: string;
  endsAt: string;
  createdBy: string;
  comment: string;
}

/** The request body, pure. `by`: the Slack user ID of who snoozed. */
export function silenceRequest(
  labels: Readonly<Record<string, string>>,
  nowMs: number,
  untilMs: number,
  by: string,
  incidentId: string,
): SilenceRequest {
  return {
    matchers: Object.entries(labels).map(([name, value]) => ({ name, value, isRegex: false, isEqual: true })),
    startsAt: new Date(nowMs).toISOString(),
    endsAt: new Date(untilMs).toISOString(),
    createdBy: `gpu-medic (Slack user ${by})`,
    comment: `Snoozed from gpu-medic's alert ${incidentId}`,
  };
}

/** Creates the silence; resolves with its id, rejects with a short reason (no label values in it). */
export async function createSilence(baseUrl: string, body: SilenceRequest, timeoutMs = 5000): Promise<string> {
  const url = `${baseUrl.replace(/\/+$/, '')}/api/v2/silences`;
  // node:http, as the Web API calls (src/http/node-fetch.ts): no WebAssembly parser compiled on a first silence.
  const r = await nodeFetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (!r.ok) throw new Error(`Alertmanager answered ${r.status}`);
  const j = (await r.json()) as { silenceID?: unknown };
  if (typeof j.silenceID !== 'string' || !/^[0-9a-f-]{1,64}$/.test(j.silenceID))
    throw new Error('Alertmanager returned no silence id');
  return j.silenceID;
}
