/**
 * The SSH executor against a real OpenSSH sshd (test/harness/sshd.ts): exact results, host-key
 * pinning, connect failures, remote timeouts that really kill, output caps, pooling, drops.
 */
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CodedError } from '../../src/errors.ts';
import { createSshExecutor, type SshExecutorOptions, type SshLogger } from '../../src/ssh/executor.ts';
import type { Executor, Route, SshEndpoint } from '../../src/ssh/types.ts';
import { generateKeyPair, startSshd, type Sshd } from '../harness/sshd.ts';
import { closedPort, marker, processesMatching, silentServer, waitFor } from './helpers.ts';

let root: string;
let sshd: Sshd;
let workerKey: { privateKeyPath: string; publicKey: string; fingerprint: string };
let strangerKey: { privateKeyPath: string; publicKey: string; fingerprint: string };
const executors: Executor[] = [];
const user = userInfo().username;

// Fake `pct exec <vmid> -- argv...`: records its argv (one JSON-ish line per call) and runs the rest.
const FAKE_PCT = `#!/bin/sh
{ printf 'pct'; for a in "$@"; do printf ' [%s]' "$a"; done; printf '\\n'; } >> "$PCT_LOG"
[ "$1" = exec ] || { echo "fake pct: only exec" >&2; exit 2; }
shift 2
[ "$1" = -- ] && shift
exec "$@"
`;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'gpu-medic-ssh-'));
  workerKey = await generateKeyPair(root, 'worker');
  strangerKey = await generateKeyPair(root, 'stranger');
  const bin = join(root, 'bin');
  await mkdir(bin);
  await writeFile(join(bin, 'pct'), FAKE_PCT);
  await chmod(join(bin, 'pct'), 0o755);
  sshd = await startSshd({
    dir: join(root, 'sshd'),
    authorizedKeys: [workerKey.publicKey],
    pathPrefix: bin,
    env: { PCT_LOG: join(root, 'pct.log') },
  });
});

afterAll(async () => {
  await Promise.all(executors.splice(0).map((e) => e.close()));
  await sshd?.stop();
  if (root) await rm(root, { recursive: true, force: true });
});

afterEach(async () => {
  await Promise.all(executors.splice(0).map((e) => e.close()));
});

function executor(opts: SshExecutorOptions = {}): Executor {
  const e = createSshExecutor({ access: 'root-shell', ...opts });
  executors.push(e);
  return e;
}

function endpoint(over: Partial<SshEndpoint> = {}): SshEndpoint {
  return {
    machineId: 'kpro5',
    host: '127.0.0.1',
    port: sshd.port,
    username: user,
    privateKeyPath: workerKey.privateKeyPath,
    hostKeyFingerprints: [sshd.hostKeyFingerprint],
    ...over,
  };
}

const direct = (over: Partial<SshEndpoint> = {}): Route => ({ kind: 'direct', endpoint: endpoint(over) });

async function rejection(p: Promise<unknown>): Promise<CodedError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof CodedError) return e;
    throw e;
  }
  throw new Error('expected a rejection');
}

describe('exec results', () => {
  it('returns stdout, stderr and exit code exactly, with the literal command line', async () => {
    const ex = executor();
    const r = await ex.exec(direct(), { argv: ['sh', '-c', 'printf out; printf err >&2; exit 3'], timeoutMs: 5000 });
    expect(r).toMatchObject({
      command: `exec timeout -k 1 5 sh -c 'printf out; printf err >&2; exit 3'`,
      machineId: 'kpro5',
      code: 3,
      signal: null,
      stdout: 'out',
      stderr: 'err',
      timedOut: false,
      truncated: false,
    });
    expect(r.durationMs).toBeGreaterThanOrEqual(0);
    const logged = await sshd.commands();
    expect(logged.at(-1)?.cmd).toBe(r.command);
  });

  it('reports death by signal as a signal, not an exit code', async () => {
    const ex = executor();
    const r = await ex.exec(direct(), { argv: ['sh', '-c', 'echo before; kill -KILL $$'], timeoutMs: 5000 });
    expect(r.stdout).toBe('before\n');
    expect(r.code).toBeNull();
    expect(r.signal).toBe('SIGKILL');
    expect(r.timedOut).toBe(false);
  });

  it('hostile words reach the remote argv intact and nothing in them is evaluated', async () => {
    const ex = executor();
    const canary = join(root, 'pwned');
    const words = [
      `$(touch ${canary})`,
      `\`touch ${canary}\``,
      `'; touch ${canary}; '`,
      `"`,
      '\\',
      'two\nlines',
      ' lead',
      '*',
      '~',
      '',
      '$HOME',
      'é漢🙂',
      'a=b',
      '-n',
    ];
    const r = await ex.exec(direct(), { argv: ['printf', '%s\\n', ...words], timeoutMs: 5000 });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(words.map((w) => `${w}\n`).join(''));
    await expect(readFile(canary)).rejects.toThrow();
  });
});

