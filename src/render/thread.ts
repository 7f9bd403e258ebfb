import type { AnyLoggedEvent } from '../incident/all-events.ts';
import type { IncidentEvent, IncidentMeta, LoggedEvent } from '../incident/events.ts';
import { renderAlert, type RenderContext } from './alert.ts';
import { renderDoctor } from './doctor.ts';
import { renderIncident, type MessageView } from './status.ts';
import { renderUnstick } from './unstick.ts';

const DOCTOR_TYPES: ReadonlySet<string> = new Set<IncidentEvent['type']>([
  'requested',
  'started',
  'doctor_report',
  'finished',
  'error',
]);
const STATUS_TYPES: ReadonlySet<string> = new Set<IncidentEvent['type']>([
  'requested',
  'started',
  'snapshot',
  'machine_error',
  'finished',
  'error',
]);

/** The thread of any incident, by kind. Pure: what it needs of the inventory comes in `ctx`. */
export function renderThread(
  meta: IncidentMeta,
  events: readonly AnyLoggedEvent[],
  ctx: RenderContext = {},
): MessageView[] {
  if (meta.kind === 'unstick') return renderUnstick(meta, events);
  if (meta.kind === 'alert') return renderAlert(meta, events, ctx);
  if (meta.kind === 'doctor')
    return renderDoctor(
      meta,
      events.filter((e): e is LoggedEvent => DOCTOR_TYPES.has(e.type)),
    );
  return renderIncident(
    meta,
    events.filter((e): e is LoggedEvent => STATUS_TYPES.has(e.type)),
  );
}
