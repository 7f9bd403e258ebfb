/**
 * deploy/systemd: the plain-host path. The units run the compiled build as their own users, the
 * worker with no EnvironmentFile and the bot unable to see the keys; systemd-analyze accepts them;
 * and the worker unit's command lines, run as written from a /etc/gpu-medic whose .env holds
 * everything, pass their config check and start a worker with no Slack secret in its environment.
 */
import { execFile, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS_URL, newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';
import { buildDist, ROOT } from './build.ts';

const run = promisify(execFile);
const FP = `SHA256:${'A'.repeat(43)}`;

/** `Key=value` lines of a unit's [Service] section (a key may repeat). */
function service(file: string): Array<[string, string]> {
  const text = readFileSync(join(ROOT, 'deploy/systemd', file), 'utf8');
  const section = text.split(/^\[/m).find((s) => s.startsWith('Service]')) ?? '';
  return section
    .split('\n')
    .slice(1)
    .filter((l) => /^[A-Za-z]+=/.test(l))
    .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]);
}
const all = (s: Array<[string, string]>, key: string): string[] => s.filter(([k]) => k === key).map(([, v]) => v);

const bot = service('gpu-medic-bot.service');
const worker = service('gpu-medic-worker.service');

describe('deploy/systemd units', () => {
  it('run the compiled build (no TypeScript loader) as their own users, from /etc/gpu-medic', () => {
    for (const [s, role] of [
      [bot, 'bot'],
      [worker, 'worker'],
    ] as const) {
      expect(all(s, 'ExecStart')).toEqual([`/usr/bin/node /opt/gpu-medic/dist/src/main.js ${role}`]);
      expect(all(s, 'ExecStartPre')).toEqual([`/usr/bin/node /opt/gpu-medic/dist/src/main.js config check ${role}`]);
      expect(all(s, 'User')).toEqual([`gpu-medic-${role}`]);
      expect(all(s, 'WorkingDirectory')).toEqual(['/etc/gpu-medic']);
      expect(all(s, 'Environment')).toContain('GPU_MEDIC_DEPLOYMENT=systemd');
    }
  });

  it('split the secrets: the worker reads no EnvironmentFile and cannot see slack.env; the bot cannot see the keys', () => {
    expect(all(worker, 'EnvironmentFile')).toEqual([]);
    // And neither role can see the other's signing key, so one compromised role cannot act as both
    // (docs/security.md).
    expect(all(worker, 'InaccessiblePaths')).toEqual(['-/etc/gpu-medic/slack.env', '-/etc/gpu-medic/keys/bot.key.pem']);
    expect(all(bot, 'EnvironmentFile')).toEqual(['-/etc/gpu-medic/slack.env']);
    expect(all(bot, 'InaccessiblePaths')).toEqual(['-/etc/gpu-medic/ssh', '-/etc/gpu-medic/keys/worker.key.pem']);
  });

  it.skipIf(!existsSync('/usr/bin/systemd-analyze'))('systemd-analyze verify accepts both', async () => {
    const dir = join(ROOT, 'deploy/systemd');
    const r = await run(
      '/usr/bin/systemd-analyze',
      ['verify', join(dir, 'gpu-medic-bot.service'), join(dir, 'gpu-medic-worker.service')],
      { timeout: 60_000 },
    );
    expect(r.stderr.split('\n').filter((l) => /gpu-medic/.test(l))).toEqual([]);
  });
});

describe('the worker unit, its command lines run as written', () => {
  let etc: string;
  const prefix = randomPrefix('systemd');
  const redis = newRedis();
  beforeAll(async () => {
    await buildDist();
    etc = mkdtempSync(join(tmpdir(), 'gpu-medic-etc-'));
    writeFileSync(
      join(etc, 'inventory.yaml'),
      `defaults:\n  keyFile: /etc/gpu-medic/ssh/id_ed25519\nhosts:\n  - id: kpro5\n    address: 192.0.2.15\n    hostKeys: [${FP}]\n`,
    );
    // The signing keys as docs/deploy.md section 6 installs them (here under the temp dir).
    const keyLines: string[] = [];
    for (const [role, env] of [
      ['bot', 'BOT'],
      ['worker', 'WORKER'],
    ] as const) {
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      writeFileSync(join(etc, `${role}.key.pem`), privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o400 });
      writeFileSync(join(etc, `${role}.pub.pem`), publicKey.export({ type: 'spki', format: 'pem' }));
      keyLines.push(
        `GPU_MEDIC_${env}_KEY_FILE=${join(etc, `${role}.key.pem`)}`,
        `GPU_MEDIC_${env}_PUBLIC_KEY_FILES=${join(etc, `${role}.pub.pem`)}`,
      );
    }
    writeFileSync(
      join(etc, '.env'),
      `SLACK_BOT_TOKEN=xoxb-systemd-test-token\nSLACK_APP_TOKEN=xapp-systemd-test-token\nREDIS_URL=${REDIS_URL}\nGPU_MEDIC_PREFIX=${prefix}\n${keyLines.join('\n')}\n`,
    );
  }, 300_000);
  afterAll(async () => {
    await removePrefix(redis, prefix);
    redis.disconnect();
    rmSync(etc, { recursive: true, force: true });
  });

  /** A unit command line with the install paths mapped onto this checkout and the temp /etc/gpu-medic. */
  const argv = (line: string): string[] =>
    line.replace('/usr/bin/node', process.execPath).replace('/opt/gpu-medic', ROOT.replace(/\/$/, '')).split(' ');
  const unitEnv = (): Record<string, string> => ({
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    ...Object.fromEntries(
      all(worker, 'Environment').map((kv) => [
        kv.slice(0, kv.indexOf('=')),
        kv.slice(kv.indexOf('=') + 1).replace('/run/gpu-medic-worker', etc),
      ]),
    ),
  });

  it('ExecStartPre passes; ExecStart starts a worker whose environment holds no Slack setting', async () => {
    const [pre, ...preArgs] = argv(all(worker, 'ExecStartPre')[0] ?? '');
    const check = await run(pre ?? '', preArgs, { cwd: etc, env: unitEnv(), timeout: 60_000 });
    expect(check.stdout).toMatch(/^config check \(worker\): ok\. 1 machines/);
    expect(check.stdout).toContain('assuming a plain host under systemd');

    const [node, ...args] = argv(all(worker, 'ExecStart')[0] ?? '');
    const child = spawn(node ?? '', args, { cwd: etc, env: unitEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const gone = new Promise((r) => child.once('exit', r));
    try {
      const until = Date.now() + 60_000;
      while (!out.includes('"msg":"workers started"')) {
        if (child.exitCode !== null || Date.now() > until) throw new Error(`worker did not start:\n${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const environ = readFileSync(`/proc/${child.pid}/environ`, 'utf8').split('\0');
      expect(environ.filter((kv) => kv.startsWith('SLACK_'))).toEqual([]);
      expect(environ).toContain('GPU_MEDIC_DEPLOYMENT=systemd');
    } finally {
      child.kill('SIGKILL');
      await gone;
    }
  });
});
