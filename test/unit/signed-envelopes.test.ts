/**
 * The signed envelopes (unforgeable from Redis) and their keys (src/auth/). The format is what docs/security.md
 * says: openssl verifies the bot's signature with nothing of gpu-medic; a rotation keeps the
 * previous key accepted; key files that are missing or wrong are said by `config check`.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { canonical } from '../../src/auth/envelope.ts';
import { botKeysOf, newKeyPair, workerKeysOf } from '../../src/auth/keys.ts';
import { botSigner, checkDecision, checkRequest } from '../../src/auth/signed-jobs.ts';
import { checkConfig } from '../../src/config/check.ts';

const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-keys-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function files(name: string) {
  const pair = newKeyPair();
  const priv = join(dir, `${name}.key.pem`);
  const pub = join(dir, `${name}.pub.pem`);
  writeFileSync(priv, pair.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  writeFileSync(pub, pair.publicKey.export({ type: 'spki', format: 'pem' }));
  return { pair, priv, pub };
}

const R = {
  incidentId: 'inc_1',
  target: 'ct129',
  host: 'kpro5',
  vmid: 129,
  requester: 'U0ALICE001',
  channel: 'C0ONCALL01',
};
const T0 = 1_796_100_000_000;

describe('signed requests and decisions', () => {
  it('the body is the documented text, and openssl verifies the signature with the public key file alone', () => {
    const bot = files('bot-openssl');
    const env = botSigner(bot.pair.privateKey, 300_000).request(R, T0);
    expect(env.body).toMatch(
      /^gpu-medic request v2\nincident=inc_1\ntarget=ct129\nhost=kpro5\nvmid=129\ngpu=\nrequester=U0ALICE001\ngroups=\nchannel=C0ONCALL01\nsigned_at=1796100000000\nexpires_at=1796100300000\nnonce=[A-Za-z0-9_-]{22}\n$/,
    );
    const body = join(dir, 'body');
    const sig = join(dir, 'sig');
    writeFileSync(body, env.body);
    writeFileSync(sig, Buffer.from(env.sig, 'base64'));
    const ok = execFileSync('openssl', [
      'pkeyutl',
      '-verify',
      '-pubin',
      '-inkey',
      bot.pub,
      '-rawin',
      '-in',
      body,
      '-sigfile',
      sig,
    ]);
    expect(ok.toString()).toMatch(/Signature Verified Successfully/);
    writeFileSync(body, env.body.replace('ct129', 'ct130'));
    expect(() =>
      execFileSync(
        'openssl',
        ['pkeyutl', '-verify', '-pubin', '-inkey', bot.pub, '-rawin', '-in', body, '-sigfile', sig],
        {
          stdio: 'pipe',
        },
      ),
    ).toThrow();
  });

  it('refuses another key, another incident or target, an edited field, and a request past its expiry', () => {
    const bot = newKeyPair();
    const env = botSigner(bot.privateKey, 300_000).request(R, T0);
    const want = { incidentId: 'inc_1', target: 'ct129' };
    expect(checkRequest(env, [bot.publicKey], want, T0 + 1000)).toMatchObject({
      ok: true,
      value: { requester: R.requester },
    });
    expect(checkRequest(env, [newKeyPair().publicKey], want, T0)).toMatchObject({ ok: false, code: 'unsigned' });
    expect(checkRequest(env, [bot.publicKey], { ...want, target: 'ct130' }, T0)).toMatchObject({
      ok: false,
      code: 'mismatch',
    });
    expect(
      checkRequest({ ...env, body: env.body.replace('U0ALICE001', 'U0MALLORY1') }, [bot.publicKey], want, T0),
    ).toMatchObject({
      ok: false,
      code: 'unsigned',
    });
    expect(checkRequest(env, [bot.publicKey], want, T0 + 300_001)).toMatchObject({ ok: false, code: 'lapsed' });
    expect(checkRequest(null, [bot.publicKey], want, T0)).toMatchObject({ ok: false, code: 'unsigned' });
    // A value with a newline cannot be signed (it would make a second field).
    expect(() =>
      canonical('request', { ...Object.fromEntries(Object.keys(R).map((k) => [k, 'x'])), incident: 'a\nb' } as never),
    ).toThrow();
  });

  it('a decision names its approval, incident and plan digest; a rotation keeps the previous bot key accepted', () => {
    const old = newKeyPair();
    const cur = newKeyPair();
    const d = {
      approvalId: 'apr_A',
      incidentId: 'inc_1',
      planDigest: 'a'.repeat(64),
      decision: 'approved' as const,
      decider: 'U0BOB00001',
      channel: 'C0ONCALL01',
    };
    const byOld = botSigner(old.privateKey).decision(d, T0);
    const want = { approvalId: 'apr_A', incidentId: 'inc_1', planDigest: 'a'.repeat(64) };
    expect(checkDecision(byOld, [cur.publicKey, old.publicKey], want, T0)).toMatchObject({
      ok: true,
      value: { decider: 'U0BOB00001' },
    });
    expect(checkDecision(byOld, [cur.publicKey], want, T0)).toMatchObject({ ok: false, code: 'unsigned' });
    expect(checkDecision(byOld, [old.publicKey], { ...want, planDigest: 'b'.repeat(64) }, T0)).toMatchObject({
      ok: false,
      code: 'mismatch',
    });
  });
});

describe('key files', () => {
  it('loads current and previous public keys; a worker verifies its own plans with its own key and the previous ones', () => {
    const bot = files('bot-rot');
    const w1 = files('w1');
    const w2 = files('w2');
    const b = botKeysOf({
      GPU_MEDIC_BOT_KEY_FILE: bot.priv,
      GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: [w2.pub, w1.pub],
      GPU_MEDIC_BOT_PUBLIC_KEY_FILES: [],
    });
    expect(b.ok && b.value.workerPublic.length).toBe(2);
    const w = workerKeysOf({
      GPU_MEDIC_WORKER_KEY_FILE: w2.priv,
      GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: [w1.pub],
      GPU_MEDIC_BOT_PUBLIC_KEY_FILES: [bot.pub],
    });
    expect(w.ok && w.value.workerPublic.length).toBe(2);
    expect(w.ok && w.value.botPublic.length).toBe(1);
  });

  it('config check names a missing, unreadable or wrong key file, without its content', async () => {
    const notKey = join(dir, 'not-a-key.pem');
    writeFileSync(notKey, 'hello secret\n');
    const bot = files('bot-cc');
    const inv = async () => ({
      inventory: { defaults: { user: 'root', commandTimeoutSec: 15, connectTimeoutSec: 5 }, hosts: [], containers: [] },
      problems: [],
    });
    const base = { SLACK_BOT_TOKEN: 'xoxb-1', SLACK_APP_TOKEN: 'xapp-1' };
    const missing = await checkConfig({ ...base, GPU_MEDIC_BOT_KEY_FILE: join(dir, 'nope.pem') }, 'bot', inv);
    expect(missing.problems.join('\n')).toMatch(/GPU_MEDIC_BOT_KEY_FILE: .*nope\.pem does not exist/);
    const wrong = await checkConfig({ GPU_MEDIC_BOT_PUBLIC_KEY_FILES: notKey }, 'worker', inv);
    expect(wrong.problems.join('\n')).toMatch(/GPU_MEDIC_BOT_PUBLIC_KEY_FILES: .*is not a PEM public key/);
    expect(wrong.problems.join('\n')).not.toContain('hello secret');
    const fine = await checkConfig(
      { ...base, GPU_MEDIC_BOT_KEY_FILE: bot.priv, GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: bot.pub },
      'bot',
      inv,
    );
    expect(fine.problems).toEqual([]);
    // The worker refuses to hold the bot's signing key.
    const held = await checkConfig({ GPU_MEDIC_BOT_KEY_FILE: bot.priv }, 'worker', inv);
    expect(held.problems.join('\n')).toMatch(/GPU_MEDIC_BOT_KEY_FILE is in the worker's environment/);
  });
});