describe('host keys and connecting', () => {
  it('refuses a changed host key before logging in: names both fingerprints, nothing runs', async () => {
    const before = { logins: await sshd.loginCount(), commands: (await sshd.commands()).length };
    const ex = executor();
    const err = await rejection(
      ex.exec(direct({ hostKeyFingerprints: [strangerKey.fingerprint] }), {
        argv: ['touch', join(root, 'ran')],
        timeoutMs: 5000,
      }),
    );
    expect(err.code).toBe('host_key_mismatch');
    expect(err.message).toContain(sshd.hostKeyFingerprint);
    expect(err.message).toContain(strangerKey.fingerprint);
    expect(err.detail).toMatchObject({ seen: sshd.hostKeyFingerprint, expected: strangerKey.fingerprint });
    expect(await sshd.loginCount()).toBe(before.logins);
    expect((await sshd.commands()).length).toBe(before.commands);
    await expect(readFile(join(root, 'ran'))).rejects.toThrow();
  });

  it('accepts the key when it is one of several pins (key rotation)', async () => {
    const ex = executor();
    const r = await ex.exec(direct({ hostKeyFingerprints: [strangerKey.fingerprint, sshd.hostKeyFingerprint] }), {
      argv: ['true'],
      timeoutMs: 5000,
    });
    expect(r.code).toBe(0);
  });

  it('refuses an endpoint with no pinned key without even connecting', async () => {
    const srv = await silentServer();
    try {
      const ex = executor();
      for (const pins of [[], ['MD5:00:11'], ['']]) {
        const err = await rejection(
          ex.exec(direct({ port: srv.port, hostKeyFingerprints: pins }), { argv: ['true'], timeoutMs: 5000 }),
        );
        expect(err.code).toBe('host_key_unpinned');
      }
      await new Promise((r) => setTimeout(r, 100));
      expect(srv.connections()).toBe(0);
    } finally {
      await srv.close();
    }
  });

  it('auth refused → auth_failed', async () => {
    const ex = executor();
    const err = await rejection(
      ex.exec(direct({ privateKeyPath: strangerKey.privateKeyPath }), { argv: ['true'], timeoutMs: 5000 }),
    );
    expect(err.code).toBe('auth_failed');
  });

  it('nothing listening → connect_failed', async () => {
    const ex = executor();
    const err = await rejection(ex.exec(direct({ port: await closedPort() }), { argv: ['true'], timeoutMs: 5000 }));
    expect(err.code).toBe('connect_failed');
    expect(err.detail.reason).toBe('ECONNREFUSED');
  });

  it('a server that accepts and never speaks → connect_timeout on time', async () => {
    const srv = await silentServer();
    try {
      const ex = executor({ connectTimeoutMs: 400 });
      const t0 = Date.now();
      const err = await rejection(ex.exec(direct({ port: srv.port }), { argv: ['true'], timeoutMs: 5000 }));
      expect(err.code).toBe('connect_timeout');
      expect(Date.now() - t0).toBeLessThan(2000);
      expect(srv.connections()).toBe(1);
    } finally {
      await srv.close();
    }
  });

  it('close() during a pending connect rejects it at once, not at the connect timeout', async () => {
    const srv = await silentServer();
    try {
      const ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 10_000 });
      const pending = rejection(ex.exec(direct({ port: srv.port }), { argv: ['true'], timeoutMs: 5000 }));
      await waitFor(() => srv.connections() === 1, 2000);
      const t0 = Date.now();
      await ex.close();
      const err = await pending;
      expect(Date.now() - t0).toBeLessThan(1000);
      expect(err.code).toBe('connection_lost');
    } finally {
      await srv.close();
    }
  });

  it('unreadable private key → config_invalid, and the path, not the key, is named', async () => {
    const ex = executor();
    const err = await rejection(
      ex.exec(direct({ privateKeyPath: join(root, 'missing-key') }), { argv: ['true'], timeoutMs: 5000 }),
    );
    expect(err.code).toBe('config_invalid');
    expect(err.message).toContain('missing-key');
  });
});

