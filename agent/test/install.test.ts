/**
 * install.sh's root-forced mode and its upgrade / uninstall / status, under `--prefix` (no account
 * is made in this mode). The installed front is then run as sshd would run a forced command for
 * root: `/bin/sh -c <front>` with SSH_ORIGINAL_COMMAND set, and it execs the core directly.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../test/harness/sshd.ts';
import { AGENT_DIR, SAMPLE_GRAMMAR } from './agent-host.ts';

const execFileP = promisify(execFile);

let dir: string;
let prefix: string;
let pub: string;

async function installSh(...args: string[]): Promise<{ code: number; out: string }> {
  try {
    const r = await execFileP('sh', [
      join(AGENT_DIR, 'install.sh'),
      ...args,
      '--prefix',
      prefix,
      '--grammar',
      SAMPLE_GRAMMAR,
    ]);
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, out: x.stdout + x.stderr };
  }
}

/** The forced command as sshd runs it for root: the login shell's -c, the client's line in SSH_ORIGINAL_COMMAND. */
async function forced(line: string | null, extraEnv: Record<string, string> = {}) {
  const env: Record<string, string> = { PATH: '/usr/bin:/bin', ...extraEnv };
  if (line !== null) env.SSH_ORIGINAL_COMMAND = line;
  try {
    const r = await execFileP('/bin/sh', ['-c', join(prefix, 'usr/local/lib/gpu-medic/gpu-medic-agent')], { env });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, stdout: x.stdout, stderr: x.stderr };
  }
}

