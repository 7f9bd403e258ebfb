import type { AnyLoggedEvent } from '../incident/all-events.ts';
import type { IncidentMeta } from '../incident/events.ts';
import type { AlertEvent } from '../watchdog/alert-events.ts';
import { text } from './escape.ts';
import { parentView, type MessageView } from './status.ts';

/**
 * A watchdog alert as ONE top-level message (placement `parent`, no replies), edited in place as the
 * alert's events arrive. Pure. (First version: the sentence and its state; buttons follow.)
 */
export function renderAlert(meta: IncidentMeta, events: readonly AnyLoggedEvent[]): MessageView[] {
  const alertEvents = events.filter((e): e is AlertEvent & { id: string } => e.type.startsWith('alert_'));
  const last = [...alertEvents].reverse().find((e) => e.type === 'alert_raised' || e.type === 'alert_updated' || e.type === 'alert_cleared');
  if (!last || !('alert' in last)) return [];
  const cleared = alertEvents.some((e) => e.type === 'alert_cleared');
  const line = `${cleared ? ':white_check_mark: Cleared' : ':rotating_light: Alert'}: ${text(meta.targets[0] ?? '?')}: ${text(last.alert.sentence)}`;
  return [parentView(line, text(`alert ${meta.id}`))];
}
