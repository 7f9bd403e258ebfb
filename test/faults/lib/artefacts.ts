/**
 * Every artefact a run leaves (log lines, every Slack call and response_url post, every Redis
 * key of the stack: job data, incident log, bookkeeping) searched for every secret the run had.
 */
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import type { Stack } from '../../harness/stack.ts';

export interface Secret {
  name: string;
  value: string;
}

/** The Slack bot token, the signing secret, and each line of the worker's SSH private key body. */
function secretsOf(s: Stack): Secret[] {
  const out: Secret[] = [
    { name: 'Slack bot token', value: s.slack.botToken },
    { name: 'Slack signing secret', value: s.signingSecret },
  ];
  const keyFile = s.inventory.defaults.keyFile;
  if (keyFile) {
    const lines = readFileSync(keyFile, 'utf8')
      .split('\n')
      .filter((l) => l.length >= 16 && !l.startsWith('-----'));
    lines.forEach((l, i) => out.push({ name: `SSH private key line ${i + 1}`, value: l }));
  }
  return out;
}

/** Every value under `${prefix}:*`, whatever its type, as text. */
async function dumpRedis(redis: Redis, prefix: string): Promise<string> {
  const parts: string[] = [];
  let cursor = '0';
  let rounds = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    for (const k of keys) {
      const type = await redis.type(k);
      parts.push(k);
      if (type === 'string') parts.push(String(await redis.get(k)));
      else if (type === 'hash') parts.push(JSON.stringify(await redis.hgetall(k)));
      else if (type === 'stream') parts.push(JSON.stringify(await redis.xrange(k, '-', '+')));
      else if (type === 'list') parts.push(JSON.stringify(await redis.lrange(k, 0, -1)));
      else if (type === 'set') parts.push(JSON.stringify(await redis.smembers(k)));
      else if (type === 'zset') parts.push(JSON.stringify(await redis.zrange(k, 0, -1)));
    }
  } while (cursor !== '0' && ++rounds < 100_000);
  return parts.join('\n');
}

/** `[]` when no artefact holds a secret; else "<secret> in <artefact>" for each leak. */
export async function secretLeaks(s: Stack, extra: Record<string, string> = {}): Promise<string[]> {
  const artefacts: Record<string, string> = {
    'bot and worker logs': s.logText(),
    'Slack Web API calls': JSON.stringify(s.slack.calls()),
    'response_url posts (ephemeral answers)': JSON.stringify(s.slack.responses()),
    'Redis (job data, incident log, bookkeeping)': await dumpRedis(s.redis, s.prefix),
    ...extra,
  };
  const leaks: string[] = [];
  for (const secret of secretsOf(s))
    for (const [name, text] of Object.entries(artefacts))
      if (text.includes(secret.value)) leaks.push(`${secret.name} in ${name}`);
  return leaks;
}