describe('timeouts and output caps', () => {
  it('a hanging command ends at its timeout and the remote process is really gone', async () => {
    const m = marker();
    const ex = executor();
    const t0 = Date.now();
    const r = await ex.exec(direct(), { argv: ['sh', '-c', `echo started; exec sleep ${m}`], timeoutMs: 1500 });
    const took = Date.now() - t0;
    expect(r.timedOut).toBe(true);
    expect(r.code).toBe(124);
    expect(r.stdout).toBe('started\n');
    expect(took).toBeGreaterThanOrEqual(1500);
    // Well before the client deadline (1500 + 1000 + 1000): the remote timeout ended it (code 124 above).
    expect(took).toBeLessThan(3000);
    expect(processesMatching(`sleep ${m}`)).toEqual([]);
  });

  it('a command that ignores SIGTERM is SIGKILLed after the grace', async () => {
    const m = marker();
    const ex = executor({ killAfterMs: 500 });
    const t0 = Date.now();
    const r = await ex.exec(direct(), { argv: ['sh', '-c', `trap '' TERM; exec sleep ${m}`], timeoutMs: 1000 });
    expect(r.timedOut).toBe(true);
    // timeout's -k KILL hits its own process group, timeout included; `exec` makes that the session's end.
    expect(r).toMatchObject({ code: null, signal: 'SIGKILL' });
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(processesMatching(`sleep ${m}`)).toEqual([]);
  });

  it('a command exiting 124 by itself, early, is not a timeout', async () => {
    const r = await executor().exec(direct(), { argv: ['sh', '-c', 'exit 124'], timeoutMs: 5000 });
    expect(r).toMatchObject({ code: 124, timedOut: false });
  });

  it('output past the cap is cut, the command ended, and the result marked truncated', async () => {
    const m = `cap-marker-${marker()}`;
    const ex = executor();
    const r = await ex.exec(direct(), { argv: ['yes', m], timeoutMs: 20_000, maxOutputBytes: 100_000 });
    expect(r.truncated).toBe(true);
    expect(r.timedOut).toBe(false);
    expect(Buffer.byteLength(r.stdout)).toBe(100_000);
    expect(r.stdout.startsWith(`${m}\n${m}\n`)).toBe(true);
    expect(r.durationMs).toBeLessThan(5000);
    expect(await waitFor(() => processesMatching(`yes ${m}`).length === 0, 3000)).toBe(true);
  });

  it('the default cap is 1 MiB per stream', async () => {
    const r = await executor().exec(direct(), {
      argv: ['sh', '-c', 'head -c 2000000 /dev/zero | tr "\\0" a >&2'],
      timeoutMs: 20_000,
    });
    expect(r.truncated).toBe(true);
    expect(r.stderr.length).toBe(1024 * 1024);
    expect(r.stdout).toBe('');
  });
});

