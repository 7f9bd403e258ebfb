import type { AlertEvent, ExternalAlert } from './alert-events.ts';
import type { Alert } from './judge.ts';

/** One member of an alert message (a watchdog alert, or an Alertmanager alert), as its events last described it. */
interface AlertMember {
  alert: Alert;
  external: ExternalAlert | null;
  clearedAt: number | null;
  /** When its raise or last update was recorded (ms). */
  updatedAt: number | null;
}

export interface AlertEpisode {
  /** What the message shows: the watchdog's own alert while one is open (it read the machine), else the newest open member, else the last one cleared. */
  alert: Alert | null;
  /** The Alertmanager side, when there is one (the newest of its members). */
  external: ExternalAlert | null;
  /** When the last open member cleared; null while any member is open. */
  clearedAt: number | null;
  /** When what is shown was last updated (an alert_updated after its raise); null if never. */
  updatedAt: number | null;
  members: ReadonlyMap<string, AlertMember>;
}

/**
 * The state of an alert message from its events, pure: the one reading of the log that the
 * renderer (src/render/alert.ts) and the buttons (commands/alert-actions.ts) share. A message with
 * one member is what the watchdog always posted; members join when the watchdog and Alertmanager
 * raise the same condition.
 */
export function alertEpisode(events: readonly { type: string; at: string }[]): AlertEpisode {
  const members = new Map<string, AlertMember>();
  let lastClear: number | null = null;
  let lastTouched: string | null = null;
  for (const e of events as readonly AlertEvent[]) {
    if (e.type !== 'alert_raised' && e.type !== 'alert_updated' && e.type !== 'alert_cleared') continue;
    const key = e.alert.key;
    const prev = members.get(key);
    const at = Date.parse(e.at);
    if (e.type === 'alert_cleared') {
      members.set(key, {
        alert: prev?.alert ?? e.alert,
        external: prev?.external ?? e.external ?? null,
        clearedAt: at,
        updatedAt: prev?.updatedAt ?? null,
      });
      lastClear = at;
    } else {
      members.set(key, {
        alert: e.alert,
        external: e.external ?? null,
        clearedAt: null,
        updatedAt: e.type === 'alert_updated' ? at : (prev?.updatedAt ?? null),
      });
    }
    lastTouched = key;
  }
  const all = [...members.values()];
  const open = all.filter((m) => m.clearedAt === null);
  const shown =
    open.find((m) => m.external === null) ??
    open.at(-1) ??
    (lastTouched === null ? undefined : members.get(lastTouched)) ??
    null;
  const ext = [...(open.length > 0 ? open : all)].reverse().find((m) => m.external !== null);
  return {
    alert: shown?.alert ?? null,
    external: ext?.external ?? null,
    clearedAt: open.length === 0 && all.length > 0 ? lastClear : null,
    updatedAt: shown?.updatedAt ?? null,
    members,
  };
}
