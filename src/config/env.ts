import { z } from 'zod';
import { closest, editDistance } from './suggest.ts';

/** A comma list; empty or unset is the empty list (compose passes `${VAR:-}` for an unset one). */
const list = z
  .string()
  .optional()
  .transform((s) =>
    (s ?? '')
      .split(',')
      .map((x) => x.trim())
      .filter((x) => x.length > 0),
  );

const slackUserId = /^[UW][A-Z0-9]{2,}$/;

/** A whole number in [min, max] with a default; one plain message for every way it can be wrong. */
const wholeNumber = (min: number, max: number, def: number) => {
  const error = `must be a whole number from ${min} to ${max}`;
  return z.coerce.number({ error }).int({ error }).min(min, { error }).max(max, { error }).default(def);
};
const oneOf = <const T extends readonly [string, ...string[]]>(values: T, def: T[number]) =>
  z.enum(values, { error: `must be one of ${values.join(', ')}` }).default(def);

/** Everything read from the environment. Tokens never leave this object except into the Slack client. */
export const EnvSchema = z.object({
  GPU_MEDIC_MODE: oneOf(['socket', 'http'], 'socket'),
  SLACK_BOT_TOKEN: z
    .string()
    .regex(/^xoxb-/, 'must be a bot token (xoxb-...)')
    .optional(),
  SLACK_APP_TOKEN: z
    .string()
    .regex(/^xapp-/, 'must be an app-level token (xapp-...) for Socket Mode')
    .optional(),
  SLACK_SIGNING_SECRET: z.string().min(8, 'is too short to be a Slack signing secret').optional(),
  /** Web API base URL (ends with /api/); only tests and the demo point it elsewhere. */
  SLACK_API_URL: z.url({ error: 'must be a URL such as https://slack.com/api/' }).optional(),
  PORT: wholeNumber(0, 65535, 3000),
  /** HTTP mode: the address the receiver listens on. Loopback by default: put a TLS proxy in front. */
  GPU_MEDIC_BIND_ADDRESS: z
    .string()
    .regex(
      /^(localhost|[0-9.]+|[0-9a-fA-F:]+)$/,
      'must be an IP address to listen on, e.g. 127.0.0.1 (loopback) or 0.0.0.0 (every interface)',
    )
    .default('127.0.0.1'),
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\/\S+$/, 'must be a redis:// or rediss:// URL, e.g. redis://127.0.0.1:6379')
    .default('redis://127.0.0.1:6379'),
  /** Redis Sentinel: `host:port` of each sentinel (comma list); empty = REDIS_URL is the server itself. */
  REDIS_SENTINELS: list.pipe(
    z.array(
      z
        .string()
        .regex(
          /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/,
          'must be host:port entries, e.g. 10.0.0.5:26379,10.0.0.6:26379',
        ),
    ),
  ),
  /** The primary's name in the sentinels' `sentinel monitor <name> ...` (only with REDIS_SENTINELS). */
  REDIS_SENTINEL_NAME: z
    .string()
    .regex(/^[A-Za-z0-9._-]+$/, 'may hold only letters, digits, ".", "_" and "-"')
    .default('gpu-medic'),
  GPU_MEDIC_INVENTORY: z.string().default('./inventory.yaml'),
  /** Which documented way of running this is; only changes what `config check` says and checks. */
  GPU_MEDIC_DEPLOYMENT: oneOf(['local', 'systemd', 'compose'], 'local'),
  /** Key prefix in Redis for queues and incidents (tests use a random one). */
  GPU_MEDIC_PREFIX: z
    .string()
    .regex(/^[a-zA-Z0-9:_-]+$/, 'may hold only letters, digits, ":", "_" and "-"')
    .default('gpu-medic'),
  /** Sites this worker serves (comma list); empty = every site in the inventory. */
  GPU_MEDIC_SITES: list,
  /** Channels where /gpu may be used (comma list of IDs); empty = any. */
  GPU_MEDIC_ALLOWED_CHANNELS: list,
  /** Users who may request (comma list of IDs); empty = any member of an allowed channel. */
  GPU_MEDIC_ALLOWED_USERS: list,
  /** Users who may approve host-level steps (Slack user IDs, never names). */
  GPU_MEDIC_APPROVERS: list.pipe(
    z.array(z.string().regex(slackUserId, 'must be Slack user IDs like U012ABCDEF, not names')),
  ),
  /**
   * Admins (Slack user IDs): the only ones who may approve a host-level step past the blast-radius
   * budget. Empty: nobody can lift it.
   */
  GPU_MEDIC_ADMINS: list.pipe(
    z.array(z.string().regex(slackUserId, 'must be Slack user IDs like U012ABCDEF, not names')),
  ),
  /** Blast-radius budget: host-level destructive steps (kills, resets, container stops) allowed per host per hour. */
  GPU_MEDIC_HOST_BUDGET_PER_HOUR: wholeNumber(1, 1000, 3),
  /**
   * Worker only (never give it to the bot): the key approved plans are sealed with, so that whoever
   * writes Redis cannot change what a worker runs. Every worker of a site needs the same value.
   * Empty: derived from the SSH key files the inventory names.
   */
  GPU_MEDIC_WORKER_SECRET: z
    .string()
    .min(32, 'must be at least 32 characters (e.g. `openssl rand -hex 32`)')
    .optional(),
  /** Seconds an approval stays open. At least 5 so a test can watch a card expire; production wants minutes. */
  GPU_MEDIC_APPROVAL_TTL_SEC: wholeNumber(5, 86_400, 900),
  GPU_MEDIC_TERM_GRACE_SEC: wholeNumber(1, 300, 10),
  /** How long to wait for GPU memory to be released after a kill (a dying rank can take tens of seconds). */
  GPU_MEDIC_RELEASE_TIMEOUT_SEC: wholeNumber(1, 1800, 90),
  /** How often the worker re-reads processes and memory while waiting. */
  GPU_MEDIC_POLL_MS: wholeNumber(100, 60_000, 3000),
  /**
   * BullMQ job lock: a worker renews it every half of this while a job runs. A worker that died
   * mid-job is noticed once it lapses, and its job is handed to another worker (which finds the
   * destructive steps already claimed). BullMQ's default, 30 s.
   */
  GPU_MEDIC_JOB_LOCK_MS: wholeNumber(1000, 600_000, 30_000),
  /** How often workers look for jobs whose lock lapsed (stalled). BullMQ's default, 30 s. */
  GPU_MEDIC_STALLED_MS: wholeNumber(500, 600_000, 30_000),
  /**
   * The watchdog (issue 13): the channel (ID) its alerts are posted to. Empty: no watchdog runs.
   * Not a secret; the worker needs it too, to open each alert's record for that channel.
   */
  GPU_MEDIC_ALERTS_CHANNEL: z
    .string()
    .regex(/^[CG][A-Z0-9]{2,}$/, 'must be a Slack channel ID like C0123ABCDEF, not a name')
    .optional(),
  /** Seconds between two watchdog reads of every machine of a site. */
  GPU_MEDIC_WATCH_INTERVAL_SEC: wholeNumber(2, 86_400, 180),
  /** Ghost memory (held with no process anywhere on the host) alerts once it has lasted this long. */
  GPU_MEDIC_WATCH_GHOST_SEC: wholeNumber(0, 86_400, 600),
  /** Host RAM use (%) at or above which the watchdog alerts. */
  GPU_MEDIC_WATCH_RAM_PCT: wholeNumber(1, 100, 90),
  /** Machines a watchdog round reads (so connects to) at once: a cold round over a big site must not open every SSH connection together. */
  GPU_MEDIC_WATCH_MAX_CONNECTS: wholeNumber(1, 1000, 32),
  /**
   * Approvals that don't stall: a second group (Slack user IDs) who may also approve host-level steps
   * once a card has waited GPU_MEDIC_ESCALATE_AFTER_SEC. Empty: no escalation.
   */
  GPU_MEDIC_ESCALATION_APPROVERS: list.pipe(
    z.array(z.string().regex(slackUserId, 'must be Slack user IDs like U012ABCDEF, not names')),
  ),
  /** Seconds a pending card waits before the escalation group is pinged and may approve. 0: never. */
  GPU_MEDIC_ESCALATE_AFTER_SEC: wholeNumber(0, 86_400, 0),
  /**
   * Issue 19, docs/security.md. Bot only: its Ed25519 private key (PEM file) that signs every
   * request and decision. Unset: a key of this process only (`start`: both roles in one process).
   */
  GPU_MEDIC_BOT_KEY_FILE: z.string().optional(),
  /** Worker only: the bot's public key file(s) it verifies requests and decisions with (current first, then previous). */
  GPU_MEDIC_BOT_PUBLIC_KEY_FILES: list,
  /** Worker only: its Ed25519 private key (PEM file) that signs the plans it asks approval for. */
  GPU_MEDIC_WORKER_KEY_FILE: z.string().optional(),
  /** The workers' public key file(s): the bot checks every card's plan with them; a worker also accepts its previous ones. */
  GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: list,
  /** How long a signed request or decision stays good: one that waited longer for a worker is refused. */
  GPU_MEDIC_SIGNED_TTL_SEC: wholeNumber(10, 3600, 300),
  /** Heartbeat file the process rewrites and `gpu-medic health` reads; empty = /tmp/gpu-medic-<role>.health.json. */
  GPU_MEDIC_HEALTH_FILE: z.string().default(''),
  /** Seconds between heartbeats; the healthcheck calls a process stale after three missed ones. */
  GPU_MEDIC_HEALTH_INTERVAL_SEC: wholeNumber(1, 300, 10),
  LOG_LEVEL: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info'),
  /** Port of the Prometheus endpoint (`GET /metrics`); unset = no endpoint. `start` serves bot and worker on one. */
  GPU_MEDIC_METRICS_PORT: z.coerce
    .number({ error: 'must be a whole number from 1 to 65535' })
    .int({ error: 'must be a whole number from 1 to 65535' })
    .min(1, { error: 'must be a whole number from 1 to 65535' })
    .max(65535, { error: 'must be a whole number from 1 to 65535' })
    .optional(),
  /** Address the metrics endpoint listens on. Loopback by default: scrape through a proxy or set 0.0.0.0 on a trusted network. */
  GPU_MEDIC_METRICS_BIND: z
    .string()
    .regex(
      /^(localhost|[0-9.]+|[0-9a-fA-F:]+)$/,
      'must be an IP address to listen on, e.g. 127.0.0.1 (loopback) or 0.0.0.0 (every interface)',
    )
    .default('127.0.0.1'),
  /**
   * The Alertmanager receiver (docs/alertmanager.md): the bearer token Alertmanager sends
   * (`http_config.authorization`). Unset: no receiver; the watchdog works alone.
   */
  GPU_MEDIC_ALERTMANAGER_TOKEN: z
    .string()
    .min(32, 'must be at least 32 characters (e.g. `openssl rand -hex 32`)')
    .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces')
    .optional(),
  /** The receiver's own port (required in Socket Mode; in HTTP mode unset = the bot's PORT). */
  GPU_MEDIC_ALERTMANAGER_PORT: z.coerce
    .number({ error: 'must be a whole number from 0 to 65535' })
    .int({ error: 'must be a whole number from 0 to 65535' })
    .min(0, { error: 'must be a whole number from 0 to 65535' })
    .max(65535, { error: 'must be a whole number from 0 to 65535' })
    .optional(),
  /** Address the receiver's own port listens on. Loopback by default. */
  GPU_MEDIC_ALERTMANAGER_BIND: z
    .string()
    .regex(
      /^(localhost|[0-9.]+|[0-9a-fA-F:]+)$/,
      'must be an IP address to listen on, e.g. 127.0.0.1 (loopback) or 0.0.0.0 (every interface)',
    )
    .default('127.0.0.1'),
  /** Alertmanager's URL (e.g. http://127.0.0.1:9093): Snooze also creates a silence there. Unset: no silences. */
  GPU_MEDIC_ALERTMANAGER_URL: z.url({ error: 'must be a URL such as http://127.0.0.1:9093' }).optional(),
  /** Labels naming the machine, first match wins. */
  GPU_MEDIC_ALERTMANAGER_MACHINE_LABELS: list
    .pipe(z.array(z.string().regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, 'must be Prometheus label names')))
    .transform((l) => (l.length > 0 ? l : ['Hostname', 'instance'])),
  /** The GPU UUID label and the GPU host-index label (DCGM exporter's `UUID` and `gpu`). */
  GPU_MEDIC_ALERTMANAGER_UUID_LABEL: z
    .string()
    .regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, 'must be a Prometheus label name')
    .default('UUID'),
  GPU_MEDIC_ALERTMANAGER_GPU_LABEL: z
    .string()
    .regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, 'must be a Prometheus label name')
    .default('gpu'),
  /** `label value=machine id` pairs (comma list), where a label names a machine otherwise than the inventory. */
  GPU_MEDIC_ALERTMANAGER_RENAME: list.pipe(
    z.array(
      z
        .string()
        .regex(
          /^[^=\s]{1,253}=[a-z0-9][a-z0-9._-]{0,62}$/,
          'must be `label-value=machine-id` pairs, e.g. gpu-node-7.lab:9400=kpro5',
        ),
    ),
  ),
});

