import { z } from 'zod';

const incidentId = z.string().regex(/^inc_[a-z0-9_]+$/);
const machineId = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/);
const approvalId = z.string().regex(/^apr_[A-Za-z0-9_-]{22}$/);

/** Job data carries ids only: never tokens, keys or user text. */
export const StatusJobSchema = z.object({
  kind: z.literal('status'),
  incidentId,
  machines: z.array(machineId).min(1).max(500),
});
export type StatusJob = z.infer<typeof StatusJobSchema>;

/** Before snapshot, diagnosis, tier 1, and the approval card for what is left. */
export const UnstickJobSchema = z.object({ kind: z.literal('unstick'), incidentId, machineId });
export type UnstickJob = z.infer<typeof UnstickJobSchema>;

/** A second person decided a tier-2 step: run it (approved) or close the incident (denied). */
export const DecisionJobSchema = z.object({ kind: z.literal('decision'), incidentId, approvalId });
export type DecisionJob = z.infer<typeof DecisionJobSchema>;

/** Delayed until an approval's expiry: expire it if still pending; nothing runs. */
export const ExpireJobSchema = z.object({ kind: z.literal('expire'), incidentId, approvalId });
export type ExpireJob = z.infer<typeof ExpireJobSchema>;

/** Delayed until half an approval's time to live: re-ping its deciders if it is still pending; nothing runs. */
export const RemindJobSchema = z.object({ kind: z.literal('remind'), incidentId, approvalId });
export type RemindJob = z.infer<typeof RemindJobSchema>;

/** Delayed until an approval's escalation time: ping the escalation group if it is still pending; nothing runs. */
export const EscalateJobSchema = z.object({ kind: z.literal('escalate'), incidentId, approvalId });
export type EscalateJob = z.infer<typeof EscalateJobSchema>;

/** `/gpu doctor`: read-only checks of these machines (and the hosts of the containers among them). */
export const DoctorJobSchema = z.object({
  kind: z.literal('doctor'),
  incidentId,
  machines: z.array(machineId).min(1).max(500),
});
export type DoctorJob = z.infer<typeof DoctorJobSchema>;

/**
 * One watchdog round (it warns before a user has to ask) over every machine of `site` (the worker's inventory
 * says which), produced by the site queue's job scheduler (`watchSchedulerId`). Read-only; judged exactly
 * once.
 */
export const WatchJobSchema = z.object({ kind: z.literal('watch'), site: machineId });
export type WatchJob = z.infer<typeof WatchJobSchema>;

export const JobSchema = z.discriminatedUnion('kind', [
  StatusJobSchema,
  UnstickJobSchema,
  DecisionJobSchema,
  ExpireJobSchema,
  RemindJobSchema,
  EscalateJobSchema,
  DoctorJobSchema,
  WatchJobSchema,
]);
export type JobData = z.infer<typeof JobSchema>;

export function queueName(site: string): string {
  return `site-${site}`;
}

/** The decision job's id: the bot and the workers' sweep use the same one, so the job is queued once. */
export function decisionJobId(incidentId: string, approvalId: string): string {
  return `${incidentId}-decision-${approvalId}`;
}

/** The one job scheduler per site queue that produces its watchdog rounds (upserted by every worker of the site). */
export function watchSchedulerId(site: string): string {
  return `watch-${site}`;
}
