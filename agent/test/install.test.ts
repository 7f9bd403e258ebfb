/**
 * install.sh's root-forced mode and its upgrade / uninstall / status, under `--prefix` (no account
 * is made in this mode). The installed front is then run as sshd would run a forced command for
 * root: `/bin/sh -c <front>` with SSH_ORIGINAL_COMMAND set, and it execs the core directly.
 */
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
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

  it("a read through root's forced key (no sudo to log it) leaves the agent's own `read` line in the audit file", async () => {
    const file = join(prefix, 'var/log/gpu-medic/agent-audit.log');
    const before = (await readFile(file, 'utf8')).split('\n').filter((l) => l !== '').length;
    // The sample grammar's gpus (nvidia-smi is not on this machine's path: it runs and answers 127).
    const r = await forced('gpu-medic 1 5000 host gpus');
    expect(r.code).not.toBe(126);
    const lines = (await readFile(file, 'utf8')).split('\n').filter((l) => l !== '');
    expect(lines.slice(before)).toEqual([expect.stringMatching(/^gpu-medic-agent\[\d+\]: read verb=gpus where=host /)]);
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
    // The source, with only the one constant install.sh writes: the config this install uses.
    const source = await readFile(join(AGENT_DIR, 'gpu-medic-agent.pl'), 'utf8');
    expect(await readFile(core, 'utf8')).toBe(
      source.replace(
        /^use constant DEFAULT_CONFIG => .*$/m,
        `use constant DEFAULT_CONFIG => '${join(prefix, 'etc/gpu-medic/agent.conf')}';`,
      ),
    );
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

/** install.sh under a prefix of its own (a fresh root-fs), so each block below starts from nothing. */
async function freshPrefix(name: string) {
  const p = join(dir, name);
  const run = async (...args: string[]): Promise<{ code: number; out: string }> => {
    try {
      const r = await execFileP('sh', [
        join(AGENT_DIR, 'install.sh'),
        ...args,
        '--prefix',
        p,
        '--grammar',
        SAMPLE_GRAMMAR,
      ]);
      return { code: 0, out: r.stdout + r.stderr };
    } catch (e) {
      const x = e as { code: number; stdout: string; stderr: string };
      return { code: x.code, out: x.stdout + x.stderr };
    }
  };
  const conf = () => readFile(join(p, 'etc/gpu-medic/agent.conf'), 'utf8');
  return { p, run, conf };
}

const keyBlob = async (pubFile: string) => (await readFile(pubFile, 'utf8')).split(' ')[1] as string;
const sshFingerprint = async (pubFile: string) =>
  (await execFileP('ssh-keygen', ['-l', '-f', pubFile])).stdout.split(' ')[1] as string;
const confValue = (conf: string, k: string) => conf.match(new RegExp(`^${k}=(.*)$`, 'm'))?.[1];

describe('(a) the host knows its own name: machine= and vmid= from install.sh', () => {
  it('install --machine writes machine= into the root-owned config; status shows it', async () => {
    const { run, conf } = await freshPrefix('machine');
    const r = await run('install', '--root-forced', '--key', pub, '--from', '10.0.0.5', '--machine', 'pve-1');
    expect(r.code).toBe(0);
    expect(confValue(await conf(), 'machine')).toBe('pve-1');
    expect(r.out).not.toContain('destructive verbs (signal, reset, persistence) will be refused');
    const st = await run('status', '--root-forced');
    expect(st.out).toContain('machine=pve-1 vmid= role=host');
  });

  it('install without --machine says destructive verbs are refused until it is set; upgrade --machine adds it to the kept config', async () => {
    const { run, conf } = await freshPrefix('no-machine');
    const r = await run('install', '--root-forced', '--key', pub, '--from', '10.0.0.5');
    expect(r.code).toBe(0);
    expect(r.out).toContain(
      "no machine= (--machine ID, the host's id in the worker's inventory): destructive verbs (signal, reset, persistence) will be refused until it is set",
    );
    expect(confValue(await conf(), 'machine')).toBe('');
    await writeFile(join(prefix, '..', 'no-machine/etc/gpu-medic/agent.conf'), `${await conf()}# kept\n`);
    const up = await run('upgrade', '--machine', 'pve-2');
    expect(up.code).toBe(0);
    expect(confValue(await conf(), 'machine')).toBe('pve-2');
    expect(await conf()).toContain('# kept');
  });

  it('--role self --vmid writes vmid=; --vmid on a host agent is refused before anything is written', async () => {
    const self = await freshPrefix('vmid-self');
    const ok = await self.run(
      'install',
      '--root-forced',
      '--key',
      pub,
      '--role',
      'self',
      '--machine',
      'ct140',
      '--vmid',
      '140',
    );
    expect(ok.code).toBe(0);
    expect(confValue(await self.conf(), 'vmid')).toBe('140');
    expect((await self.run('status', '--root-forced')).out).toContain('machine=ct140 vmid=140 role=self');
    const host = await freshPrefix('vmid-host');
    const no = await host.run(
      'install',
      '--root-forced',
      '--key',
      pub,
      '--role',
      'host',
      '--machine',
      'ct140',
      '--vmid',
      '140',
    );
    expect(no.code).not.toBe(0);
    expect(no.out).toContain('--vmid is for an agent in a container reached at its own address (--role self)');
    expect(existsSync(join(host.p, 'etc/gpu-medic/agent.conf'))).toBe(false);
  });

  it('a --machine the core would not read is refused; the same install with an inventory id is accepted', async () => {
    const { p, run } = await freshPrefix('bad-machine');
    const bad = await run('install', '--root-forced', '--key', pub, '--machine', 'pve 1');
    expect(bad.code).not.toBe(0);
    expect(bad.out).toContain('--machine: not an inventory id');
    expect(existsSync(join(p, 'etc/gpu-medic'))).toBe(false);
    expect((await run('install', '--root-forced', '--key', pub, '--machine', 'pve_1')).code).toBe(0);
  });
});

describe("(b) finding 6: root's lines holding the worker's key are found, reported and (on request) removed", () => {
  it('install, status and upgrade report every such line of authorized_keys and authorized_keys2; --remove-root-lines removes only them', async () => {
    const { p, run } = await freshPrefix('root-lines');
    const other = `${(await generateKeyPair(dir, 'operator')).privateKeyPath}.pub`;
    const blob = await keyBlob(pub);
    const rootSsh = join(p, 'root/.ssh');
    await execFileP('mkdir', ['-p', rootSsh]);
    const ak1 = `${await readFile(other, 'utf8')}ssh-ed25519 ${blob} worker@old\n`;
    await writeFile(join(rootSsh, 'authorized_keys'), ak1, { mode: 0o600 });
    await writeFile(join(rootSsh, 'authorized_keys2'), `from="10.0.0.5" ssh-ed25519 ${blob} worker@older\n`, {
      mode: 0o600,
    });
    const inst = await run('install', '--root-forced', '--key', pub, '--from', '10.0.0.5', '--machine', 'pve-1');
    expect(inst.code).toBe(0);
    expect(inst.out).toContain(`WARNING: ${rootSsh}/authorized_keys line 2 (`);
    expect(inst.out).toContain(`WARNING: ${rootSsh}/authorized_keys2 line 1 (`);
    expect(inst.out).toContain("holds the worker's key WITHOUT the agent's forced command");
    const st = await run('status', '--root-forced');
    expect(st.code).not.toBe(0);
    expect(st.out).toContain(`WARNING: ${rootSsh}/authorized_keys line 2 (`);
    expect(st.out).toContain(`WARNING: ${rootSsh}/authorized_keys2 line 1 (`);
    const up = await run('upgrade', '--root-forced', '--remove-root-lines');
    expect(up.code).toBe(0);
    expect(up.out).toContain(`removed ${rootSsh}/authorized_keys line 2 (`);
    expect(up.out).toContain(`removed ${rootSsh}/authorized_keys2 line 1 (`);
    const after = await readFile(join(rootSsh, 'authorized_keys'), 'utf8');
    // The operator's own line stays, and the agent's forced line (this is a --root-forced install).
    expect(after.split('\n').filter((l) => l !== '')).toEqual([
      (await readFile(other, 'utf8')).trim(),
      expect.stringMatching(/^restrict,command="[^"]+\/gpu-medic-agent",from="10\.0\.0\.5" ssh-ed25519 /),
    ]);
    expect(await readFile(join(rootSsh, 'authorized_keys2'), 'utf8')).toBe('');
    const st2 = await run('status', '--root-forced');
    expect(st2.out).not.toContain('WARNING');
    expect(st2.out).toContain("the agent's forced line (--root-forced)");
  });

  it('uninstall without --root-forced removes a --root-forced line it wrote, and reports (keeps) a plain line with the key', async () => {
    const { p, run } = await freshPrefix('root-uninstall');
    const blob = await keyBlob(pub);
    expect((await run('install', '--root-forced', '--key', pub)).code).toBe(0);
    const rootAkFile = join(p, 'root/.ssh/authorized_keys');
    await writeFile(rootAkFile, `${await readFile(rootAkFile, 'utf8')}ssh-ed25519 ${blob} plain\n`);
    const un = await run('uninstall', '--user', 'gmtnobodyhere');
    expect(un.code).toBe(0);
    expect(un.out).toContain("removed the agent's --root-forced line from");
    expect(un.out).toContain("holds the worker's key WITHOUT the agent's forced command");
    expect(await readFile(rootAkFile, 'utf8')).toBe(`ssh-ed25519 ${blob} plain\n`);
  });

  it('uninstall --remove-root-lines removes that plain line too', async () => {
    const { p, run } = await freshPrefix('root-uninstall-all');
    const blob = await keyBlob(pub);
    expect((await run('install', '--root-forced', '--key', pub)).code).toBe(0);
    const rootAkFile = join(p, 'root/.ssh/authorized_keys');
    await writeFile(rootAkFile, `${await readFile(rootAkFile, 'utf8')}ssh-ed25519 ${blob} plain\n`);
    const un = await run('uninstall', '--user', 'gmtnobodyhere', '--remove-root-lines');
    expect(un.code).toBe(0);
    expect(await readFile(rootAkFile, 'utf8')).toBe('');
  });
});

describe('(e) finding 9: keys are added and removed one by one, never overwritten as a set', () => {
  const pemKey = async (name: string) => {
    const f = join(dir, `${name}.pub.pem`);
    const { publicKey } = generateKeyPairSync('ed25519');
    await writeFile(f, publicKey.export({ type: 'spki', format: 'pem' }));
    return f;
  };

  it('--bot-key adds a file named by its fingerprint (or --bot-key-name) to bot_keys=; --remove-bot-key NAME removes one', async () => {
    const { p, run, conf } = await freshPrefix('pem-rotation');
    const etc = join(p, 'etc/gpu-medic');
    const [b1, b2, w1] = [await pemKey('b1'), await pemKey('b2'), await pemKey('w1')];
    expect((await run('install', '--root-forced', '--key', pub, '--bot-key', b1, '--worker-key', w1)).code).toBe(0);
    const first = confValue(await conf(), 'bot_keys') as string;
    expect(first).toMatch(new RegExp(`^${etc}/bot-[0-9a-f]{16}\\.pub\\.pem$`));
    const up = await run('upgrade', '--bot-key', b2, '--bot-key-name', 'bot-2026');
    expect(up.code).toBe(0);
    expect(confValue(await conf(), 'bot_keys')).toBe(`${first},${etc}/bot-2026.pub.pem`);
    expect(await readFile(first, 'utf8')).toBe(await readFile(b1, 'utf8'));
    // The same key again adds nothing.
    expect((await run('upgrade', '--bot-key', b2)).out).toContain('is already listed');
    expect(confValue(await conf(), 'bot_keys')).toBe(`${first},${etc}/bot-2026.pub.pem`);
    const rm1 = await run('upgrade', '--remove-bot-key', first.slice(etc.length + 1, -'.pub.pem'.length));
    expect(rm1.code).toBe(0);
    expect(confValue(await conf(), 'bot_keys')).toBe(`${etc}/bot-2026.pub.pem`);
    expect(existsSync(first)).toBe(false);
    expect(confValue(await conf(), 'worker_keys')).toMatch(/worker-[0-9a-f]{16}\.pub\.pem$/);
    const unknown = await run('upgrade', '--remove-bot-key', 'bot-nope');
    expect(unknown.code).not.toBe(0);
    expect(confValue(await conf(), 'bot_keys')).toBe(`${etc}/bot-2026.pub.pem`);
  });

  it('--key adds a forced line beside the old one; --remove-key by fingerprint or comment removes one; the last one is kept', async () => {
    const { p, run } = await freshPrefix('ssh-rotation');
    const pub2 = `${(await generateKeyPair(dir, 'worker2')).privateKeyPath}.pub`;
    const file = join(p, 'root/.ssh/authorized_keys');
    const lines = async () => (await readFile(file, 'utf8')).split('\n').filter((l) => l !== '');
    expect((await run('install', '--root-forced', '--key', pub, '--from', '10.0.0.5')).code).toBe(0);
    const up = await run('upgrade', '--root-forced', '--key', pub2, '--key-name', 'worker-2026', '--from', '10.0.0.5');
    expect(up.code).toBe(0);
    expect(await lines()).toEqual([
      expect.stringMatching(/ gpu-medic-worker$/),
      expect.stringMatching(/^restrict,command="[^"]+",from="10\.0\.0\.5" ssh-ed25519 \S+ worker-2026$/),
    ]);
    const st = await run('status', '--root-forced');
    expect(st.out).toContain(`${await sshFingerprint(pub)} gpu-medic-worker restrict,command=`);
    expect(st.out).toContain(`${await sshFingerprint(pub2)} worker-2026 restrict,command=`);
    const rm = await run('upgrade', '--root-forced', '--remove-key', await sshFingerprint(pub));
    expect(rm.code).toBe(0);
    expect(await lines()).toEqual([expect.stringMatching(/ worker-2026$/)]);
    const last = await run('upgrade', '--root-forced', '--remove-key', 'worker-2026');
    expect(last.code).not.toBe(0);
    expect(last.out).toContain('is the only forced line');
    expect(await lines()).toHaveLength(1);
  });
});

describe('(f) finding 8: an open key and unsafe path= dirs are said, not silent', () => {
  it('install without --from says any source address may use the key; with --from it does not', async () => {
    const a = await freshPrefix('no-from');
    expect((await a.run('install', '--root-forced', '--key', pub)).out).toContain(
      'no --from: ANY source address may use this key',
    );
    const b = await freshPrefix('with-from');
    expect((await b.run('install', '--root-forced', '--key', pub, '--from', '10.0.0.5')).out).not.toContain(
      'ANY source address',
    );
  });

  it('a path= dir owned by nobody and 0777 is warned about by install and status; a root 0755 dir is not', async () => {
    const bad = join(dir, 'bad-bin');
    const good = join(dir, 'good-bin');
    await execFileP('mkdir', ['-p', bad, good]);
    await chmod(dir, 0o755);
    await execFileP('chown', ['nobody', bad]);
    await chmod(bad, 0o777);
    await chmod(good, 0o755);
    const a = await freshPrefix('path-bad');
    const r = await a.run('install', '--root-forced', '--key', pub, '--path', `${bad}:/usr/bin:/bin`);
    expect(r.out).toContain(`WARNING: path= dir ${bad} is owned by uid 65534, writable by group or others (mode 777)`);
    const st = await a.run('status', '--root-forced');
    expect(st.code).not.toBe(0);
    expect(st.out).toContain(`WARNING: path= dir ${bad} is owned by uid 65534`);
    const b = await freshPrefix('path-good');
    const ok = await b.run('install', '--root-forced', '--key', pub, '--path', `${good}:/usr/bin:/bin`);
    expect(ok.out).not.toContain('WARNING');
  });

  it("a program of the grammar found through path= that is not root's is warned about; the same program root-owned is not", async () => {
    const bin = join(dir, 'prog-bin');
    await execFileP('mkdir', ['-p', bin]);
    await chmod(bin, 0o755);
    const prog = join(bin, 'nvidia-smi');
    await writeFile(prog, '#!/bin/sh\n', { mode: 0o755 });
    await execFileP('chown', ['nobody', prog]);
    const a = await freshPrefix('prog-bad');
    const r = await a.run('install', '--root-forced', '--key', pub, '--path', `${bin}:/usr/bin:/bin`);
    expect(r.out).toContain(`WARNING: program ${prog} (found through path=) is owned by uid 65534, mode 755`);
    await execFileP('chown', ['root', prog]);
    expect((await a.run('status', '--root-forced')).out).not.toContain('WARNING');
  });
});

describe('(g) PerSourcePenaltyExemptList: only where sshd is 9.8+ and sshd -t accepts it', () => {
  it('on this machine (OpenSSH 9.2) nothing is written, and install says why', async () => {
    const v = (await execFileP('sshd', ['-V']).catch((e: { stderr: string }) => e)).stderr;
    expect(v).toMatch(/^OpenSSH_9\.[0-7]/);
    const { p, run } = await freshPrefix('sshd-92');
    const r = await run('install', '--root-forced', '--key', pub, '--from', '10.0.0.5');
    expect(r.code).toBe(0);
    expect(r.out).toContain('sshd is OpenSSH 9.2: it has no PerSourcePenalties (9.8 and newer), so nothing is written');
    expect(existsSync(join(p, 'etc/ssh/sshd_config.d'))).toBe(false);
  });

  /** A stand-in sshd at PREFIX/usr/sbin/sshd: OpenSSH 10.0's -V; -t exits with `tStatus`; each call logged. */
  async function stubSshd(p: string, tStatus: number) {
    await execFileP('mkdir', ['-p', join(p, 'usr/sbin'), join(p, 'etc/ssh')]);
    await writeFile(join(p, 'etc/ssh/sshd_config'), 'Include /etc/ssh/sshd_config.d/*.conf\nUsePAM yes\n');
    const log = join(p, 'sshd-calls.log');
    await writeFile(
      join(p, 'usr/sbin/sshd'),
      `#!/bin/sh\necho "$*" >> '${log}'\ncase $1 in -V) echo 'OpenSSH_10.0p2 Debian-7, OpenSSL 3.5.1 1 Jul 2025' >&2; exit 0 ;; esac\n[ ${tStatus} = 0 ] || echo 'Bad configuration option: PerSourcePenaltyExemptList' >&2\nexit ${tStatus}\n`,
      { mode: 0o755 },
    );
    return log;
  }

  it('an sshd of 10.0 that accepts it: the drop-in exempts the worker addresses (patterns left out); uninstall removes it', async () => {
    const { p, run } = await freshPrefix('sshd-10');
    const log = await stubSshd(p, 0);
    const r = await run('install', '--root-forced', '--key', pub, '--from', '10.0.0.5,192.168.1.0/24,10.1.*');
    expect(r.code).toBe(0);
    const dropin = join(p, 'etc/ssh/sshd_config.d/gpu-medic-agent.conf');
    expect((await readFile(dropin, 'utf8')).split('\n').filter((l) => !l.startsWith('#'))).toEqual([
      'PerSourcePenaltyExemptList 10.0.0.5,192.168.1.0/24',
      '',
    ]);
    expect(r.out).toContain('10.1.* left out');
    const calls = (await readFile(log, 'utf8')).split('\n');
    expect(calls).toContain(`-t -f ${p}/etc/ssh/sshd_config -o PerSourcePenaltyExemptList=10.0.0.5,192.168.1.0/24`);
    expect(calls).toContain(`-t -f ${p}/etc/ssh/sshd_config`);
    expect((await run('uninstall', '--root-forced')).code).toBe(0);
    expect(existsSync(dropin)).toBe(false);
  });

  it('an sshd of 10.0 whose -t refuses it: nothing is written', async () => {
    const { p, run } = await freshPrefix('sshd-10-refuses');
    await stubSshd(p, 255);
    const r = await run('install', '--root-forced', '--key', pub, '--from', '10.0.0.5');
    expect(r.code).toBe(0);
    expect(r.out).toContain('sshd -t refused PerSourcePenaltyExemptList 10.0.0.5');
    expect(existsSync(join(p, 'etc/ssh/sshd_config.d/gpu-medic-agent.conf'))).toBe(false);
  });
});
