import { z } from 'zod';

/** Job data carries ids only: never tokens, keys or user text. */
export const StatusJobSchema = z.object({
  kind: z.literal('status'),
  incidentId: z.string().regex(/^inc_[a-z0-9_]+$/),
  machines: z.array(z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/)).min(1).max(500),
});
export type StatusJob = z.infer<typeof StatusJobSchema>;

export const JobSchema = z.discriminatedUnion('kind', [StatusJobSchema]);
export type JobData = z.infer<typeof JobSchema>;

export function queueName(site: string): string {
  return `site-${site}`;
}
