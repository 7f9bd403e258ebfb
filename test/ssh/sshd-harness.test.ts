/** The real-sshd harness itself: what other suites rely on. */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CodedError } from '../../src/errors.ts';
import { createSshExecutor, type SshLogger } from '../../src/ssh/executor.ts';
import { hostKeyFingerprint, verifyHostKey } from '../../src/ssh/host-key.ts';
import type { Route } from '../../src/ssh/types.ts';
import { generateKeyPair, startSshd, type Sshd } from '../harness/sshd.ts';
import { marker, processesMatching, waitFor } from './helpers.ts';

let root: string;
let key: Awaited<ReturnType<typeof generateKeyPair>>;
const started: Sshd[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'gpu-medic-sshd-'));
  key = await generateKeyPair(root, 'worker');
});

afterAll(async () => {
  await Promise.all(started.map((s) => s.stop()));
  if (root) await rm(root, { recursive: true, force: true });
});

async function start(name: string, extra: Partial<Parameters<typeof startSshd>[0]> = {}): Promise<Sshd> {
  const s = await startSshd({ dir: join(root, name), authorizedKeys: [key.publicKey], ...extra });
  started.push(s);
  return s;
}

function route(s: Sshd): Route {
  return {
    kind: 'direct',
    endpoint: {
      machineId: 'm',
      host: '127.0.0.1',
      port: s.port,
      username: userInfo().username,
      privateKeyPath: key.privateKeyPath,
      hostKeyFingerprints: [s.hostKeyFingerprint],
    },
  };
}

function keygenFingerprint(pubPath: string): string {
  return execFileSync('ssh-keygen', ['-l', '-f', pubPath]).toString().split(' ')[1] ?? '';
}

describe('fingerprints', () => {
  it('match what ssh-keygen -l prints, for client and host keys', async () => {
    expect(key.fingerprint).toBe(keygenFingerprint(`${key.privateKeyPath}.pub`));
    const s = await start('fp');
    expect(s.hostKeyFingerprint).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
    expect(s.hostKeyFingerprint).toBe(keygenFingerprint(`${s.hostKeyPath}.pub`));
  });

  it('verifyHostKey accepts a pin with or without base64 padding and refuses others', () => {
    const blob = Buffer.from('any key blob');
    const fp = hostKeyFingerprint(blob);
    const target = { machineId: 'm', host: 'h', port: 22 };
    expect(verifyHostKey(target, [fp], blob)).toBeNull();
    expect(verifyHostKey(target, [`${fp}=`], blob)).toBeNull();
    expect(verifyHostKey(target, [hostKeyFingerprint(Buffer.from('other'))], blob)?.code).toBe('host_key_mismatch');
    expect(verifyHostKey(target, [], blob)?.code).toBe('host_key_unpinned');
  });
});

