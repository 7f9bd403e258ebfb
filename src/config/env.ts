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

/** Which process reads a setting: a role never reads (or keeps) another role's settings. */
type Readers = 'bot' | 'worker' | 'both';

/**
 * Everything known about one setting, in one place: its schema, which process reads it, whether
 * it is a secret one role must never hold, and whether empty means unset.
 */
interface SettingRow {
  schema: z.ZodType;
  /**
   * Which process reads it. The worker, which holds the SSH keys, never has a Slack token;
   * docker-compose.yml's worker `environment:` follows these.
   */
  readers: Readers;
  /**
   * A secret only one role may have: `slack` (the Slack tokens, and the token Alertmanager calls
   * the bot with) and `bot-signing` (the bot's signing key: a worker holding it could sign its own
   * approvals) never reach the worker; `worker` never reaches the bot.
   */
  secret?: 'slack' | 'worker' | 'bot-signing';
  /** Empty means "unset" (lists, paths and keys whose default is computed or absent); any other empty value is refused. */
  emptyIsUnset?: true;
}

/** One row per setting; EnvSchema, who reads what, the secrets and the empty-is-unset ones are built from it. */
const SETTING_ROWS = {
  GPU_MEDIC_MODE: {
    schema: oneOf(['socket', 'http'], 'socket'),
    readers: 'bot',
  },
  SLACK_BOT_TOKEN: {
    schema: z
      .string()
      .regex(/^xoxb-/, 'must be a bot token (xoxb-...)')
      .optional(),
    readers: 'bot',
    secret: 'slack',
  },
  SLACK_APP_TOKEN: {
    schema: z
      .string()
      .regex(/^xapp-/, 'must be an app-level token (xapp-...) for Socket Mode')
      .optional(),
    readers: 'bot',
    secret: 'slack',
  },
  SLACK_SIGNING_SECRET: {
    schema: z.string().min(8, 'is too short to be a Slack signing secret').optional(),
    readers: 'bot',
    secret: 'slack',
  },
  /** Web API base URL (ends with /api/); only tests and the demo point it elsewhere. */
  SLACK_API_URL: {
    schema: z.url({ error: 'must be a URL such as https://slack.com/api/' }).optional(),
    readers: 'bot',
  },
  PORT: {
    schema: wholeNumber(0, 65535, 3000),
    readers: 'bot',
  },
  /** HTTP mode: the address the receiver listens on. Loopback by default: put a TLS proxy in front. */
  GPU_MEDIC_BIND_ADDRESS: {
    schema: z
      .string()
      .regex(
        /^(localhost|[0-9.]+|[0-9a-fA-F:]+)$/,
        'must be an IP address to listen on, e.g. 127.0.0.1 (loopback) or 0.0.0.0 (every interface)',
      )
      .default('127.0.0.1'),
    readers: 'bot',
  },
  REDIS_URL: {
    schema: z
      .string()
      .regex(/^rediss?:\/\/\S+$/, 'must be a redis:// or rediss:// URL, e.g. redis://127.0.0.1:6379')
      .default('redis://127.0.0.1:6379'),
    readers: 'both',
  },
  /** Redis Sentinel: `host:port` of each sentinel (comma list); empty = REDIS_URL is the server itself. */
  REDIS_SENTINELS: {
    schema: list.pipe(
      z.array(
        z
          .string()
          .regex(
            /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/,
            'must be host:port entries, e.g. 10.0.0.5:26379,10.0.0.6:26379',
          ),
      ),
    ),
    readers: 'both',
    emptyIsUnset: true,
  },
  /** The primary's name in the sentinels' `sentinel monitor <name> ...` (only with REDIS_SENTINELS). */
  REDIS_SENTINEL_NAME: {
    schema: z
      .string()
      .regex(/^[A-Za-z0-9._-]+$/, 'may hold only letters, digits, ".", "_" and "-"')
      .default('gpu-medic'),
    readers: 'both',
  },
  GPU_MEDIC_INVENTORY: {
    schema: z.string().default('./inventory.yaml'),
    readers: 'both',
  },
  /** Which documented way of running this is; only changes what `config check` says and checks. */
  GPU_MEDIC_DEPLOYMENT: {
    schema: oneOf(['local', 'systemd', 'compose'], 'local'),
    readers: 'both',
  },
  /** Key prefix in Redis for queues and incidents (tests use a random one). */
  GPU_MEDIC_PREFIX: {
    schema: z
      .string()
      .regex(/^[a-zA-Z0-9:_-]+$/, 'may hold only letters, digits, ":", "_" and "-"')
      .default('gpu-medic'),
    readers: 'both',
  },
  /** Sites this worker serves (comma list); empty = every site in the inventory. */
  GPU_MEDIC_SITES: {
    schema: list,
    readers: 'worker',
    emptyIsUnset: true,
  },
  /** Channels where /gpu may be used (comma list of IDs); empty = any. */
  GPU_MEDIC_ALLOWED_CHANNELS: {
    schema: list,
    readers: 'both',
    emptyIsUnset: true,
  },
  /** Users who may request (comma list of IDs); empty = any member of an allowed channel. */
  GPU_MEDIC_ALLOWED_USERS: {
    schema: list,
    readers: 'both',
    emptyIsUnset: true,
  },
  /** Users who may approve host-level steps (Slack user IDs, never names). */
  GPU_MEDIC_APPROVERS: {
    schema: list.pipe(z.array(z.string().regex(slackUserId, 'must be Slack user IDs like U012ABCDEF, not names'))),
    readers: 'both',
    emptyIsUnset: true,
  },
  /**
   * Admins (Slack user IDs): the only ones who may approve a host-level step past the blast-radius
   * budget. Empty: nobody can lift it.
   */
  GPU_MEDIC_ADMINS: {
    schema: list.pipe(z.array(z.string().regex(slackUserId, 'must be Slack user IDs like U012ABCDEF, not names'))),
    readers: 'both',
    emptyIsUnset: true,
  },
  /** Blast-radius budget: host-level destructive steps (kills, resets, container stops) allowed per host per hour. */
  GPU_MEDIC_HOST_BUDGET_PER_HOUR: {
    schema: wholeNumber(1, 1000, 3),
    readers: 'worker',
  },
  /**
   * Worker only (never give it to the bot): the key approved plans are sealed with, so that whoever
   * writes Redis cannot change what a worker runs. Every worker of a site needs the same value.
   * Empty: derived from the SSH key files the inventory names.
   */
  GPU_MEDIC_WORKER_SECRET: {
    schema: z.string().min(32, 'must be at least 32 characters (e.g. `openssl rand -hex 32`)').optional(),
    readers: 'worker',
    secret: 'worker',
    emptyIsUnset: true,
  },
  /** Seconds an approval stays open. At least 5 so a test can watch a card expire; production wants minutes. */
  GPU_MEDIC_APPROVAL_TTL_SEC: {
    schema: wholeNumber(5, 86_400, 900),
    readers: 'both',
  },
  GPU_MEDIC_TERM_GRACE_SEC: {
    schema: wholeNumber(1, 300, 10),
    readers: 'worker',
  },
  /** How long to wait for GPU memory to be released after a kill (a dying rank can take tens of seconds). */
  GPU_MEDIC_RELEASE_TIMEOUT_SEC: {
    schema: wholeNumber(1, 1800, 90),
    readers: 'worker',
  },
  /** How often the worker re-reads processes and memory while waiting. */
  GPU_MEDIC_POLL_MS: {
    schema: wholeNumber(100, 60_000, 3000),
    readers: 'worker',
  },
  /**
   * How the worker's key reaches a machine, so that by default it runs one fixed agent and never a shell.
   * `agent`: it speaks only gpu-medic-agent's verbs (agent/install.sh puts a forced-command key in front of
   * it), and every signal or reset carries the signed request or decision and plan. `root-shell`: shell lines
   * as before (opt-in; `config check` says what it gives up: a stolen worker key is a root shell on every
   * machine).
   */
  GPU_MEDIC_SSH_ACCESS: {
    schema: oneOf(['agent', 'root-shell'], 'agent'),
    readers: 'worker',
  },
  /**
   * BullMQ job lock: a worker renews it every half of this while a job runs. A worker that died
   * mid-job is noticed once it lapses, and its job is handed to another worker (which finds the
   * destructive steps already claimed). BullMQ's default, 30 s.
   */
  GPU_MEDIC_JOB_LOCK_MS: {
    schema: wholeNumber(1000, 600_000, 30_000),
    readers: 'worker',
  },
  /** How often workers look for jobs whose lock lapsed (stalled). BullMQ's default, 30 s. */
  GPU_MEDIC_STALLED_MS: {
    schema: wholeNumber(500, 600_000, 30_000),
    readers: 'worker',
  },
  /**
   * The watchdog, which warns before a user has to ask: the channel (ID) its alerts are posted to. Empty: no
   * watchdog runs. Not a secret; the worker needs it too, to open each alert's record for that channel.
   */
  GPU_MEDIC_ALERTS_CHANNEL: {
    schema: z
      .string()
      .regex(/^[CG][A-Z0-9]{2,}$/, 'must be a Slack channel ID like C0123ABCDEF, not a name')
      .optional(),
    readers: 'both',
    emptyIsUnset: true,
  },
  /** Seconds between two watchdog reads of every machine of a site. */
  GPU_MEDIC_WATCH_INTERVAL_SEC: {
    schema: wholeNumber(2, 86_400, 180),
    // The bot reads it too: App Home shows a reading older than 3 intervals as stale.
    readers: 'both',
  },
  /** Ghost memory (held with no process anywhere on the host) alerts once it has lasted this long. */
  GPU_MEDIC_WATCH_GHOST_SEC: {
    schema: wholeNumber(0, 86_400, 600),
    readers: 'worker',
  },
  /** Host RAM use (%) at or above which the watchdog alerts. */
  GPU_MEDIC_WATCH_RAM_PCT: {
    schema: wholeNumber(1, 100, 90),
    // The bot reads it too: App Home shows RAM at the threshold as trouble.
    readers: 'both',
  },
  /** Machines a watchdog round reads (so connects to) at once: a cold round over a big site must not open every SSH connection together. */
  GPU_MEDIC_WATCH_MAX_CONNECTS: {
    schema: wholeNumber(1, 1000, 32),
    readers: 'worker',
  },
  /**
   * Approvals that don't stall: a second group (Slack user IDs) who may also approve host-level steps
   * once a card has waited GPU_MEDIC_ESCALATE_AFTER_SEC. Empty: no escalation.
   */
  GPU_MEDIC_ESCALATION_APPROVERS: {
    schema: list.pipe(z.array(z.string().regex(slackUserId, 'must be Slack user IDs like U012ABCDEF, not names'))),
    readers: 'both',
    emptyIsUnset: true,
  },
  /** Seconds a pending card waits before the escalation group is pinged and may approve. 0: never. */
  GPU_MEDIC_ESCALATE_AFTER_SEC: {
    schema: wholeNumber(0, 86_400, 0),
    readers: 'both',
  },
  /**
   * So that only a person's click the bot authenticated makes a worker act (docs/security.md). Bot only: its
   * Ed25519 private key (PEM file) that signs every request and decision. Unset: a key of this process only
   * (`start`: both roles in one process).
   */
  GPU_MEDIC_BOT_KEY_FILE: {
    schema: z.string().optional(),
    readers: 'bot',
    secret: 'bot-signing',
    emptyIsUnset: true,
  },
  /** Worker only: the bot's public key file(s) it verifies requests and decisions with (current first, then previous). */
  GPU_MEDIC_BOT_PUBLIC_KEY_FILES: {
    schema: list,
    readers: 'worker',
    emptyIsUnset: true,
  },
  /** Worker only: its Ed25519 private key (PEM file) that signs the plans it asks approval for. */
  GPU_MEDIC_WORKER_KEY_FILE: {
    schema: z.string().optional(),
    readers: 'worker',
    secret: 'worker',
    emptyIsUnset: true,
  },
  /** The workers' public key file(s): the bot checks every card's plan with them; a worker also accepts its previous ones. */
  GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: {
    schema: list,
    readers: 'both',
    emptyIsUnset: true,
  },
  /** How long a signed request or decision stays good: one that waited longer for a worker is refused. */
  GPU_MEDIC_SIGNED_TTL_SEC: {
    schema: wholeNumber(10, 3600, 300),
    readers: 'both',
  },
  /** Heartbeat file the process rewrites and `gpu-medic health` reads; empty = /tmp/gpu-medic-<role>.health.json. */
  GPU_MEDIC_HEALTH_FILE: {
    schema: z.string().default(''),
    readers: 'both',
    emptyIsUnset: true,
  },
  /** Seconds between heartbeats; the healthcheck calls a process stale after three missed ones. */
  GPU_MEDIC_HEALTH_INTERVAL_SEC: {
    schema: wholeNumber(1, 300, 10),
    readers: 'both',
  },
  LOG_LEVEL: {
    schema: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info'),
    readers: 'both',
  },
  /** Port of the Prometheus endpoint (`GET /metrics`); unset = no endpoint. `start` serves bot and worker on one. */
  GPU_MEDIC_METRICS_PORT: {
    schema: z.coerce
      .number({ error: 'must be a whole number from 1 to 65535' })
      .int({ error: 'must be a whole number from 1 to 65535' })
      .min(1, { error: 'must be a whole number from 1 to 65535' })
      .max(65535, { error: 'must be a whole number from 1 to 65535' })
      .optional(),
    readers: 'both',
    // compose passes `${GPU_MEDIC_METRICS_PORT:-}`: empty there means "no endpoint".
    emptyIsUnset: true,
  },
  /** Address the metrics endpoint listens on. Loopback by default: scrape through a proxy or set 0.0.0.0 on a trusted network. */
  GPU_MEDIC_METRICS_BIND: {
    schema: z
      .string()
      .regex(
        /^(localhost|[0-9.]+|[0-9a-fA-F:]+)$/,
        'must be an IP address to listen on, e.g. 127.0.0.1 (loopback) or 0.0.0.0 (every interface)',
      )
      .default('127.0.0.1'),
    readers: 'both',
  },
  /**
   * The Alertmanager receiver (docs/alertmanager.md): the bearer token Alertmanager sends
   * (`http_config.authorization`). Unset: no receiver; the watchdog works alone.
   */
  GPU_MEDIC_ALERTMANAGER_TOKEN: {
    schema: z
      .string()
      .min(32, 'must be at least 32 characters (e.g. `openssl rand -hex 32`)')
      .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces')
      .optional(),
    readers: 'bot',
    secret: 'slack',
    emptyIsUnset: true,
  },
  /** The receiver's own port (required in Socket Mode; in HTTP mode unset = the bot's PORT). */
  GPU_MEDIC_ALERTMANAGER_PORT: {
    schema: z.coerce
      .number({ error: 'must be a whole number from 0 to 65535' })
      .int({ error: 'must be a whole number from 0 to 65535' })
      .min(0, { error: 'must be a whole number from 0 to 65535' })
      .max(65535, { error: 'must be a whole number from 0 to 65535' })
      .optional(),
    readers: 'bot',
    emptyIsUnset: true,
  },
  /** Address the receiver's own port listens on. Loopback by default. */
  GPU_MEDIC_ALERTMANAGER_BIND: {
    schema: z
      .string()
      .regex(
        /^(localhost|[0-9.]+|[0-9a-fA-F:]+)$/,
        'must be an IP address to listen on, e.g. 127.0.0.1 (loopback) or 0.0.0.0 (every interface)',
      )
      .default('127.0.0.1'),
    readers: 'bot',
  },
  /** Alertmanager's URL (e.g. http://127.0.0.1:9093): Snooze also creates a silence there. Unset: no silences. */
  GPU_MEDIC_ALERTMANAGER_URL: {
    schema: z.url({ error: 'must be a URL such as http://127.0.0.1:9093' }).optional(),
    readers: 'bot',
    emptyIsUnset: true,
  },
  /** Labels naming the machine, first match wins. */
  GPU_MEDIC_ALERTMANAGER_MACHINE_LABELS: {
    schema: list
      .pipe(z.array(z.string().regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, 'must be Prometheus label names')))
      .transform((l) => (l.length > 0 ? l : ['Hostname', 'instance'])),
    readers: 'bot',
    emptyIsUnset: true,
  },
  /** The GPU UUID label and the GPU host-index label (DCGM exporter's `UUID` and `gpu`). */
  GPU_MEDIC_ALERTMANAGER_UUID_LABEL: {
    schema: z
      .string()
      .regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, 'must be a Prometheus label name')
      .default('UUID'),
    readers: 'bot',
  },
  GPU_MEDIC_ALERTMANAGER_GPU_LABEL: {
    schema: z
      .string()
      .regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, 'must be a Prometheus label name')
      .default('gpu'),
    readers: 'bot',
  },
  /** `label value=machine id` pairs (comma list), where a label names a machine otherwise than the inventory. */
  GPU_MEDIC_ALERTMANAGER_RENAME: {
    schema: list.pipe(
      z.array(
        z
          .string()
          .regex(
            /^[^=\s]{1,253}=[a-z0-9][a-z0-9._-]{0,62}$/,
            'must be `label-value=machine-id` pairs, e.g. gpu-node-7.lab:9400=kpro5',
          ),
      ),
    ),
    readers: 'bot',
    emptyIsUnset: true,
  },
} as const satisfies Record<string, SettingRow>;

