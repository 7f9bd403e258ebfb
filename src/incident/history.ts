/**
 * `/gpu history`'s read of the durable log: the last incidents that touched a machine. Read-only
 * (it never appends, queues or reaches a machine). "Touched": incidents naming the machine, and for
 * a host those naming its containers (they ran on it), each saying which container (`via`).
 *
 * The per-machine index (IncidentLog.create) holds every incident since it began; incidents from
 * before that are found by a bounded scan of the global index, and the result says how far it looked.
 */
import type { Machine } from '../config/machines.ts';
import type { AnyLoggedEvent } from './all-events.ts';
import type { IncidentMeta } from './events.ts';
import type { IncidentLog } from './log.ts';

export interface HistoryItem {
  id: string;
  /** When it was opened (ISO), from the index. */
  at: string;
  /** Null when the index names an incident whose record is gone (shown as such, never dropped). */
  meta: IncidentMeta | null;
  events: AnyLoggedEvent[];
  /** For a host's history: the container of the host the incident was about (null: the machine itself). */
  via: string | null;
}

export interface HistoryFallback {
  /** Incidents from before the per-machine index that were looked at. */
  scanned: number;
  bound: number;
  /** False when the bound cut the scan: older incidents were not looked at. */
  complete: boolean;
  /** When the per-machine index began (ISO); null when no incident has been indexed yet. */
  before: string | null;
}

export interface HistoryResult {
  items: HistoryItem[];
  /** More incidents touched the machine than `limit`. */
  more: boolean;
  /** Null when no scan was needed (the index alone filled the answer, or nothing predates it). */
  fallback: HistoryFallback | null;
}

export interface HistoryQuery {
  target: Machine;
  /** For a host: the ids of its containers (from the inventory). */
  containers: readonly string[];
  limit: number;
}

const HISTORY_SCAN_BOUND = 500;

type LogReader = Pick<IncidentLog, 'recentFor' | 'targetIndexSince' | 'recentBefore' | 'metas' | 'events'>;

export async function readHistory(
  log: LogReader,
  q: HistoryQuery,
  o: { scanBound?: number } = {},
): Promise<HistoryResult> {
  const wanted = new Set([q.target.id, ...q.containers]);
  const found = new Map<string, { at: number; meta?: IncidentMeta }>();
  // One read per machine, all at once (a host with many containers costs one round trip, not one each).
  for (const list of await Promise.all([...wanted].map((w) => log.recentFor(w, q.limit + 1))))
    for (const x of list) found.set(x.id, { at: x.at });

  let fallback: HistoryFallback | null = null;
  if (found.size <= q.limit) {
    // Anything from before the index is older than everything in it: only needed when the index did not fill the answer.
    const since = await log.targetIndexSince();
    const bound = o.scanBound ?? HISTORY_SCAN_BOUND;
    const old = await log.recentBefore(since, bound);
    if (old.length > 0) {
      const metas = await log.metas(old.map((x) => x.id));
      old.forEach((x, i) => {
        const m = metas[i];
        if (m?.targets.some((t) => wanted.has(t)) && !found.has(x.id)) found.set(x.id, { at: x.at, meta: m });
      });
      fallback = {
        scanned: old.length,
        bound,
        complete: old.length < bound,
        before: since === null ? null : new Date(since).toISOString(),
      };
    }
  }

  const ordered = [...found.entries()].sort((a, b) => b[1].at - a[1].at || (a[0] < b[0] ? 1 : -1));
  const taken = ordered.slice(0, q.limit);
  const unread = taken.filter(([, v]) => v.meta === undefined).map(([id]) => id);
  const metas = new Map<string, IncidentMeta | null>();
  (await log.metas(unread)).forEach((m, i) => metas.set(unread[i] ?? '', m));
  const items = await Promise.all(
    taken.map(async ([id, v]): Promise<HistoryItem> => {
      const meta = v.meta ?? metas.get(id) ?? null;
      const via =
        meta === null || meta.targets.includes(q.target.id) ? null : (meta.targets.find((t) => wanted.has(t)) ?? null);
      return { id, at: new Date(v.at).toISOString(), meta, events: meta === null ? [] : await log.events(id), via };
    }),
  );
  return { items, more: ordered.length > q.limit, fallback };
}
