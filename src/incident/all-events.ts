import type { IncidentEvent } from './events.ts';
import type { UnstickEvent } from './unstick-events.ts';

/** Every event the log holds: status events and the unstick flow's. */
export type AnyEvent = IncidentEvent | UnstickEvent;
export type AnyLoggedEvent = AnyEvent & { id: string };
