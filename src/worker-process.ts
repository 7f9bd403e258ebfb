import { startWorkers, type WatchOptions, type WorkerGroup } from '../workers/index.ts';
import { DEFAULT_WATCH_SETTINGS } from './watchdog/judge.ts';
import type { Env } from './config/env.ts';
import type { Inventory } from './config/inventory.ts';
import type { Logger } from './logger.ts';
import type { Metrics } from './metrics/metrics.ts';
import { createSshExecutor } from './ssh/executor.ts';
import { workerKeysOf } from './auth/keys.ts';

/** The SSH-holding process: BullMQ workers for this worker's sites. Holds no Slack token. */
export async function startWorkerProcess(
  env: Env,
  inventory: Inventory,
  logger: Logger,
  metrics?: Metrics,
): Promise<WorkerGroup> {
  const executor = createSshExecutor({
    connectTimeoutMs: inventory.defaults.connectTimeoutSec * 1000,
    access: env.GPU_MEDIC_SSH_ACCESS,
    logger: logger.child({ component: 'ssh' }),
  });
  // Checked by `config check` before a role starts; here a failure stops the start with its reason.
  const keys = workerKeysOf(env);
  if (!keys.ok) throw new Error(keys.why);
  if (!env.GPU_MEDIC_WORKER_KEY_FILE || env.GPU_MEDIC_BOT_PUBLIC_KEY_FILES.length === 0)
    logger.warn(
      'GPU_MEDIC_WORKER_KEY_FILE or GPU_MEDIC_BOT_PUBLIC_KEY_FILES is not set: this worker signs and verifies with keys of this process only, so it acts only on a bot in this same process (`start`); see docs/security.md',
    );
  return startWorkers({
    keys: keys.value,
    redis: env,
    prefix: env.GPU_MEDIC_PREFIX,
    inventory,
    executor,
    logger: logger.child({ component: 'worker' }),
    sites: env.GPU_MEDIC_SITES,
    approvers: env.GPU_MEDIC_APPROVERS,
    workerSecret: env.GPU_MEDIC_WORKER_SECRET,
    admins: env.GPU_MEDIC_ADMINS,
    hostBudgetPerHour: env.GPU_MEDIC_HOST_BUDGET_PER_HOUR,
    approvalTtlMs: env.GPU_MEDIC_APPROVAL_TTL_SEC * 1000,
    escalationApprovers: env.GPU_MEDIC_ESCALATION_APPROVERS,
    escalateAfterMs: env.GPU_MEDIC_ESCALATE_AFTER_SEC * 1000,
    graceMs: env.GPU_MEDIC_TERM_GRACE_SEC * 1000,
    releaseTimeoutMs: env.GPU_MEDIC_RELEASE_TIMEOUT_SEC * 1000,
    pollIntervalMs: env.GPU_MEDIC_POLL_MS,
    lockDurationMs: env.GPU_MEDIC_JOB_LOCK_MS,
    stalledIntervalMs: env.GPU_MEDIC_STALLED_MS,
    ...(metrics ? { metrics } : {}),
    ...(env.GPU_MEDIC_ALERTS_CHANNEL ? { watch: watchOptionsOf(env, env.GPU_MEDIC_ALERTS_CHANNEL) } : {}),
  });
}

/** The watchdog's settings from the environment (GPU_MEDIC_WATCH_*). */
export function watchOptionsOf(env: Env, alertsChannel: string): WatchOptions {
  return {
    alertsChannel,
    intervalMs: env.GPU_MEDIC_WATCH_INTERVAL_SEC * 1000,
    maxConnects: env.GPU_MEDIC_WATCH_MAX_CONNECTS,
    settings: {
      ...DEFAULT_WATCH_SETTINGS,
      ghostMinutes: env.GPU_MEDIC_WATCH_GHOST_SEC / 60,
      ramPct: env.GPU_MEDIC_WATCH_RAM_PCT,
    },
  };
}