const rootAk = () => readFile(join(prefix, 'root/.ssh/authorized_keys'), 'utf8');

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gpu-medic-install-'));
  prefix = join(dir, 'root-fs');
  pub = `${(await generateKeyPair(dir, 'worker')).privateKeyPath}.pub`;
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('install.sh --root-forced (under --prefix)', () => {
  it('install writes one restrict,command= line in root authorized_keys, the agent files root-owned, the config (with its role) and audit file', async () => {
    const r = await installSh(
      'install',
      '--root-forced',
      '--key',
      pub,
      '--from',
      '10.0.0.0/8,192.168.1.5',
      '--role',
      'self',
    );
    expect(r.code).toBe(0);
    const front = join(prefix, 'usr/local/lib/gpu-medic/gpu-medic-agent');
    expect(await rootAk()).toMatch(
      new RegExp(
        `^restrict,command="${front}",from="10\\.0\\.0\\.0/8,192\\.168\\.1\\.5" ssh-ed25519 \\S+ gpu-medic-worker\\n$`,
      ),
    );
    for (const [f, mode] of [
      ['usr/local/lib/gpu-medic/gpu-medic-agent', 0o755],
      ['usr/local/lib/gpu-medic/gpu-medic-agent.pl', 0o755],
      ['usr/local/lib/gpu-medic/grammar.json', 0o644],
      ['etc/gpu-medic/agent.conf', 0o644],
      ['var/log/gpu-medic/agent-audit.log', 0o640],
    ] as const) {
      const s = await stat(join(prefix, f));
      expect([f, s.uid, s.mode & 0o777]).toEqual([f, 0, mode]);
    }
    const conf = await readFile(join(prefix, 'etc/gpu-medic/agent.conf'), 'utf8');
    expect(conf).toContain(`grammar=${prefix}/usr/local/lib/gpu-medic/grammar.json`);
    expect(conf).toContain(`audit_file=${prefix}/var/log/gpu-medic/agent-audit.log`);
    expect(conf).toMatch(/^role=self$/m);
    expect(existsSync(join(prefix, 'etc/sudoers.d'))).toBe(false);
  });

  it('installing again changes nothing: still one line, the config kept', async () => {
    const conf = join(prefix, 'etc/gpu-medic/agent.conf');
    await writeFile(conf, `${await readFile(conf, 'utf8')}# edited by the operator\n`);
    const r = await installSh('install', '--root-forced', '--key', pub, '--from', '10.0.0.0/8,192.168.1.5');
    expect(r.code).toBe(0);
    expect((await rootAk()).split('\n').filter((l) => l !== '')).toHaveLength(1);
    expect(await readFile(conf, 'utf8')).toContain('# edited by the operator');
    expect(r.out).toContain('is kept as it is');
  });

  it('the installed front, run as sshd runs a forced command: version answers, `id` is refused and audited', async () => {
    expect(await forced('gpu-medic 1 version')).toEqual({
      code: 0,
      stdout: 'gpu-medic-agent 1.0.0 protocol 1\n',
      stderr: '',
    });
    const id = await forced('id');
    expect(id).toEqual({ code: 126, stdout: '', stderr: 'gpu-medic-agent: refused: not a gpu-medic command\n' });
    const login = await forced(null);
    expect(login.stderr).toMatch(/^gpu-medic-agent: refused: the front refused the line: no command/);
    const audit = await readFile(join(prefix, 'var/log/gpu-medic/agent-audit.log'), 'utf8');
    expect(audit).toMatch(/refused verb=- where=- .* reason=not a gpu-medic command status=-\n/);
  });

  it('a config named by the client environment is not read (the front has its own constant)', async () => {
    const evil = join(dir, 'evil.conf');
    await writeFile(evil, 'grammar=/nonexistent\n');
    const r = await forced('gpu-medic 1 version', {
      GPU_MEDIC_CONFIG: evil,
      LC_GPU_MEDIC_CONFIG: evil,
      PERL5OPT: '-Mstrict=bogus',
    });
    expect(r).toEqual({ code: 0, stdout: 'gpu-medic-agent 1.0.0 protocol 1\n', stderr: '' });
  });

  it('status lists the files; upgrade replaces the agent files and keeps the config', async () => {
    const st = await installSh('status', '--root-forced');
    expect(st.out).toContain('version: gpu-medic-agent 1.0.0 protocol 1');
    const core = join(prefix, 'usr/local/lib/gpu-medic/gpu-medic-agent.pl');
    await writeFile(core, '# stale\n');
    const up = await installSh('upgrade');
    expect(up.code).toBe(0);
    expect(await readFile(core, 'utf8')).toBe(await readFile(join(AGENT_DIR, 'gpu-medic-agent.pl'), 'utf8'));
    expect(await readFile(join(prefix, 'etc/gpu-medic/agent.conf'), 'utf8')).toContain('# edited by the operator');
  });

  it('bad input is refused before anything is written: a key file with options, a --from with a quote', async () => {
    const withOptions = join(dir, 'opts.pub');
    await writeFile(withOptions, `command="/bin/sh" ${await readFile(pub, 'utf8')}`);
    const a = await installSh('install', '--root-forced', '--key', withOptions);
    expect(a.code).not.toBe(0);
    expect(a.out).toContain('is not an OpenSSH public key line');
    const b = await installSh('install', '--root-forced', '--key', pub, '--from', '1.2.3.4",command="/bin/sh');
    expect(b.code).not.toBe(0);
    expect((await rootAk()).split('\n').filter((l) => l !== '')).toHaveLength(1);
  });

  it('--no-sudo is refused for a host agent and with --root-forced, before anything is written', async () => {
    const before = await rootAk();
    const host = await installSh('install', '--no-sudo', '--key', pub);
    expect(host.code).not.toBe(0);
    expect(host.out).toContain('--no-sudo is for a container reached at its own address (--role self)');
    const both = await installSh('install', '--no-sudo', '--root-forced', '--role', 'self', '--key', pub);
    expect(both.code).not.toBe(0);
    expect(both.out).toContain('--no-sudo and --root-forced exclude each other');
    expect(await rootAk()).toBe(before);
  });

  it('the core runs as an account other than root only where its root-owned config says unprivileged=yes, on role=self', async () => {
    await chmod(dir, 0o755); // nobody must reach the installed files
    const core = join(prefix, 'usr/local/lib/gpu-medic/gpu-medic-agent.pl');
    const conf = join(prefix, 'etc/gpu-medic/agent.conf');
    const asNobody = async (config: string) => {
      try {
        const r = await execFileP('runuser', [
          '-u',
          'nobody',
          '--',
          'perl',
          core,
          '--config',
          config,
          '--',
          'gpu-medic',
          '1',
          'version',
        ]);
        return { code: 0, out: r.stdout + r.stderr };
      } catch (e) {
        const x = e as { code: number; stdout: string; stderr: string };
        return { code: x.code, out: x.stdout + x.stderr };
      }
    };
    const base = (await readFile(conf, 'utf8')).replace(/^(unprivileged|role)=.*\n/gm, '');
    const made: string[] = [];
    const variant = async (name: string, lines: string) => {
      const f = join(prefix, 'etc/gpu-medic', name);
      await writeFile(f, `${base}${lines}`, { mode: 0o644 });
      made.push(f);
      return f;
    };
    expect(await asNobody(await variant('no.conf', 'role=self\nunprivileged=no\n'))).toEqual({
      code: 126,
      out: 'gpu-medic-agent: refused: the agent must run as root\n',
    });
    expect((await asNobody(await variant('host.conf', 'role=host\nunprivileged=yes\n'))).out).toContain(
      'unprivileged=yes needs role=self',
    );
    expect(await asNobody(await variant('self.conf', 'role=self\nunprivileged=yes\n'))).toEqual({
      code: 0,
      out: 'gpu-medic-agent 1.0.0 protocol 1\n',
    });
    for (const f of made) await rm(f);
  });

  it('uninstall removes the line, the agent, its config; keeps the audit file', async () => {
    const r = await installSh('uninstall', '--root-forced');
    expect(r.code).toBe(0);
    expect(await rootAk()).toBe('');
    expect(existsSync(join(prefix, 'usr/local/lib/gpu-medic'))).toBe(false);
    expect(existsSync(join(prefix, 'etc/gpu-medic'))).toBe(false);
    expect(existsSync(join(prefix, 'var/log/gpu-medic/agent-audit.log'))).toBe(true);
  });
});