describe('connection pool', () => {
  it('many execs, sequential and concurrent, share one login', async () => {
    const ex = executor();
    const before = await sshd.loginCount();
    for (let i = 0; i < 5; i++) {
      const r = await ex.exec(direct(), { argv: ['echo', String(i)], timeoutMs: 5000 });
      expect(r.stdout).toBe(`${i}\n`);
    }
    const rs = await Promise.all(
      Array.from({ length: 10 }, (_, i) => ex.exec(direct(), { argv: ['echo', `c${i}`], timeoutMs: 5000 })),
    );
    expect(rs.map((r) => r.stdout)).toEqual(Array.from({ length: 10 }, (_, i) => `c${i}\n`));
    expect(await sshd.loginCount()).toBe(before + 1);
  });

  it('concurrent first execs share one connect attempt, and channels beyond the cap queue', async () => {
    const ex = executor({ maxChannelsPerConnection: 4 });
    const before = await sshd.loginCount();
    const t0 = Date.now();
    // 20 > sshd MaxSessions 10: without the queue most of these would fail to open a session.
    const rs = await Promise.all(
      Array.from({ length: 20 }, () => ex.exec(direct(), { argv: ['sleep', '0.3'], timeoutMs: 10_000 })),
    );
    expect(rs.every((r) => r.code === 0)).toBe(true);
    // 20 commands, 4 at a time, 0.3 s each: at least 5 waves.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1400);
    expect(await sshd.loginCount()).toBe(before + 1);
  });

  it('a connection dropped mid-command → connection_lost, and the next exec reconnects', async () => {
    const ex = executor();
    await ex.exec(direct(), { argv: ['true'], timeoutMs: 5000 });
    const logins = await sshd.loginCount();
    const m = marker();
    const pending = rejection(ex.exec(direct(), { argv: ['sleep', m], timeoutMs: 30_000 }));
    expect(await waitFor(() => processesMatching(`sleep ${m}`).length > 0, 5000)).toBe(true);
    // Kill the per-connection sshd processes (and what they run): the listener stays up.
    for (const pid of await sshd.descendants()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    const err = await pending;
    expect(err.code).toBe('connection_lost');
    expect(err.message).toContain(`sleep ${m}`);
    const r = await ex.exec(direct(), { argv: ['echo', 'back'], timeoutMs: 5000 });
    expect(r.stdout).toBe('back\n');
    expect(await sshd.loginCount()).toBe(logins + 1);
  });

  it('an idle connection is closed and the next exec logs in again', async () => {
    const ex = executor({ idleTimeoutMs: 150 });
    const before = await sshd.loginCount();
    await ex.exec(direct(), { argv: ['true'], timeoutMs: 5000 });
    await new Promise((r) => setTimeout(r, 400));
    await ex.exec(direct(), { argv: ['true'], timeoutMs: 5000 });
    expect(await sshd.loginCount()).toBe(before + 2);
  });

  it('close() ends every connection; later execs are refused', async () => {
    const ex = createSshExecutor({ access: 'root-shell' });
    await ex.exec(direct(), { argv: ['true'], timeoutMs: 5000 });
    expect((await sshd.descendants()).length).toBeGreaterThan(0);
    await ex.close();
    expect(await waitFor(async () => (await sshd.descendants()).length === 0, 3000)).toBe(true);
    await expect(ex.exec(direct(), { argv: ['true'], timeoutMs: 5000 })).rejects.toThrow(/closed/);
  });
});

describe('containers through their host (pct)', () => {
  it('builds `pct exec <vmid> -- timeout ... argv` and the words arrive intact', async () => {
    const ex = executor();
    const words = ['a b', `it's`, '$(id)', 'x\ny'];
    const r = await ex.exec(
      { kind: 'pct', host: endpoint(), vmid: 129 },
      { argv: ['printf', '%s\\n', ...words], timeoutMs: 2500 },
    );
    expect(r.command).toBe(
      `exec timeout -k 1 4.5 pct exec 129 -- timeout -k 1 2.5 printf '%s\\n' 'a b' 'it'\\''s' '$(id)' 'x\ny'`,
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(words.map((w) => `${w}\n`).join(''));
    const pctLog = await readFile(join(root, 'pct.log'), 'utf8');
    expect(pctLog).toContain(
      `pct [exec] [129] [--] [timeout] [-k] [1] [2.5] [printf] [%s\\n] [a b] [it's] [$(id)] [x\ny]\n`,
    );
  });

  it('a hanging command in the container is killed by the inner timeout, on time', async () => {
    const m = marker();
    const t0 = Date.now();
    const r = await executor().exec(
      { kind: 'pct', host: endpoint(), vmid: 129 },
      { argv: ['sleep', m], timeoutMs: 1000 },
    );
    expect(r).toMatchObject({ code: 124, timedOut: true });
    // The inner timeout (1 s), not the outer backstop (3 s) nor the client deadline (5 s).
    expect(Date.now() - t0).toBeLessThan(2800);
    expect(processesMatching(`sleep ${m}`)).toEqual([]);
  });
});

describe('secrets', () => {
  it('the private key never reaches the logger or an error', async () => {
    const lines: string[] = [];
    const logger: SshLogger = {
      debug: (o, msg) => lines.push(JSON.stringify(o) + msg),
      info: (o, msg) => lines.push(JSON.stringify(o) + msg),
      warn: (o, msg) => lines.push(JSON.stringify(o) + msg),
    };
    const ex = executor({ logger });
    await ex.exec(direct(), { argv: ['true'], timeoutMs: 5000 });
    const errs = await Promise.all([
      rejection(
        ex.exec(direct({ hostKeyFingerprints: [strangerKey.fingerprint] }), { argv: ['true'], timeoutMs: 5000 }),
      ),
      rejection(
        executor({ logger }).exec(direct({ privateKeyPath: strangerKey.privateKeyPath }), {
          argv: ['true'],
          timeoutMs: 5000,
        }),
      ),
    ]);
    const keyText = await readFile(workerKey.privateKeyPath, 'utf8');
    const strangerText = await readFile(strangerKey.privateKeyPath, 'utf8');
    const body = (t: string) => t.split('\n').filter((l) => l && !l.startsWith('-----'));
    const everything = lines.join('\n') + errs.map((e) => e.message + JSON.stringify(e.detail)).join('\n');
    expect(lines.length).toBeGreaterThan(0);
    for (const l of [...body(keyText), ...body(strangerText)]) expect(everything).not.toContain(l);
    expect(everything).not.toContain('PRIVATE KEY');
  });
});

describe('a machine that stops answering', () => {
  it('a pooled connection to a frozen sshd ends at the command deadline (command_timeout), not at the keepalive, and is dropped', async () => {
    // Keepalive alone would take 3 x 4 s; the command's own deadline is 0.5 + 0.2 + 0.3 s.
    const ex = executor({ killAfterMs: 200, clientGraceMs: 300, keepaliveIntervalMs: 4000, keepaliveCountMax: 3 });
    await ex.exec(direct(), { argv: ['true'], timeoutMs: 5000 });
    const logins = await sshd.loginCount();
    const frozen = await sshd.descendants();
    expect(frozen.length).toBeGreaterThan(0);
    for (const pid of frozen) process.kill(pid, 'SIGSTOP');
    try {
      const t0 = Date.now();
      const err = await rejection(ex.exec(direct(), { argv: ['echo', 'hi'], timeoutMs: 500 }));
      const took = Date.now() - t0;
      // The executor's own deadline ended it: a keepalive ending reports connection_lost.
      expect(err.code).toBe('command_timeout');
      expect(err.detail.endedBy).toBe('client_deadline');
      expect(err.message).toContain('stopped answering');
      expect(err.message).toContain('whether it ran is unknown');
      expect(took).toBeGreaterThanOrEqual(1000);
      expect(took).toBeLessThan(1000 + 10_000);
    } finally {
      for (const pid of frozen) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
    }
    // Dropped from the pool: the next exec logs in afresh instead of queueing on the frozen one.
    const r = await ex.exec(direct(), { argv: ['echo', 'back'], timeoutMs: 5000 });
    expect(r.stdout).toBe('back\n');
    expect(await sshd.loginCount()).toBe(logins + 1);
  });
});

describe('client-side deadline', () => {
  let sshd2: Sshd;
  beforeAll(async () => {
    // A `timeout` that does nothing: the remote side never ends the command by itself.
    const bin = join(root, 'bin-broken-timeout');
    await mkdir(bin);
    await writeFile(join(bin, 'timeout'), '#!/bin/sh\nwhile [ "$1" = -k ]; do shift 2; done\nshift\nexec "$@"\n');
    await chmod(join(bin, 'timeout'), 0o755);
    sshd2 = await startSshd({ dir: join(root, 'sshd2'), authorizedKeys: [workerKey.publicKey], pathPrefix: bin });
  });
  afterAll(async () => {
    await sshd2?.stop();
  });

  it('ends the exec on time even when the remote timeout fails, and moves on to a fresh connection', async () => {
    const m = marker();
    const ex = executor({ killAfterMs: 200, clientGraceMs: 300, channelCloseWaitMs: 500 });
    const route = direct({ port: sshd2.port, hostKeyFingerprints: [sshd2.hostKeyFingerprint] });
    const logins = await sshd2.loginCount();
    const r = await ex.exec(route, { argv: ['sleep', m], timeoutMs: 500 });
    // Client deadline = 500 timeout + 200 kill grace + 300 client grace; then it signals, closes
    // and waits at most 500 ms for sshd to confirm.
    expect(r).toMatchObject({ timedOut: true, code: null, stdout: '' });
    expect(r.durationMs).toBeGreaterThanOrEqual(1000);
    expect(r.durationMs).toBeLessThan(2200);
    // This sshd refuses signals to forced-command sessions and keeps a session open while its
    // process lives, so that connection is retired: the next exec logs in afresh.
    expect(processesMatching(`sleep ${m}`).length).toBe(1);
    const r2 = await ex.exec(route, { argv: ['echo', 'ok'], timeoutMs: 5000 });
    expect(r2.stdout).toBe('ok\n');
    expect(await sshd2.loginCount()).toBe(logins + 2);
    for (const pid of processesMatching(`sleep ${m}`)) process.kill(pid, 'SIGKILL');
  });
});

describe('a server that refuses a session (its MaxSessions, or sessions it has not freed yet)', () => {
  // A refused session never ran anything: the exec waits for a slot the server will grant and runs
  // then. Seen in CI on a loaded machine: sshd had not yet freed sessions the client had closed,
  // and a doctor probe failed with "Channel open failure" though nothing was wrong.
  let small: Sshd;
  let none: Sshd;
  beforeAll(async () => {
    small = await startSshd({ dir: join(root, 'sshd-small'), authorizedKeys: [workerKey.publicKey], maxSessions: 2 });
    none = await startSshd({ dir: join(root, 'sshd-none'), authorizedKeys: [workerKey.publicKey], maxSessions: 0 });
  });
  afterAll(async () => {
    await small?.stop();
    await none?.stop();
  });

  it('more execs than the server grants at once: each runs once, exactly, over one login', async () => {
    const ex = executor({ maxChannelsPerConnection: 6 });
    const route = direct({ port: small.port, hostKeyFingerprints: [small.hostKeyFingerprint] });
    const logins = await small.loginCount();
    const rs = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        ex.exec(route, { argv: ['sh', '-c', `sleep 0.3; echo r${i}`], timeoutMs: 10_000 }),
      ),
    );
    expect(rs.map((r) => [r.code, r.stdout])).toEqual(Array.from({ length: 6 }, (_, i) => [0, `r${i}\n`]));
    expect(await small.loginCount()).toBe(logins + 1);
    // Each command reached the server once: none ran twice.
    const ran = (await readFile(small.commandLog, 'utf8')).split('\n').filter((l) => /echo r\d/.test(l));
    expect(ran).toHaveLength(6);
  });

  it('a server that grants no session at all: a clear error within the command deadline, nothing run', async () => {
    const ex = executor({ killAfterMs: 200, clientGraceMs: 300 });
    const route = direct({ port: none.port, hostKeyFingerprints: [none.hostKeyFingerprint] });
    const t0 = Date.now();
    const e = await rejection(ex.exec(route, { argv: ['echo', 'never'], timeoutMs: 1500 }));
    expect(e.message).toMatch(/refused every session .*nothing was run/);
    expect(Date.now() - t0).toBeLessThan(2000 + 1000);
    expect(await readFile(none.commandLog, 'utf8').catch(() => '')).not.toContain('never');
  });
});
