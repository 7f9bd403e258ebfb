import pino, { type DestinationStream, type Logger } from 'pino';

/** Keys whose values never reach a log line, wherever they sit in the object. */
const SECRET_KEYS = [
  'token',
  'botToken',
  'appToken',
  'signingSecret',
  'privateKey',
  'password',
  'passphrase',
  'authorization',
  'SLACK_BOT_TOKEN',
  'SLACK_APP_TOKEN',
  'SLACK_SIGNING_SECRET',
  'GPU_MEDIC_WORKER_SECRET',
  'workerSecret',
  'planKey',
  'response_url',
  'responseUrl',
];

const SECRET_TEXT = [
  /xox[abposr]-[A-Za-z0-9-]+/g,
  /xapp-[A-Za-z0-9-]+/g,
  /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)/g,
  /https:\/\/hooks\.slack\.com\/[A-Za-z0-9/_-]+/g,
];

/** Removes anything that looks like a Slack token or a private key from free text. */
export function scrubSecrets(text: string): string {
  let out = text;
  for (const re of SECRET_TEXT) out = out.replace(re, '[redacted]');
  return out;
}

const SECRET_KEY_SET = new Set(SECRET_KEYS);
const CENSOR = '[redacted]';

/**
 * `value` with every value under a secret key replaced by the censor, on the top level and up to
 * two levels down (what the redact paths `k`, `*.k`, `*.*.k` covered). Copy on write: the caller's
 * objects are never changed, and an object with nothing to censor is returned as it is. One pass
 * over the keys with a Set lookup: pino's `redact` with the wildcard paths `*.k` and `*.*.k` cost
 * about 0.2 ms a line, most of what a status ack's log line cost the bot, whose acks must stay cheap.
 */
function censored(value: unknown, depth: number): unknown {
  if (typeof value !== 'object' || value === null) return value;
  let out: Record<string, unknown> | null = null;
  const from = value as Record<string, unknown>;
  for (const k of Object.keys(from)) {
    const v = from[k];
    const next = SECRET_KEY_SET.has(k) ? CENSOR : depth < 2 ? censored(v, depth + 1) : v;
    if (next === v) continue;
    // The same prototype and property descriptors (an Error keeps its message, stack and type).
    out ??= Array.isArray(value)
      ? ([...value] as unknown as Record<string, unknown>)
      : (Object.create(Object.getPrototypeOf(value), Object.getOwnPropertyDescriptors(value)) as Record<
          string,
          unknown
        >);
    out[k] = next;
  }
  return out ?? value;
}

export function createLogger(opts: { level?: string; name: string; destination?: DestinationStream }): Logger {
  return pino(
    {
      name: opts.name,
      level: opts.level ?? 'info',
      // Top-level keys (also a child logger's bindings, which the formatter below never sees): pino
      // looks each one up by name, no pass over the object. Nested ones: `censored`, one pass.
      redact: { paths: SECRET_KEYS, censor: CENSOR },
      formatters: {
        log(logged) {
          const obj = censored(logged, 0) as typeof logged;
          // Error messages and free text can carry secrets that key-based redaction cannot see.
          for (const [k, v] of Object.entries(obj)) if (typeof v === 'string') obj[k] = scrubSecrets(v);
          return obj;
        },
      },
      hooks: {
        logMethod(args, method) {
          const scrubbed = args.map((a) => (typeof a === 'string' ? scrubSecrets(a) : a)) as typeof args;
          method.apply(this, scrubbed);
        },
      },
      serializers: {
        err: (e: unknown) => {
          const s = pino.stdSerializers.err(e as Error);
          return { ...s, message: scrubSecrets(String(s.message)), stack: scrubSecrets(String(s.stack ?? '')) };
        },
      },
    },
    opts.destination,
  );
}

export type { Logger };