export type Env = z.output<typeof EnvSchema>;
export type Setting = keyof typeof EnvSchema.shape;
export type Role = 'bot' | 'worker' | 'start';

/**
 * Which process reads each setting. A role never reads (or keeps) another role's settings: the
 * worker, which holds the SSH keys, never has a Slack token. A new setting must be placed here
 * (the compiler insists), and docker-compose.yml's worker `environment:` follows this table.
 */
const SETTING_READERS = {
  GPU_MEDIC_MODE: 'bot',
  SLACK_BOT_TOKEN: 'bot',
  SLACK_APP_TOKEN: 'bot',
  SLACK_SIGNING_SECRET: 'bot',
  SLACK_API_URL: 'bot',
  PORT: 'bot',
  GPU_MEDIC_BIND_ADDRESS: 'bot',
  REDIS_URL: 'both',
  REDIS_SENTINELS: 'both',
  REDIS_SENTINEL_NAME: 'both',
  GPU_MEDIC_INVENTORY: 'both',
  GPU_MEDIC_DEPLOYMENT: 'both',
  GPU_MEDIC_PREFIX: 'both',
  GPU_MEDIC_SITES: 'worker',
  GPU_MEDIC_ALLOWED_CHANNELS: 'both',
  GPU_MEDIC_ALLOWED_USERS: 'both',
  GPU_MEDIC_APPROVERS: 'both',
  GPU_MEDIC_WORKER_SECRET: 'worker',
  GPU_MEDIC_ADMINS: 'both',
  GPU_MEDIC_HOST_BUDGET_PER_HOUR: 'worker',
  GPU_MEDIC_APPROVAL_TTL_SEC: 'both',
  GPU_MEDIC_TERM_GRACE_SEC: 'worker',
  GPU_MEDIC_RELEASE_TIMEOUT_SEC: 'worker',
  GPU_MEDIC_POLL_MS: 'worker',
  GPU_MEDIC_JOB_LOCK_MS: 'worker',
  GPU_MEDIC_STALLED_MS: 'worker',
  GPU_MEDIC_ALERTS_CHANNEL: 'both',
  // The bot reads the next two too: App Home shows a reading older than 3 intervals as stale, RAM at the threshold as trouble.
  GPU_MEDIC_WATCH_INTERVAL_SEC: 'both',
  GPU_MEDIC_WATCH_GHOST_SEC: 'worker',
  GPU_MEDIC_WATCH_RAM_PCT: 'both',
  GPU_MEDIC_WATCH_MAX_CONNECTS: 'worker',
  GPU_MEDIC_ESCALATION_APPROVERS: 'both',
  GPU_MEDIC_ESCALATE_AFTER_SEC: 'both',
  GPU_MEDIC_BOT_KEY_FILE: 'bot',
  GPU_MEDIC_BOT_PUBLIC_KEY_FILES: 'worker',
  GPU_MEDIC_WORKER_KEY_FILE: 'worker',
  GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: 'both',
  GPU_MEDIC_SIGNED_TTL_SEC: 'both',
  GPU_MEDIC_HEALTH_FILE: 'both',
  GPU_MEDIC_HEALTH_INTERVAL_SEC: 'both',
  LOG_LEVEL: 'both',
  GPU_MEDIC_METRICS_PORT: 'both',
  GPU_MEDIC_METRICS_BIND: 'both',
  GPU_MEDIC_ALERTMANAGER_TOKEN: 'bot',
  GPU_MEDIC_ALERTMANAGER_PORT: 'bot',
  GPU_MEDIC_ALERTMANAGER_BIND: 'bot',
  GPU_MEDIC_ALERTMANAGER_URL: 'bot',
  GPU_MEDIC_ALERTMANAGER_MACHINE_LABELS: 'bot',
  GPU_MEDIC_ALERTMANAGER_UUID_LABEL: 'bot',
  GPU_MEDIC_ALERTMANAGER_GPU_LABEL: 'bot',
  GPU_MEDIC_ALERTMANAGER_RENAME: 'bot',
} as const satisfies Record<Setting, 'bot' | 'worker' | 'both'>;

