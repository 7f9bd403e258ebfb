import { createHash } from 'node:crypto';
import type { Alert } from './judge.ts';

/** The incident of one alert episode (key + first seen): the same on every worker and after restarts. */
export function alertIncidentId(alert: Pick<Alert, 'key' | 'since'>): string {
  const h = createHash('sha256').update(`${alert.key}\n${alert.since}`).digest('hex').slice(0, 20);
  return `inc_alert_${h}`;
}
