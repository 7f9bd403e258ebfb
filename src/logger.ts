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

export function createLogger(opts: { level?: string; name: string; destination?: DestinationStream }): Logger {
  const paths = SECRET_KEYS.flatMap((k) => [k, `*.${k}`, `*.*.${k}`, `headers.${k}`]);
  return pino(
    {
      name: opts.name,
      level: opts.level ?? 'info',
      redact: { paths, censor: '[redacted]' },
      formatters: {
        log(obj) {
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
