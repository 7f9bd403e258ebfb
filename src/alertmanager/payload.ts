import { z } from 'zod';

/**
 * Alertmanager's webhook payload, version 4 (Alertmanager's `notify/webhook` Message): parsed at the
 * edge, every field bounded. Pure.
 */
const labelName = z.string().regex(/^[a-zA-Z_][a-zA-Z0-9_]{0,127}$/);
const labels = z
  .record(labelName, z.string().max(1024))
  .refine((r) => Object.keys(r).length <= 64, 'at most 64 labels');

const WebhookAlertSchema = z.object({
  status: z.enum(['firing', 'resolved']),
  labels,
  annotations: z.record(z.string().max(128), z.string().max(4096)).default({}),
  startsAt: z.string().max(64),
  endsAt: z.string().max(64).default(''),
  generatorURL: z.string().max(2048).default(''),
  fingerprint: z.string().regex(/^[0-9a-f]{1,32}$/),
});
export type WebhookAlert = z.infer<typeof WebhookAlertSchema>;

/** Alerts per notification gpu-medic takes (Alertmanager's `max_alerts` can hold it there; docs/alertmanager.md). */
const MAX_ALERTS = 200;

const WebhookPayloadSchema = z.object({
  version: z.literal('4'),
  groupKey: z.string().max(4096).default(''),
  truncatedAlerts: z.number().int().min(0).default(0),
  status: z.enum(['firing', 'resolved']),
  receiver: z.string().max(256).default(''),
  externalURL: z.string().max(2048).default(''),
  alerts: z.array(WebhookAlertSchema).max(MAX_ALERTS),
});
type WebhookPayload = z.infer<typeof WebhookPayloadSchema>;

export type PayloadResult = { ok: true; payload: WebhookPayload } | { ok: false; status: 400 | 413; error: string };

/** The payload from a request body, or why not, in words for the sender. */
export function parsePayload(body: string): PayloadResult {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { ok: false, status: 400, error: 'the body is not JSON' };
  }
  if (typeof json !== 'object' || json === null) return { ok: false, status: 400, error: 'the body is not an object' };
  const version = (json as { version?: unknown }).version;
  if (version !== '4')
    return {
      ok: false,
      status: 400,
      error: `unknown payload version ${JSON.stringify(version ?? null).slice(0, 20)}: gpu-medic reads Alertmanager's webhook version 4`,
    };
  const alerts = (json as { alerts?: unknown }).alerts;
  if (Array.isArray(alerts) && alerts.length > MAX_ALERTS)
    return {
      ok: false,
      status: 413,
      error: `${alerts.length} alerts in one notification, at most ${MAX_ALERTS}: set max_alerts in the receiver's webhook_config`,
    };
  const p = WebhookPayloadSchema.safeParse(json);
  if (!p.success) {
    const i = p.error.issues[0];
    return {
      ok: false,
      status: 400,
      error: `not an Alertmanager webhook payload: ${i?.path.join('.') ?? ''}: ${i?.message ?? ''}`,
    };
  }
  return { ok: true, payload: p.data };
}