describe('startSshd', () => {
  it('reuses a given host key (same fingerprint, another port)', async () => {
    const a = await start('reuse-a');
    const b = await start('reuse-b', { hostKeyPath: a.hostKeyPath });
    expect(b.hostKeyFingerprint).toBe(a.hostKeyFingerprint);
    expect(b.port).not.toBe(a.port);
  });

  it('puts pathPrefix first on PATH, sets env, and logs each command line byte-exact', async () => {
    const bin = join(root, 'bin');
    await mkdir(bin, { recursive: true });
    await writeFile(join(bin, 'id'), '#!/bin/sh\necho fake-id\n');
    await chmod(join(bin, 'id'), 0o755);
    const s = await start('env', {
      pathPrefix: bin,
      env: { GPU_STATE: `/tmp/it's "here"` },
      commandLog: join(root, 'env-commands.jsonl'),
    });
    const ex = createSshExecutor({ access: 'root-shell' });
    try {
      const r = await ex.exec(route(s), {
        argv: ['sh', '-c', 'id; printf "%s\\n" "$GPU_STATE"', 'tab\there', 'nl\nx', 'ctl\u0001', 'bs\\', 'é🙂'],
        timeoutMs: 5000,
      });
      expect(r.stdout).toBe(`fake-id\n/tmp/it's "here"\n`);
      const logged = await s.commands();
      expect(logged.map((l) => l.cmd)).toEqual([r.command]);
      expect(s.commandLog).toBe(join(root, 'env-commands.jsonl'));
      expect(Number.isNaN(Date.parse(logged[0]?.ts ?? ''))).toBe(false);
    } finally {
      await ex.close();
    }
  });

  it('stop() ends the listener and every session process under it', async () => {
    const s = await start('stop');
    const ex = createSshExecutor({ access: 'root-shell' });
    const m = marker();
    const running = ex.exec(route(s), { argv: ['sleep', m], timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(await waitFor(() => processesMatching(`sleep ${m}`).length > 0, 5000)).toBe(true);
    await s.stop();
    expect(processesMatching(`sleep ${m}`)).toEqual([]);
    expect(() => process.kill(s.pid, 0)).toThrow();
    const outcome = await running;
    expect(outcome instanceof CodedError && outcome.code).toBe('connection_lost');
    await ex.close();
  });

  it('stop() also ends what sessions left behind when their connection closed', async () => {
    const s = await start('orphans');
    const ex = createSshExecutor({ access: 'root-shell' });
    const m = marker();
    const running = ex.exec(route(s), { argv: ['sleep', m], timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(await waitFor(() => processesMatching(`sleep ${m}`).length > 0, 5000)).toBe(true);
    await ex.close();
    await running;
    // Without a pty sshd sends no SIGHUP: the command outlives its session, outside the tree.
    expect(await waitFor(async () => (await s.descendants()).length === 0, 3000)).toBe(true);
    expect(processesMatching(`sleep ${m}`).length).toBeGreaterThan(0); // timeout and sleep
    await s.stop();
    expect(processesMatching(`sleep ${m}`)).toEqual([]);
  });
});

describe('startSshd with agent: a machine reached only through gpu-medic-agent', () => {
  it('runs the stock sshd_config: the authorized_keys line, not the harness, decides what runs', async () => {
    const home = join(root, 'agent-home');
    await mkdir(home, { recursive: true });
    const line = `restrict,command="echo forced-by-key" ${key.publicKey}`;
    const s = await start('agent', {
      agent: {
        binds: [{ from: home, to: '/root/.ssh' }],
        setup: [`printf '%s\\n' '${line}' > /root/.ssh/authorized_keys`, 'chmod 600 /root/.ssh/authorized_keys'],
      },
    });
    const config = readFileSync(join(root, 'agent', 'sshd_config'), 'utf8');
    expect(config).not.toMatch(/^\s*ForceCommand/im);
    expect(config).not.toMatch(/^\s*AllowTcpForwarding/im);
    // A shell line, so the forced command in authorized_keys (not the agent grammar) is what is tested.
    const ex = createSshExecutor({ access: 'root-shell' });
    const r = await ex.exec(route(s), { argv: ['id'], timeoutMs: 10_000 });
    await ex.close();
    expect(r.stdout.trim()).toBe('forced-by-key');
    // Written in the sshd's own mount namespace only: this machine's /root/.ssh never saw the line.
    expect(readFileSync(join(home, 'authorized_keys'), 'utf8')).toContain('forced-by-key');
    const own = (() => {
      try {
        return readFileSync('/root/.ssh/authorized_keys', 'utf8');
      } catch {
        return '';
      }
    })();
    expect(own).not.toContain('forced-by-key');
  });
  it('the time its setup takes (an install waiting its turn) does not count against the time sshd has to listen', async () => {
    const s = await start('agent-slow-setup', {
      agent: { binds: [], setup: ['sleep 6'] },
      readyTimeoutMs: 5000,
    });
    expect(() => process.kill(s.pid, 0)).not.toThrow();
  });
});

it('a pino logger fits the executor logger option', () => {
  const logger: SshLogger = pino({ level: 'silent' });
  expect(typeof logger.warn).toBe('function');
});
