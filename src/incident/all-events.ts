import type { AlertEvent } from '../watchdog/alert-events.ts';
import type { IncidentEvent } from './events.ts';
import type { UnstickEvent } from './unstick-events.ts';

/** Every event the log holds: status events, the unstick flow's, and the watchdog alerts'. */
export type AnyEvent = IncidentEvent | UnstickEvent | AlertEvent;
export type AnyLoggedEvent = AnyEvent & { id: string };