export const SETTINGS = Object.keys(EnvSchema.shape) as Setting[];

/** The settings a role reads (`start` runs both roles in one process, so it reads all of them). */
export function settingsFor(role: Role): Setting[] {
  return SETTINGS.filter((k) => role === 'start' || SETTING_READERS[k] === 'both' || SETTING_READERS[k] === role);
}

/** Settings that hold secrets only the bot may have (the Slack tokens, and the token Alertmanager calls it with). */
const SLACK_SECRETS: readonly Setting[] = [
  'SLACK_BOT_TOKEN',
  'SLACK_APP_TOKEN',
  'SLACK_SIGNING_SECRET',
  'GPU_MEDIC_ALERTMANAGER_TOKEN',
];
/** Settings that hold secrets only the worker may have. */
const WORKER_SECRETS: readonly Setting[] = ['GPU_MEDIC_WORKER_SECRET', 'GPU_MEDIC_WORKER_KEY_FILE'];
/** The bot's signing key: the worker must never hold it (it would sign its own approvals). */
const BOT_SIGNING_SECRETS: readonly Setting[] = ['GPU_MEDIC_BOT_KEY_FILE'];

/** Empty means "unset" for these (lists, and the heartbeat path whose default is computed); any other empty value is refused. */
const EMPTY_IS_UNSET: ReadonlySet<Setting> = new Set([
  'REDIS_SENTINELS',
  'GPU_MEDIC_SITES',
  'GPU_MEDIC_ALLOWED_CHANNELS',
  'GPU_MEDIC_ALLOWED_USERS',
  'GPU_MEDIC_APPROVERS',
  'GPU_MEDIC_HEALTH_FILE',
  'GPU_MEDIC_ALERTS_CHANNEL',
  'GPU_MEDIC_ESCALATION_APPROVERS',
  'GPU_MEDIC_WORKER_SECRET',
  'GPU_MEDIC_ADMINS',
  'GPU_MEDIC_BOT_KEY_FILE',
  'GPU_MEDIC_BOT_PUBLIC_KEY_FILES',
  'GPU_MEDIC_WORKER_KEY_FILE',
  'GPU_MEDIC_WORKER_PUBLIC_KEY_FILES',
  // compose passes `${GPU_MEDIC_METRICS_PORT:-}`: empty there means "no endpoint".
  'GPU_MEDIC_METRICS_PORT',
  'GPU_MEDIC_ALERTMANAGER_TOKEN',
  'GPU_MEDIC_ALERTMANAGER_PORT',
  'GPU_MEDIC_ALERTMANAGER_URL',
  'GPU_MEDIC_ALERTMANAGER_MACHINE_LABELS',
  'GPU_MEDIC_ALERTMANAGER_RENAME',
]);