type Rows = typeof SETTING_ROWS;

/** Everything read from the environment. Tokens never leave this object except into the Slack client. */
export const EnvSchema = z.object(
  Object.fromEntries(Object.entries(SETTING_ROWS).map(([k, row]) => [k, row.schema])) as {
    [K in keyof Rows]: Rows[K]['schema'];
  },
);

export type Env = z.output<typeof EnvSchema>;
export type Setting = keyof typeof EnvSchema.shape;
export type Role = 'bot' | 'worker' | 'start';

export const SETTINGS = Object.keys(EnvSchema.shape) as Setting[];

/** The settings a role reads (`start` runs both roles in one process, so it reads all of them). */
export function settingsFor(role: Role): Setting[] {
  return SETTINGS.filter(
    (k) => role === 'start' || SETTING_ROWS[k].readers === 'both' || SETTING_ROWS[k].readers === role,
  );
}

const rowsWhere = (test: (row: SettingRow) => boolean): Setting[] => SETTINGS.filter((k) => test(SETTING_ROWS[k]));
/** Settings that hold secrets only the bot may have (the Slack tokens, and the token Alertmanager calls it with). */
const SLACK_SECRETS: readonly Setting[] = rowsWhere((r) => r.secret === 'slack');
/** Settings that hold secrets only the worker may have. */
const WORKER_SECRETS: readonly Setting[] = rowsWhere((r) => r.secret === 'worker');
/** The bot's signing key: the worker must never hold it (it would sign its own approvals). */
const BOT_SIGNING_SECRETS: readonly Setting[] = rowsWhere((r) => r.secret === 'bot-signing');

/** Empty means "unset" for these; any other empty value is refused. */
const EMPTY_IS_UNSET: ReadonlySet<Setting> = new Set(rowsWhere((r) => r.emptyIsUnset === true));

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
