import { z } from 'zod';

const list = z
  .string()
  .optional()
  .transform((s) => (s ?? '').split(',').map((x) => x.trim()).filter((x) => x.length > 0));

const slackUserId = /^[UW][A-Z0-9]{2,}$/;

/** Everything read from the environment. Tokens never leave this object except into the Slack client. */
export const EnvSchema = z.object({
  GPU_MEDIC_MODE: z.enum(['socket', 'http']).default('socket'),
  SLACK_BOT_TOKEN: z.string().regex(/^xoxb-/, 'must be a bot token (xoxb-...)').optional(),
  SLACK_APP_TOKEN: z.string().regex(/^xapp-/, 'must be an app-level token (xapp-...) for Socket Mode').optional(),
  SLACK_SIGNING_SECRET: z.string().min(8, 'is too short to be a Slack signing secret').optional(),
  /** Web API base URL (ends with /api/); only tests and the demo point it elsewhere. */
  SLACK_API_URL: z.string().url().optional(),
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  REDIS_URL: z.string().default('redis://127.0.0.1:6379'),
  GPU_MEDIC_INVENTORY: z.string().default('./inventory.yaml'),
  /** Key prefix in Redis for queues and incidents (tests use a random one). */
  GPU_MEDIC_PREFIX: z.string().regex(/^[a-zA-Z0-9:_-]+$/).default('gpu-medic'),
  /** Sites this worker serves (comma list); empty = every site in the inventory. */
  GPU_MEDIC_SITES: list,
  /** Channels where /gpu may be used (comma list of IDs); empty = any. */
  GPU_MEDIC_ALLOWED_CHANNELS: list,
  /** Users who may request (comma list of IDs); empty = any member of an allowed channel. */
  GPU_MEDIC_ALLOWED_USERS: list,
  /** Users who may approve host-level steps (Slack user IDs, never names). */
  GPU_MEDIC_APPROVERS: list.pipe(z.array(z.string().regex(slackUserId, 'must be Slack user IDs like U012ABCDEF'))),
  /** Seconds an approval stays open. At least 5 so a test can watch a card expire; production wants minutes. */
  GPU_MEDIC_APPROVAL_TTL_SEC: z.coerce.number().int().min(5).max(86_400).default(900),
  GPU_MEDIC_TERM_GRACE_SEC: z.coerce.number().int().min(1).max(300).default(10),
  /** How long to wait for GPU memory to be released after a kill (a dying rank can take tens of seconds). */
  GPU_MEDIC_RELEASE_TIMEOUT_SEC: z.coerce.number().int().min(1).max(1800).default(90),
  /** How often the worker re-reads processes and memory while waiting. */
  GPU_MEDIC_POLL_MS: z.coerce.number().int().min(100).max(60_000).default(3000),
  /**
   * BullMQ job lock: a worker renews it every half of this while a job runs. A worker that died
   * mid-job is noticed once it lapses, and its job is handed to another worker (which finds the
   * destructive steps already claimed). BullMQ's default, 30 s.
   */
  GPU_MEDIC_JOB_LOCK_MS: z.coerce.number().int().min(1000).max(600_000).default(30_000),
  /** How often workers look for jobs whose lock lapsed (stalled). BullMQ's default, 30 s. */
  GPU_MEDIC_STALLED_MS: z.coerce.number().int().min(500).max(600_000).default(30_000),
  /** Heartbeat file the process rewrites and `gpu-medic health` reads; empty = /tmp/gpu-medic-<role>.health.json. */
  GPU_MEDIC_HEALTH_FILE: z.string().default(''),
  /** Seconds between heartbeats; the healthcheck calls a process stale after three missed ones. */
  GPU_MEDIC_HEALTH_INTERVAL_SEC: z.coerce.number().int().min(1).max(300).default(10),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Env = z.output<typeof EnvSchema>;
export type Role = 'bot' | 'worker' | 'start';

export interface EnvProblem {
  variable: string;
  message: string;
}

/** Parses the environment and lists every problem at once, for the role that will run. */
export function parseEnv(source: Record<string, string | undefined>, role: Role): { env: Env | null; problems: EnvProblem[] } {
  const parsed = EnvSchema.safeParse(source);
  if (!parsed.success) {
    return {
      env: null,
      problems: parsed.error.issues.map((i) => ({ variable: String(i.path[0] ?? '?'), message: i.message })),
    };
  }
  const env = parsed.data;
  const problems: EnvProblem[] = [];
  if (role !== 'worker') {
    if (!env.SLACK_BOT_TOKEN) problems.push({ variable: 'SLACK_BOT_TOKEN', message: 'is required to post to Slack (xoxb-...)' });
    if (env.GPU_MEDIC_MODE === 'socket' && !env.SLACK_APP_TOKEN)
      problems.push({ variable: 'SLACK_APP_TOKEN', message: 'is required in socket mode (xapp-... with connections:write)' });
    if (env.GPU_MEDIC_MODE === 'http' && !env.SLACK_SIGNING_SECRET)
      problems.push({ variable: 'SLACK_SIGNING_SECRET', message: 'is required in http mode to verify requests' });
  }
  return { env: problems.length === 0 ? env : null, problems };
}