/** Names that look like ours: an unknown one is a typo of a real setting, never ignored in silence. */
const OURS = /^(GPU_MEDIC_|SLACK_)/;

export interface EnvProblem {
  variable: string;
  message: string;
}

const isSetting = (k: string): k is Setting => Object.hasOwn(EnvSchema.shape, k);

/**
 * Parses the settings `role` reads from `source` and lists every problem at once, in plain
 * words: empty values, values out of range, unknown names (with the closest real one), the
 * tokens the mode needs, and for the worker a Slack secret it must not hold. Pure.
 */
export function parseEnv(
  source: Record<string, string | undefined>,
  role: Role,
): { env: Env | null; problems: EnvProblem[] } {
  const problems: EnvProblem[] = [];
  const mine = new Set<Setting>(settingsFor(role));
  const defaults = EnvSchema.parse({}) as Record<string, unknown>;
  const input: Record<string, string> = {};
  for (const [k, v] of Object.entries(source)) {
    if (v === undefined) continue;
    if (!isSetting(k)) {
      const near = closest(k, SETTINGS);
      // REDIS_* is a common prefix of other tools' settings: only a near miss of ours is a typo.
      if (OURS.test(k) || (k.startsWith('REDIS_') && near !== null && editDistance(k, near) <= 2))
        problems.push({ variable: k, message: `is not a gpu-medic setting${near ? `; did you mean ${near}?` : ''}` });
      continue;
    }
    if (!mine.has(k)) {
      if (role === 'worker' && SLACK_SECRETS.includes(k) && v !== '')
        problems.push({
          variable: k,
          message:
            "is in the worker's environment: the worker holds the SSH keys and must never hold a Slack secret. Start it without it (compose: no env_file; systemd: the unit's own settings; a shell: unset it)",
        });
      if (role === 'worker' && BOT_SIGNING_SECRETS.includes(k) && v !== '')
        problems.push({
          variable: k,
          message:
            "is in the worker's environment: it is the bot's signing key, and a worker holding it could sign its own approvals. Start the worker without it",
        });
      if (role === 'bot' && WORKER_SECRETS.includes(k) && v !== '')
        problems.push({
          variable: k,
          message:
            "is in the bot's environment: it is the worker's secret and the bot must never hold it. Start the bot without it (compose: keep it out of the bot's env_file; systemd: only in the worker's settings; a shell: unset it)",
        });
      continue;
    }
    if (v.trim() === '') {
      if (EMPTY_IS_UNSET.has(k)) continue;
      const d = defaults[k];
      problems.push({
        variable: k,
        message: `is empty: give it a value${d !== undefined ? `, or remove the line to use the default (${String(d)})` : ''}`,
      });
      continue;
    }
    input[k] = v;
  }
  const parsed = EnvSchema.safeParse(input);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const k = String(issue.path[0] ?? '?');
      problems.push({ variable: k, message: plainEnvMessage(k, issue.message, input[k]) });
    }
  }
  const env = parsed.success ? parsed.data : null;
  // The rules across settings read each value on its own, so that a bad value elsewhere never hides them.
  const settingValue = <K extends Setting>(k: K): Env[K] | undefined => {
    const r = EnvSchema.shape[k].safeParse(input[k]);
    return r.success ? (r.data as Env[K]) : undefined;
  };
  // An escalation that could never happen is a mistake, not a choice: said here rather than found out when a card stalls.
  const groupList = settingValue('GPU_MEDIC_ESCALATION_APPROVERS');
  const after = settingValue('GPU_MEDIC_ESCALATE_AFTER_SEC');
  const ttl = settingValue('GPU_MEDIC_APPROVAL_TTL_SEC');
  if (groupList !== undefined && after !== undefined) {
    const group = groupList.length > 0;
    if (group && after === 0)
      problems.push({
        variable: 'GPU_MEDIC_ESCALATE_AFTER_SEC',
        message:
          'is 0, so the escalation group (GPU_MEDIC_ESCALATION_APPROVERS) would never be asked: set how many seconds a card waits before it escalates, or remove the group',
      });
    else if (!group && after > 0)
      problems.push({
        variable: 'GPU_MEDIC_ESCALATION_APPROVERS',
        message:
          'is empty, so a card has nobody to escalate to after GPU_MEDIC_ESCALATE_AFTER_SEC: name the group (Slack user IDs), or set the delay to 0',
      });
    else if (group && ttl !== undefined && after >= ttl)
      problems.push({
        variable: 'GPU_MEDIC_ESCALATE_AFTER_SEC',
        message: `(${after} s) is not shorter than GPU_MEDIC_APPROVAL_TTL_SEC (${ttl} s): every card would expire before it escalates`,
      });
  }
  // The mode's rules read the raw values, so that they are reported in the same pass as any other problem.
  if (role !== 'worker') {
    const mode = input.GPU_MEDIC_MODE ?? 'socket';
    const has = (k: Setting): boolean => input[k] !== undefined || problems.some((p) => p.variable === k);
    if (!has('SLACK_BOT_TOKEN'))
      problems.push({ variable: 'SLACK_BOT_TOKEN', message: 'is required to post to Slack (xoxb-...)' });
    if (mode === 'socket' && !has('SLACK_APP_TOKEN'))
      problems.push({
        variable: 'SLACK_APP_TOKEN',
        message: 'is required in socket mode (xapp-... with connections:write)',
      });
    if (mode === 'http' && !has('SLACK_SIGNING_SECRET'))
      problems.push({ variable: 'SLACK_SIGNING_SECRET', message: 'is required in http mode to verify requests' });
    // The receiver posts to the alerts channel, and in Socket Mode there is no HTTP port to share.
    if (env?.GPU_MEDIC_ALERTMANAGER_TOKEN && !env.GPU_MEDIC_ALERTS_CHANNEL)
      problems.push({
        variable: 'GPU_MEDIC_ALERTS_CHANNEL',
        message:
          'is required with GPU_MEDIC_ALERTMANAGER_TOKEN: Alertmanager alerts are posted there (a channel ID like C0123ABCDEF)',
      });
    if (env?.GPU_MEDIC_ALERTMANAGER_TOKEN && mode === 'socket' && env.GPU_MEDIC_ALERTMANAGER_PORT === undefined)
      problems.push({
        variable: 'GPU_MEDIC_ALERTMANAGER_PORT',
        message:
          'is required with GPU_MEDIC_ALERTMANAGER_TOKEN in socket mode (there is no HTTP port to share): e.g. 9095',
      });
    // An alert's buttons follow the channel policy of /gpu, so an alerts channel left out would refuse every click.
    const alerts = settingValue('GPU_MEDIC_ALERTS_CHANNEL');
    const allowed = settingValue('GPU_MEDIC_ALLOWED_CHANNELS');
    if (alerts && allowed && allowed.length > 0 && !allowed.includes(alerts))
      problems.push({
        variable: 'GPU_MEDIC_ALERTS_CHANNEL',
        message: `${alerts} is not in GPU_MEDIC_ALLOWED_CHANNELS, so every click on an alert's buttons would be refused there; add it to GPU_MEDIC_ALLOWED_CHANNELS (or leave that empty: any channel)`,
      });
  }
  return { env: problems.length === 0 ? env : null, problems };
}

/** Our schema's own message, the value it refused (never a secret's), and the closest allowed word for an enum. */
function plainEnvMessage(k: string, message: string, value: string | undefined): string {
  if (value === undefined) return message;
  if (SLACK_SECRETS.includes(k as Setting)) return message;
  const shown = value.length > 60 ? `${value.slice(0, 57)}...` : value;
  const options = /^must be one of (.*)$/.exec(message)?.[1]?.split(', ');
  const near = options ? closest(value, options) : null;
  return `${message} (it is "${shown}")${near ? `; did you mean ${near}?` : ''}`;
}
