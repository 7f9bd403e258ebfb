import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, scrubSecrets } from '../../src/logger.ts';

function capture(): { stream: Writable; text: () => string } {
  const chunks: string[] = [];
  return {
    stream: new Writable({
      write(c: Buffer, _e, cb) {
        chunks.push(c.toString());
        cb();
      },
    }),
    text: () => chunks.join(''),
  };
}

const TOKEN = 'xoxb-1234567890-abcdefSECRET';
const KEY = '-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----';

describe('logger redaction', () => {
  it('never writes tokens, signing secrets or private keys', () => {
    const c = capture();
    const log = createLogger({ name: 't', destination: c.stream });
    log.info(
      {
        token: TOKEN,
        env: { SLACK_BOT_TOKEN: TOKEN, SLACK_SIGNING_SECRET: 'sigsecret123' },
        headers: { authorization: `Bearer ${TOKEN}` },
      },
      'obj',
    );
    log.info(`free text with ${TOKEN}`);
    log.error({ err: new Error(`failed with key ${KEY}`) }, 'err');
    log.info({ note: `pasted ${KEY}` }, 'note');
    const out = c.text();
    expect(out).not.toContain('abcdefSECRET');
    expect(out).not.toContain('sigsecret123');
    expect(out).not.toContain('b3BlbnNzaC1rZXktdjEAAAAA');
    expect(out).toContain('[redacted]');
    expect(out.split('\n').filter((l) => l.trim() !== '')).toHaveLength(4);
  });
  it('censors secret keys on the top level and two levels down, in child bindings and on errors, and leaves the logged objects as they were', () => {
    const c = capture();
    const log = createLogger({ name: 't', destination: c.stream });
    const logged = { a: { b: { password: 'pw-two-down' } }, list: [{ token: 'tok-in-array' }], keep: 'plain' };
    log.info(logged, 'nested');
    log.child({ signingSecret: 'bound-secret' }).info('child');
    log.error({ err: Object.assign(new Error('boom'), { token: 'tok-on-error' }) }, 'err');
    const lines = c
      .text()
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const out = c.text();
    for (const secret of ['pw-two-down', 'tok-in-array', 'bound-secret', 'tok-on-error'])
      expect(out).not.toContain(secret);
    expect(lines[0]).toMatchObject({
      a: { b: { password: '[redacted]' } },
      list: [{ token: '[redacted]' }],
      keep: 'plain',
    });
    expect(lines[1]).toMatchObject({ signingSecret: '[redacted]', msg: 'child' });
    expect(lines[2]).toMatchObject({ err: { type: 'Error', message: 'boom', token: '[redacted]' } });
    expect(logged).toEqual({ a: { b: { password: 'pw-two-down' } }, list: [{ token: 'tok-in-array' }], keep: 'plain' });
  });
  it('scrubs app tokens and webhook urls from text', () => {
    expect(scrubSecrets('xapp-1-A0-123-abc https://hooks.slack.com/services/T/B/x')).toBe('[redacted] [redacted]');
  });
});
