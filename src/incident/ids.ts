import { randomBytes } from 'node:crypto';

/** `inc_20261130_091447_k3x9q2`: sortable by time, unguessable enough to not collide. */
export function newIncidentId(now: Date): string {
  const d = now.toISOString().replace(/[-:]/g, '').replace('T', '_').slice(0, 15);
  const r = BigInt(`0x${randomBytes(5).toString('hex')}`)
    .toString(36)
    .padStart(8, '0')
    .slice(-8);
  return `inc_${d.toLowerCase()}_${r}`;
}
