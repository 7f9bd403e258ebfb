/**
 * The alerts open now, as the watch store keeps them (`watchKeys.open`: the incidents of raised,
 * not yet cleared alert messages, from the watchdog or Alertmanager), each as its events last
 * described it. Read by `gpu-medic incident <id> --markdown` so the post-mortem says what was
 * still open on the incident's machines, rather than "nothing left to do". Read-only.
 */
import type { Redis } from 'ioredis';
import { IncidentLog } from '../incident/log.ts';
import { alertEpisode } from '../watchdog/alert-state.ts';
import { watchKeys } from './watch-keys.ts';
import type { OpenAlertNote } from '../render/incident-markdown.ts';

/** At most this many open alerts are read (App Home reads as many). */
const OPEN_READ = 500;

const isState = (e: { type: string }): boolean =>
  e.type === 'alert_raised' || e.type === 'alert_updated' || e.type === 'alert_cleared';

export async function readOpenAlerts(redis: Redis, prefix: string): Promise<OpenAlertNote[]> {
  const log = new IncidentLog(redis, prefix);
  const ids = await redis.zrange(watchKeys(prefix).open, 0, OPEN_READ - 1);
  const alerts = await Promise.all(
    ids.map(async (incidentId): Promise<OpenAlertNote | null> => {
      // The newest events hold its latest state, unless many clicks or snoozes came after it: then all of them.
      let events = (await log.lastEvents(incidentId, 50)) as Array<{ type: string; at: string }>;
      if (events.length === 50 && !events.some(isState))
        events = (await log.events(incidentId)) as Array<{ type: string; at: string }>;
      const episode = alertEpisode(events);
      const a = episode.alert;
      if (!a || episode.clearedAt !== null) return null;
      const raised = a.raisedAt ?? a.since;
      return {
        incidentId,
        kind: a.kind,
        machineId: a.machineId,
        gpu: a.gpu,
        sentence: a.sentence,
        raisedAt: new Date(raised).toISOString(),
      };
    }),
  );
  return alerts.filter((a): a is OpenAlertNote => a !== null);
}
