/**
 * The unstick worker's jobs, one file per job kind under workers/unstick/: unstick-job.ts (the request),
 * decision-job.ts (a card decided), expire-job.ts (a card ran out of time), nudge-job.ts (its reminder and
 * escalation). They share unstick-run.ts (read, diagnose, plan, run a step, ask approval), built on
 * attempt-fence.ts (an attempt's fence, once-only latches, the finish).
 */
export { runDecisionJob } from './unstick/decision-job.ts';
export type { UnstickWorkerDeps } from './unstick/deps.ts';
export { runExpireJob } from './unstick/expire-job.ts';
export { runEscalateJob, runRemindJob } from './unstick/nudge-job.ts';
export { runUnstickJob } from './unstick/unstick-job.ts';
