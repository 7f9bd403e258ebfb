/**
 * A stolen worker key alone can only read: a real sshd with a stock sshd_config and the
 * agent installed by the real install.sh (agent-host.ts). Every try below uses the OpenSSH client
 * with the worker's key; each refusal is proven by what did NOT happen (the recorder nvidia-smi did
 * not run, the marker file is absent, the GPU holder is alive) and by the audit line or sshd's log.
 */
import { generateKeyPairSync } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, connect } from 'node:net';
import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_VERSION } from '../../src/agent-grammar/arg-types.ts';
import { parseMachineRead } from '../../src/agent-grammar/templates/machine-read.ts';
import { freePort } from '../../test/harness/sshd.ts';
import {
  type AgentHost,
  GPU_UUID,
  type Holder,
  identity,
  isAlive,
  PASSED_GPU,
  startAgentHost,
  UNPASSED_GPU,
} from './agent-host.ts';
import {
  APPROVAL,
  APPROVER,
  decision,
  INCIDENT,
  type PlanOptions,
  plan,
  REQUESTER,
  request,
  stdinOf,
  target,
} from './envelopes.ts';

const execFileP = promisify(execFile);
const REFUSED = /^gpu-medic-agent: refused: .+\n$/;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let host: AgentHost;
let holder: Holder;

beforeAll(async () => {
  host = await startAgentHost();
  holder = await identity(host.holderPid);
}, 60_000);

afterAll(async () => {
  await host?.stop();
});

/** Runs `fn`, then proves nothing ran: the recorder's log did not grow, one more refused audit line. */
async function refusedAndNothingRan(fn: () => Promise<{ code: number | null; stderr: string }>, auditToo = true) {
  const ranBefore = (await host.ran()).length;
  const auditBefore = (await host.audit()).length;
  const r = await fn();
  expect(await host.ran()).toHaveLength(ranBefore);
  const audit = await host.audit();
  if (auditToo) {
    expect(audit).toHaveLength(auditBefore + 1);
    expect(audit.at(-1)).toMatch(/^gpu-medic-agent\[\d+\]: refused verb=/);
  } else expect(audit).toHaveLength(auditBefore);
  expect(isAlive(holder.pid)).toBe(true);
  return { ...r, audit: audit.at(-1) ?? '' };
}

describe('install.sh on a stock sshd: what it wrote', () => {
  it('the authorized_keys line is restrict + forced command, root-owned; the sudoers entry names the exact path', async () => {
    const ak = await readFile(host.inHost(`/var/lib/${host.user}/.ssh/authorized_keys`), 'utf8');
    expect(ak).toMatch(
      /^restrict,command="\/usr\/local\/lib\/gpu-medic\/gpu-medic-agent" ssh-ed25519 \S+ gpu-medic-worker\n$/,
    );
    const sudoers = await readFile(host.inHost(`/etc/sudoers.d/${host.user}`), 'utf8');
    expect(sudoers.split('\n').filter((l) => l !== '' && !l.startsWith('#'))).toEqual([
      `${host.user} ALL=(root) NOPASSWD: /usr/local/lib/gpu-medic/gpu-medic-agent.pl`,
    ]);
    const passwd = await readFile(host.inHost('/etc/passwd'), 'utf8');
    expect(passwd).toMatch(new RegExp(`^${host.user}:x:\\d+:\\d+::/var/lib/${host.user}:/bin/sh$`, 'm'));
    // The account lives in the host's overlay only: the machine's own /etc/passwd never had it.
    expect(await readFile('/etc/passwd', 'utf8')).not.toContain(`${host.user}:`);
  });
});

describe('the worker key reads through the agent', () => {
  it('`gpu-medic 1 version` prints the version line', async () => {
    const r = await host.ssh(['gpu-medic', '1', 'version']);
    expect(r).toEqual({ code: 0, stdout: `gpu-medic-agent ${AGENT_VERSION} protocol 1\n`, stderr: '' });
  });

  it('a read verb runs the tool found through the config path=, with output and status passed through', async () => {
    const before = (await host.ran()).length;
    const r = await host.ssh(['gpu-medic', '1', '5000', 'host', 'gpu', GPU_UUID]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain(GPU_UUID);
    const ran = await host.ran();
    expect(ran).toHaveLength(before + 1);
    expect(ran.at(-1)).toMatch(new RegExp(`^--query-gpu=\\S+ --format=csv,noheader,nounits -i ${GPU_UUID}$`));
  });

  it('a read in a container goes through `pct exec <vmid> -- timeout -k 1 <s>` from the config path=', async () => {
    const before = (await host.ran()).length;
    const r = await host.ssh(['gpu-medic', '1', '4500', 'ct', '129', 'gpus']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(GPU_UUID);
    const ran = (await host.ran()).slice(before);
    expect(ran[0]).toMatch(/^pct exec 129 -- timeout -k 1 5 nvidia-smi --query-gpu=\S+ --format=csv,noheader,nounits$/);
    expect(ran).toHaveLength(2);
  });

  it('a batch answers in the machine-read framing that parseMachineRead reads unchanged', async () => {
    const r = await host.ssh(['gpu-medic', '1', '5000', 'host', 'batch', '3000', 'gpus', '+', '2000', 'gpus']);
    expect(r.code).toBe(0);
    const spec = { argv: ['nvidia-smi'], timeoutMs: 3000 };
    const parsed = parseMachineRead([spec, spec], r.stdout);
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(parsed.parts.map((p) => [p.code, p.stdout.includes(GPU_UUID), p.stderr])).toEqual([
      [0, true, ''],
      [0, true, ''],
    ]);
  });
});

describe("the agent's own timeout and status", () => {
  const mode = (m: string) => writeFile(join(host.dir, 'mode'), m);
  const childPid = async () => Number((await readFile(join(host.dir, 'child.pid'), 'utf8')).trim());

  it("a failing tool's stderr and exit status pass through unchanged", async () => {
    await mode('fail');
    try {
      const r = await host.ssh(['gpu-medic', '1', '5000', 'host', 'gpus']);
      expect(r).toEqual({ code: 3, stdout: '', stderr: 'NVIDIA-SMI has failed\n' });
    } finally {
      await mode('');
    }
  });

  it('past timeout_ms the whole process group gets TERM: status 124, the tool and its child are gone', async () => {
    await mode('slow');
    try {
      const r = await host.ssh(['gpu-medic', '1', '300', 'host', 'gpus']);
      expect(r.code).toBe(124);
      const child = await childPid();
      for (let i = 0; i < 100 && isAlive(child); i++) await sleep(20);
      expect(isAlive(child)).toBe(false);
    } finally {
      await mode('');
    }
  });

  it('a tool that ignores TERM gets KILL one second later: status 137', async () => {
    await mode('stubborn');
    try {
      const r = await host.ssh(['gpu-medic', '1', '300', 'host', 'gpus']);
      expect(r.code).toBe(137);
      const child = await childPid();
      for (let i = 0; i < 100 && isAlive(child); i++) await sleep(20);
      expect(isAlive(child)).toBe(false);
    } finally {
      await mode('');
    }
  });

  it('a batch part past its own timeout answers 124 in its frame; the other part answers normally', async () => {
    await mode('slow');
    try {
      const r = await host.ssh([
        'gpu-medic',
        '1',
        '5000',
        'host',
        'batch',
        '300',
        'gpus',
        '+',
        '2000',
        'procs',
        String(process.pid),
      ]);
      expect(r.code).toBe(0);
      const spec = { argv: ['x'], timeoutMs: 1000 };
      const parsed = parseMachineRead([spec, spec], r.stdout);
      expect(parsed.ok && parsed.parts.map((p) => [p.code, p.timedOut])).toEqual([
        [124, true],
        [0, false],
      ]);
      expect(parsed.ok && parsed.parts[1]?.stdout).toContain(`@pid ${process.pid}\n`);
    } finally {
      await mode('');
    }
  });
});

describe('a stolen worker key cannot do anything else', () => {
  it('`ssh host id`: refused by the agent, id never ran', async () => {
    const r = await refusedAndNothingRan(() => host.ssh(['id']));
    expect(r.code).toBe(126);
    expect(r.stderr).toMatch(REFUSED);
    expect(r.audit).toContain('reason=not a gpu-medic command');
  });

  it('`ssh host -- bash -c "touch …"`: refused, the file was not made', async () => {
    const marker = join(host.dir, 'touched');
    const r = await refusedAndNothingRan(() => host.ssh(['--', 'bash', '-c', `'touch ${marker}'`]));
    expect(r.code).toBe(126);
    expect(r.stderr).toMatch(REFUSED);
    expect(existsSync(marker)).toBe(false);
  });

  it('no command at all (an interactive login): refused', async () => {
    const r = await refusedAndNothingRan(() => host.ssh([], { sshArgs: ['-T'] }));
    expect(r.code).toBe(126);
    expect(r.audit).toContain('reason=the front refused the line: no command');
  });

  it('a verb with a shell metacharacter: refused by the front, before sudo', async () => {
    const marker = join(host.dir, 'meta');
    for (const words of [
      ['gpu-medic', '1', '5000', 'host', 'gpus;touch', marker],
      ['gpu-medic', '1', '5000', 'host', 'procs', '1$(touch', `${marker})`],
      ['gpu-medic', '1', '5000', 'host', 'procs', '1|touch', marker],
      ['gpu-medic', '1', '5000', 'host', 'procs', '`touch', `${marker}\``],
    ]) {
      const r = await refusedAndNothingRan(() => host.ssh(words));
      expect(r.code).toBe(126);
      expect(r.audit).toContain('reason=the front refused the line: a byte outside');
    }
    expect(existsSync(marker)).toBe(false);
  });

  it('a PID that is not a number: refused by the core', async () => {
    const r = await refusedAndNothingRan(() => host.ssh(['gpu-medic', '1', '5000', 'host', 'procs', '12a']));
    expect(r.code).toBe(126);
    expect(r.stderr).toBe('gpu-medic-agent: refused: argument 1 of procs is not a pid\n');
  });

  it('an over-long argument and an over-long line: refused', async () => {
    const long = await refusedAndNothingRan(() =>
      host.ssh(['gpu-medic', '1', '5000', 'host', 'procs', '1'.repeat(129)]),
    );
    expect(long.code).toBe(126);
    expect(long.audit).toContain('reason=the front refused the line: a word longer than 128 bytes');
    const line = await refusedAndNothingRan(() =>
      host.ssh(['gpu-medic', '1', '5000', 'host', 'procs', ...Array.from({ length: 1000 }, () => '1234')]),
    );
    expect(line.code).toBe(126);
    expect(line.audit).toContain('reason=the front refused the line: longer than 4096 bytes');
  });

  it('a verb the grammar has not, and a host-only verb asked in a container: refused', async () => {
    const unknown = await refusedAndNothingRan(() => host.ssh(['gpu-medic', '1', '5000', 'host', 'shell']));
    expect(unknown.stderr).toBe('gpu-medic-agent: refused: unknown verb shell\n');
    const where = await refusedAndNothingRan(() => host.ssh(['gpu-medic', '1', '5000', 'ct', '129', 'gpu', GPU_UUID]));
    expect(where.stderr).toBe('gpu-medic-agent: refused: verb gpu is not allowed on ct\n');
  });

  it('environment the client sends changes nothing (LC_* is accepted by stock sshd; the agent reads none)', async () => {
    const r = await refusedAndNothingRan(() =>
      host.ssh(['id'], {
        sshArgs: ['-o', 'SendEnv=LC_*'],
        env: { LC_GPU_MEDIC_CONFIG: '/tmp/evil.conf', LC_ALL: 'C' },
      }),
    );
    expect(r.code).toBe(126);
  });

  it('the sftp subsystem: refused by the agent (sshd hands it the subsystem as the command)', async () => {
    const r = await refusedAndNothingRan(() => host.ssh(['sftp'], { sshArgs: ['-s'] }));
    expect(r.code).toBe(126);
    expect(r.audit).toContain('reason=the front refused the line: a byte outside');
  });

  it('the installed core has no test mode: --explain is a word after the front, and an unknown option through sudo even from a shell of the account', async () => {
    const viaFront = await refusedAndNothingRan(() => host.ssh(['--', '--explain']));
    expect(viaFront.stderr).toBe('gpu-medic-agent: refused: not a gpu-medic command\n');
    const core = '/usr/local/lib/gpu-medic/gpu-medic-agent.pl';
    const viaSudo = await execFileP(
      'nsenter',
      ['-t', String(host.sshdPid), '-m', '--', 'runuser', '-u', host.user, '--', 'sudo', '-n', core, '--explain'],
      {
        env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
      },
    ).catch((e: { code: number; stderr: string }) => e);
    expect(viaSudo.stderr).toBe("gpu-medic-agent: refused: options are the front's own\n");
    expect((viaSudo as { code: number }).code).toBe(126);
  });

  it('through sudo, a root-owned config other than the installed one is refused; the installed one answers', async () => {
    const core = '/usr/local/lib/gpu-medic/gpu-medic-agent.pl';
    // A second root-owned config, as another package might leave: the same, but any path= would do.
    const copy = await execFileP('nsenter', [
      '-t',
      String(host.sshdPid),
      '-m',
      '--',
      'install',
      '-o',
      'root',
      '-m',
      '0644',
      '/etc/gpu-medic/agent.conf',
      '/etc/gpu-medic/other.conf',
    ]).catch((e: { stderr: string }) => e);
    expect(copy.stderr).toBe('');
    const asAccount = (conf: string) =>
      execFileP(
        'nsenter',
        ['-t', String(host.sshdPid), '-m', '--', 'runuser', '-u', host.user, '--'].concat([
          'sudo',
          '-n',
          core,
          '--config',
          conf,
          '--',
          'gpu-medic',
          '1',
          'version',
        ]),
        { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } },
      ).catch((e: { code: number; stdout: string; stderr: string }) => e);
    const other = await asAccount('/etc/gpu-medic/other.conf');
    expect(other.stderr).toBe('gpu-medic-agent: refused: through sudo the config is the installed one only\n');
    const installed = await asAccount('/etc/gpu-medic/agent.conf');
    expect(installed.stdout).toMatch(/^gpu-medic-agent \S+ protocol 1\n$/);
  });

  it("a program on path= in a directory another user owns (0777, nobody's): refused, not run; the same dir root's 0755: it runs", async () => {
    const evil = join(host.dir, 'evil');
    const marker = join(host.dir, 'evil-ran');
    await execFileP('mkdir', ['-p', evil]);
    await writeFile(join(evil, 'uname'), `#!/bin/sh\necho ran > '${marker}'\necho 6.0-evil\n`, { mode: 0o755 });
    const conf = host.inHost('/etc/gpu-medic/agent.conf');
    const original = await readFile(conf, 'utf8');
    await writeFile(conf, original.replace(/^path=/m, `path=${evil}:`));
    try {
      await execFileP('chown', ['nobody', evil]);
      await execFileP('chmod', ['0777', evil]);
      const r = await host.ssh(['gpu-medic', '1', '5000', 'host', 'probe-uname']);
      expect(r.code).toBe(126);
      expect(r.stderr).toBe(
        `gpu-medic-agent: refused: uname on path= is not root's alone (${evil} is owned by uid 65534)\n`,
      );
      expect(existsSync(marker)).toBe(false);
      await execFileP('chown', ['root', evil]);
      await execFileP('chmod', ['0755', evil]);
      const ok = await host.ssh(['gpu-medic', '1', '5000', 'host', 'probe-uname']);
      expect(ok).toMatchObject({ code: 0, stdout: '6.0-evil\n' });
      expect(existsSync(marker)).toBe(true);
    } finally {
      await writeFile(conf, original);
      await rm(evil, { recursive: true, force: true });
    }
  });

  it('a script the grammar names, with one byte flipped on the host: refused before anything runs; restored, the verb runs', async () => {
    const file = host.inHost('/usr/local/lib/gpu-medic/scripts/stuck.sh');
    const original = await readFile(file);
    const flipped = Buffer.from(original);
    flipped[0] = (flipped[0] ?? 0) ^ 1;
    await writeFile(file, flipped);
    try {
      const r = await host.ssh(['gpu-medic', '1', '5000', 'host', 'stuck']);
      expect(r.code).toBe(126);
      expect(r.stderr).toBe(
        'gpu-medic-agent: refused: script /usr/local/lib/gpu-medic/scripts/stuck.sh does not match its checksum in the grammar\n',
      );
    } finally {
      await writeFile(file, original);
    }
    const ok = await host.ssh(['gpu-medic', '1', '5000', 'host', 'stuck']);
    expect(ok.code).not.toBe(126);
    expect(ok.stderr).not.toMatch(/refused/);
  });

  it('a pty request (-tt): refused by sshd (restrict), the command did not run', async () => {
    const r = await refusedAndNothingRan(
      () => host.ssh(['gpu-medic', '1', '5000', 'host', 'gpus'], { sshArgs: ['-tt'] }),
      false,
    );
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('PTY allocation request failed');
    expect(await host.sshdLog()).toContain('Allocating a pty not permitted for this connection.');
  });

  it('agent forwarding (-A): refused by sshd (restrict)', async () => {
    const sock = join(host.dir, 'agent.sock');
    const agent = spawn('ssh-agent', ['-D', '-a', sock], { stdio: 'ignore' });
    try {
      for (let i = 0; i < 100 && !existsSync(sock); i++) await sleep(20);
      const r = await host.ssh(['gpu-medic', '1', 'version'], {
        sshArgs: ['-A'],
        env: { SSH_AUTH_SOCK: sock },
      });
      expect(r.code).toBe(0);
      expect(await host.sshdLog()).toContain('session_auth_agent_req: agent forwarding disabled');
    } finally {
      agent.kill('SIGKILL');
    }
  });

  it('local port forwarding (-L): refused by sshd, the target never saw a connection', async () => {
    let connections = 0;
    const target = createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', () => r()));
    const targetPort = (target.address() as { port: number }).port;
    const localPort = await freePort();
    const fwd = spawn(
      'ssh',
      [
        '-F',
        '/dev/null',
        '-i',
        host.clientKey,
        '-o',
        'IdentitiesOnly=yes',
        '-o',
        'StrictHostKeyChecking=no',
        '-o',
        'UserKnownHostsFile=/dev/null',
        '-o',
        'BatchMode=yes',
        '-p',
        String(host.port),
        '-l',
        host.user,
        '-N',
        '-L',
        `127.0.0.1:${localPort}:127.0.0.1:${targetPort}`,
        '127.0.0.1',
      ],
      { stdio: 'ignore' },
    );
    try {
      let refusedSeen = false;
      // Until ssh has logged in and listens on localPort (each try before that is refused by the OS).
      for (let i = 0; i < 300 && !refusedSeen; i++) {
        await new Promise<void>((r) => {
          const c = connect(localPort, '127.0.0.1');
          c.once('error', () => r());
          c.once('close', () => r());
        });
        refusedSeen = (await host.sshdLog()).includes(`refused local port forward: originator 127.0.0.1`);
        if (!refusedSeen) await sleep(50);
      }
      expect(refusedSeen).toBe(true);
      expect(connections).toBe(0);
    } finally {
      fwd.kill('SIGKILL');
      target.close();
    }
  });

  it('remote port forwarding (-R): refused by sshd', async () => {
    const r = await host.ssh([], {
      sshArgs: ['-N', '-o', 'ExitOnForwardFailure=yes', '-R', '127.0.0.1:0:127.0.0.1:9'],
    });
    expect(r.code).toBe(255);
    expect(r.stderr).toContain('remote port forwarding failed');
  });
});

describe('the audit line with a syslog socket', () => {
  it('when /dev/log exists the refusal goes to it through logger (auth.notice, tag gpu-medic-agent), not to the file', async () => {
    const sock = host.inHost('/dev/log');
    // A syslog socket inside the host's namespace, served by Perl (core IO::Socket::UNIX): one datagram a line.
    const listener = spawn(
      'perl',
      [
        '-MIO::Socket::UNIX',
        '-e',
        '$|=1; my $s = IO::Socket::UNIX->new(Type => SOCK_DGRAM, Local => $ARGV[0]) or die $!; print "ready\n"; while (1) { $s->recv(my $m, 65536); $m =~ s/\n/ /g; print "$m\n"; }',
        sock,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let got = '';
    listener.stdout.on('data', (b: Buffer) => (got += b.toString('utf8')));
    try {
      for (let i = 0; i < 100 && !got.includes('ready'); i++) await sleep(20);
      const auditBefore = (await host.audit()).length;
      const r = await host.ssh(['gpu-medic', '1', '5000', 'host', 'shell']);
      expect(r.code).toBe(126);
      for (let i = 0; i < 100 && !got.includes('reason=unknown verb shell'); i++) await sleep(20);
      expect(got).toMatch(
        /<37>.*gpu-medic-agent: gpu-medic-agent\[\d+\]: refused verb=shell where=host .*reason=unknown verb shell status=-/,
      );
      expect(await host.audit()).toHaveLength(auditBefore);
    } finally {
      listener.kill('SIGKILL');
      await rm(sock, { force: true });
    }
  });
});

/** The words of a container-side signal through `ct <vmid>` (the host's `pct exec`), as the worker sends them. */
function ctSignalWords(h: Holder, o: { vmid?: string; approval?: string } = {}): string[] {
  return [
    'gpu-medic',
    '1',
    '10000',
    'ct',
    o.vmid ?? '129',
    'signal',
    'container',
    'TERM',
    '0',
    INCIDENT,
    o.approval ?? 'none',
    String(h.pid),
    String(h.start),
    '0',
  ];
}

/** The words of a host-side kill of a container's process (`signal host`), as the worker sends them. */
function hostKillWords(h: Holder, approval = APPROVAL): string[] {
  return [
    'gpu-medic',
    '1',
    '10000',
    'host',
    'signal',
    'host',
    'TERM',
    h.inode,
    INCIDENT,
    approval,
    String(h.pid),
    String(h.start),
    String(h.pid),
  ];
}

const resetWords = (uuid: string, approval = APPROVAL) => [
  'gpu-medic',
  '1',
  '10000',
  'host',
  'reset',
  uuid,
  INCIDENT,
  approval,
];

/** A genuine tier-1 container step and its request (ct129 on kpro5), as the worker and the bot make them. */
const tier1 = (h: Holder) => ({
  plan: plan(host.worker.privateKey, { targets: [target(h.pid, h.start, h.ns)] }),
  request: request(host.bot.privateKey),
});

/** A genuine tier-2 host kill of `h`, its request and an approver's decision. */
function hostKill(h: Holder, o: PlanOptions = {}) {
  const p = plan(host.worker.privateKey, {
    approvalId: APPROVAL,
    kind: 'host_kill',
    targets: [target(h.pid, h.start, h.ns)],
    ...o,
  });
  return { plan: p, request: request(host.bot.privateKey), decision: decision(host.bot.privateKey, p) };
}

/** A genuine tier-2 reset of `uuid`, its request and an approver's decision. */
function hostReset(uuid: string, o: PlanOptions = {}) {
  const p = plan(host.worker.privateKey, { approvalId: APPROVAL, kind: 'host_reset', gpuUuids: [uuid], ...o });
  return { plan: p, request: request(host.bot.privateKey), decision: decision(host.bot.privateKey, p) };
}

/** The holder was signalled by identity and is gone; the agent audited accepted, then done. */
async function killed(h: Holder, r: { code: number | null; stdout: string; stderr: string }) {
  expect(r.stderr).toBe('');
  expect(r.stdout).toBe(`@method pidfd perl\n@sig ${h.pid} sent\n@done\n`);
  expect(r.code).toBe(0);
  for (let i = 0; i < 100 && isAlive(h.pid); i++) await sleep(20);
  expect(isAlive(h.pid)).toBe(false);
}

/** The reset ran for exactly that GPU (the recorder's last line), and the agent audited it. */
async function resetRan(uuid: string, r: { code: number | null; stderr: string }, ranBefore: number) {
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect((await host.ran()).slice(ranBefore)).toEqual([`--gpu-reset -i ${uuid}`]);
}

/** Runs one refused try against holder `h` (default the first holder): nothing ran, `h` lives, one refused audit line. */
async function refused(
  words: string[],
  input: string,
  why: string | RegExp,
  h: Holder = holder,
): Promise<{ audit: string }> {
  const ranBefore = (await host.ran()).length;
  const auditBefore = (await host.audit()).length;
  const r = await host.ssh(words, { input });
  expect(r.code).toBe(126);
  if (typeof why === 'string') expect(r.stderr).toBe(`gpu-medic-agent: refused: ${why}\n`);
  else expect(r.stderr).toMatch(why);
  expect(await host.ran()).toHaveLength(ranBefore);
  const audit = await host.audit();
  expect(audit).toHaveLength(auditBefore + 1);
  expect(audit.at(-1)).toMatch(/^gpu-medic-agent\[\d+\]: refused verb=/);
  expect(isAlive(h.pid)).toBe(true);
  return { audit: audit.at(-1) ?? '' };
}

describe('destructive verbs need the signed envelopes', () => {
  it('no envelopes: refused, the holder lives', async () => {
    const r = await refused(ctSignalWords(holder), '', 'no signed plan on stdin');
    expect(r.audit).toMatch(
      new RegExp(
        `refused verb=signal where=ct:129 incident=${INCIDENT} approval=none targets=${holder.pid}:${holder.start} `,
      ),
    );
  });

  it('forged: a plan and a request signed by keys the host does not trust: refused', async () => {
    const other = generateKeyPairSync('ed25519');
    const g = tier1(holder);
    await refused(
      ctSignalWords(holder),
      stdinOf({ ...g, plan: plan(other.privateKey, { targets: [target(holder.pid, holder.start, holder.ns)] }) }),
      'the plan does not carry a valid worker signature',
    );
    await refused(
      ctSignalWords(holder),
      stdinOf({ ...g, request: request(other.privateKey) }),
      'the request does not carry a valid signature of the bot',
    );
  });

  it('an altered plan (signature of another body): refused', async () => {
    const g = tier1(holder);
    const altered = { body: g.plan.body.replace('"vmid":129', '"vmid":130'), sig: g.plan.sig };
    await refused(
      ctSignalWords(holder),
      stdinOf({ ...g, plan: altered }),
      'the plan does not carry a valid worker signature',
    );
  });

  it('expired: a genuine request whose expires_at has passed: refused', async () => {
    const g = tier1(holder);
    await refused(
      ctSignalWords(holder),
      stdinOf({
        ...g,
        request: request(host.bot.privateKey, { signedAt: Date.now() - 10_000, expiresAt: Date.now() - 1 }),
      }),
      'the signed request has expired',
    );
  });

  it('another plan: genuine envelopes for another incident, and a plan whose targets are other processes: refused', async () => {
    const otherIncident = 'inc_20261202_010203_other';
    await refused(
      ctSignalWords(holder),
      stdinOf({
        plan: plan(host.worker.privateKey, {
          incidentId: otherIncident,
          targets: [target(holder.pid, holder.start, holder.ns)],
        }),
        request: request(host.bot.privateKey, { incident: otherIncident }),
      }),
      'the plan is for another incident',
    );
    await refused(
      ctSignalWords(holder),
      stdinOf({
        plan: plan(host.worker.privateKey, { targets: [target(holder.pid, holder.start + 1, holder.ns)] }),
        request: request(host.bot.privateKey),
      }),
      `target ${holder.pid}:${holder.start} is not in the signed plan`,
    );
  });

  it('tier 2: a decision that names another plan (its digest), or was declined: refused', async () => {
    const g = hostReset(PASSED_GPU);
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...g, decision: decision(host.bot.privateKey, g.plan, { planDigest: '0'.repeat(64) }) }),
      'the decision is for another plan',
    );
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...g, decision: decision(host.bot.privateKey, g.plan, { decision: 'denied' }) }),
      'the decision is not an approval',
    );
  });

  it('no audit possible (no /dev/log, audit file unwritable): a genuine signal is refused', async () => {
    const conf = host.inHost('/etc/gpu-medic/agent.conf');
    const original = await readFile(conf, 'utf8');
    await writeFile(conf, original.replace(/^audit_file=.*$/m, 'audit_file=/nonexistent/gpu-medic/audit.log'));
    try {
      const r = await host.ssh(ctSignalWords(holder), { input: stdinOf(tier1(holder)) });
      expect(r.code).toBe(126);
      expect(r.stderr).toMatch(/^gpu-medic-agent: refused: no audit line can be written/);
      expect(isAlive(holder.pid)).toBe(true);
    } finally {
      await writeFile(conf, original);
    }
  });
});

/**
 * The host decides from the signed plan alone: the tier, the step's kind, the approval, the host,
 * the container, the decider and the times come from what the worker and the bot signed, checked
 * against this host's own name (machine=kpro5) and its own readings (cgroups, pct config). Each
 * refusal has a twin that differs only in the refused part, is accepted and acts on this same agent.
 */
describe('the host decides from the signed plan alone', () => {
  it('a host reset with approval none and a tier-1 request: refused; the twin with its card and decision resets', async () => {
    const g = hostReset(PASSED_GPU);
    await refused(
      resetWords(PASSED_GPU, 'none'),
      stdinOf({
        plan: plan(host.worker.privateKey, { kind: 'host_reset', gpuUuids: [PASSED_GPU] }),
        request: g.request,
      }),
      'approval none is only for a container-side signal',
    );
    const ranBefore = (await host.ran()).length;
    await resetRan(PASSED_GPU, await host.ssh(resetWords(PASSED_GPU), { input: stdinOf(g) }), ranBefore);
  });

  it('a host kill with approval none (a tier-1 request and plan): refused; the twin with a host_kill card kills', async () => {
    const h = await host.newHolder();
    await refused(hostKillWords(h, 'none'), stdinOf(tier1(h)), 'approval none is only for a container-side signal', h);
    await killed(h, await host.ssh(hostKillWords(h), { input: stdinOf(hostKill(h)) }));
  });

  it('a carded host kill whose signed step is a container signal (the caller picking the tier): refused; the host_kill twin kills', async () => {
    const h = await host.newHolder();
    await refused(
      hostKillWords(h),
      stdinOf(hostKill(h, { kind: 'container_signal' })),
      'a host kill needs a tier-2 host_kill step in the plan',
      h,
    );
    await refused(
      hostKillWords(h),
      stdinOf(hostKill(h, { tier: 1 })),
      'a host kill needs a tier-2 host_kill step in the plan',
      h,
    );
    await killed(h, await host.ssh(hostKillWords(h), { input: stdinOf(hostKill(h)) }));
  });

  it('a worker-signed plan saying {container: ct129, vmid: 130}, sent to `ct 130`: refused; {ct129, 129} to `ct 129` signals', async () => {
    const h = await host.newHolder();
    const forged = plan(host.worker.privateKey, { vmid: 130, targets: [target(h.pid, h.start, h.ns)] });
    await refused(
      ctSignalWords(h, { vmid: '130' }),
      stdinOf({ plan: forged, request: request(host.bot.privateKey) }),
      'the request is for another container than the plan',
      h,
    );
    await killed(h, await host.ssh(ctSignalWords(h), { input: stdinOf(tier1(h)) }));
  });

  it("a genuine request for ct130 with a plan naming a process in ct129's cgroup: refused; the request for ct129 kills", async () => {
    const h = await host.newHolder(129);
    const forCt130 = {
      ...hostKill(h, { container: 'ct130', vmid: 130 }),
      request: request(host.bot.privateKey, { target: 'ct130', vmid: '130' }),
    };
    forCt130.decision = decision(host.bot.privateKey, forCt130.plan);
    await refused(
      hostKillWords(h),
      stdinOf(forCt130),
      `target ${h.pid}:${h.start} is not in container 130's cgroup on this host`,
      h,
    );
    await killed(h, await host.ssh(hostKillWords(h), { input: stdinOf(hostKill(h)) }));
  });

  it('a plan and request made for another host (kpro6): refused on kpro5; the twin made for kpro5 resets', async () => {
    const p = plan(host.worker.privateKey, {
      approvalId: APPROVAL,
      kind: 'host_reset',
      gpuUuids: [PASSED_GPU],
      host: 'kpro6',
    });
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({
        plan: p,
        request: request(host.bot.privateKey, { host: 'kpro6' }),
        decision: decision(host.bot.privateKey, p),
      }),
      'the plan is for another host than this one (kpro5)',
    );
    const ranBefore = (await host.ran()).length;
    await resetRan(
      PASSED_GPU,
      await host.ssh(resetWords(PASSED_GPU), { input: stdinOf(hostReset(PASSED_GPU)) }),
      ranBefore,
    );
  });

  it('a reset of a GPU the container is not given by its pct config: refused; the GPU it is given resets', async () => {
    await refused(
      resetWords(UNPASSED_GPU),
      stdinOf(hostReset(UNPASSED_GPU)),
      `GPU ${UNPASSED_GPU} is not passed to container 129 by its pct config on this host`,
    );
    expect((await host.reads()).slice(-2)).toEqual(['pct config 129', 'nvidia-smi -q -x']);
    const ranBefore = (await host.ran()).length;
    await resetRan(
      PASSED_GPU,
      await host.ssh(resetWords(PASSED_GPU), { input: stdinOf(hostReset(PASSED_GPU)) }),
      ranBefore,
    );
  });

  it("an alert's request names one GPU: another GPU's reset and any signal are refused; that GPU resets", async () => {
    const alertReq = request(host.bot.privateKey, { gpu: UNPASSED_GPU });
    const other = hostReset(PASSED_GPU);
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...other, request: alertReq }),
      `GPU ${PASSED_GPU} is not the one the request names`,
    );
    const h = await host.newHolder();
    const kill = hostKill(h);
    await refused(
      hostKillWords(h),
      stdinOf({ ...kill, request: alertReq }),
      'the request names one GPU to reset: no process may be signalled',
      h,
    );
    // The named GPU resets even though no container is given it (the alert is about the GPU itself).
    const g = hostReset(UNPASSED_GPU);
    const ranBefore = (await host.ran()).length;
    await resetRan(
      UNPASSED_GPU,
      await host.ssh(resetWords(UNPASSED_GPU), { input: stdinOf({ ...g, request: alertReq }) }),
      ranBefore,
    );
  });

  it("a decision signed for the requester, or for a bystander: refused; the approver's decision resets", async () => {
    const g = hostReset(PASSED_GPU);
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...g, decision: decision(host.bot.privateKey, g.plan, { decider: REQUESTER }) }),
      'the requester cannot approve their own request',
    );
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...g, decision: decision(host.bot.privateKey, g.plan, { decider: 'U9BYSTANDER' }) }),
      "the decider is not one of the plan's approvers",
    );
    const ranBefore = (await host.ran()).length;
    await resetRan(PASSED_GPU, await host.ssh(resetWords(PASSED_GPU), { input: stdinOf(g) }), ranBefore);
  });

  it('an escalation approver deciding before the card escalated: refused; after it escalated: resets', async () => {
    const now = Date.now();
    const early = hostReset(PASSED_GPU, { escalation: { approvers: ['U3ESC'], at: now + 60_000 } });
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...early, decision: decision(host.bot.privateKey, early.plan, { decider: 'U3ESC' }) }),
      'an escalation approver decided before the card escalated',
    );
    const due = hostReset(PASSED_GPU, { escalation: { approvers: ['U3ESC'], at: now - 1 } });
    const ranBefore = (await host.ran()).length;
    await resetRan(
      PASSED_GPU,
      await host.ssh(resetWords(PASSED_GPU), {
        input: stdinOf({ ...due, decision: decision(host.bot.privateKey, due.plan, { decider: 'U3ESC' }) }),
      }),
      ranBefore,
    );
  });

  it("a decision signed after the card's expiry: refused; one signed before it resets", async () => {
    const now = Date.now();
    const g = hostReset(PASSED_GPU, { createdAt: now - 120_000, expiresAt: now + 60_000 });
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...g, decision: decision(host.bot.privateKey, g.plan, { signedAt: now + 60_000 }) }),
      'the decision was signed after the card expired',
    );
    const ranBefore = (await host.ran()).length;
    await resetRan(
      PASSED_GPU,
      await host.ssh(resetWords(PASSED_GPU), {
        input: stdinOf({ ...g, decision: decision(host.bot.privateKey, g.plan, { signedAt: now + 59_000 }) }),
      }),
      ranBefore,
    );
  });

  it('a quorum of two: one decision, or two by one decider, refused; two distinct approvers reset', async () => {
    const g = hostReset(PASSED_GPU, { quorum: 2, approvers: [APPROVER, 'U4OTHER'] });
    const by = (decider: string) => decision(host.bot.privateKey, g.plan, { decider });
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...g, decision: by(APPROVER) }),
      'the plan needs 2 distinct approvers, got 1',
    );
    await refused(
      resetWords(PASSED_GPU),
      stdinOf({ ...g, decision: undefined, decisions: [by(APPROVER), by(APPROVER)] }),
      'two decisions by one decider',
    );
    const ranBefore = (await host.ran()).length;
    await resetRan(
      PASSED_GPU,
      await host.ssh(resetWords(PASSED_GPU), {
        input: stdinOf({ ...g, decision: undefined, decisions: [by(APPROVER), by('U4OTHER')] }),
      }),
      ranBefore,
    );
  });
});

describe('time is bounded on the host', () => {
  it('a request signed to live 30 days: refused; one living 5 minutes signals', async () => {
    const h = await host.newHolder();
    const now = Date.now();
    await refused(
      ctSignalWords(h),
      stdinOf({
        ...tier1(h),
        request: request(host.bot.privateKey, { signedAt: now, expiresAt: now + 30 * 86_400_000 }),
      }),
      'the signed request lives longer than this host allows (max_lifetime_s=900)',
      h,
    );
    await killed(
      h,
      await host.ssh(ctSignalWords(h), {
        input: stdinOf({
          ...tier1(h),
          request: request(host.bot.privateKey, { signedAt: now, expiresAt: now + 300_000 }),
        }),
      }),
    );
  });

  it('a request signed more than 60 s ahead of the host clock: refused; 30 s ahead signals', async () => {
    const h = await host.newHolder();
    const ahead = (ms: number) => request(host.bot.privateKey, { signedAt: Date.now() + ms });
    await refused(
      ctSignalWords(h),
      stdinOf({ ...tier1(h), request: ahead(90_000) }),
      "the signed request is signed in the future (more than 60 s ahead of this host's clock)",
      h,
    );
    await killed(h, await host.ssh(ctSignalWords(h), { input: stdinOf({ ...tier1(h), request: ahead(30_000) }) }));
  });
});

describe("the host's own identity", () => {
  const conf = () => host.inHost('/etc/gpu-medic/agent.conf');

  it('an agent with no machine= in its config refuses a genuine reset and says why; with it, resets', async () => {
    const original = await readFile(conf(), 'utf8');
    await writeFile(conf(), original.replace(/^machine=.*\n/m, ''));
    try {
      await refused(
        resetWords(PASSED_GPU),
        stdinOf(hostReset(PASSED_GPU)),
        'this agent has no machine= in its config (install.sh --machine ID): destructive verbs are refused until it does',
      );
    } finally {
      await writeFile(conf(), original);
    }
    const ranBefore = (await host.ran()).length;
    await resetRan(
      PASSED_GPU,
      await host.ssh(resetWords(PASSED_GPU), { input: stdinOf(hostReset(PASSED_GPU)) }),
      ranBefore,
    );
  });

  it("a role=self agent (ct129) given ct130's plan: refused; its own container's plan signals", async () => {
    const original = await readFile(conf(), 'utf8');
    const self = original
      .replace(/^role=.*$/m, 'role=self')
      .replace(/^machine=.*$/m, 'machine=ct129')
      .concat('vmid=129\n');
    await writeFile(conf(), self);
    const selfWords = (h: Holder) => ['gpu-medic', '1', '10000', 'host', ...ctSignalWords(h).slice(5)];
    try {
      const h = await host.newHolder();
      const other = {
        plan: plan(host.worker.privateKey, { container: 'ct130', vmid: 130, targets: [target(h.pid, h.start, h.ns)] }),
        request: request(host.bot.privateKey, { target: 'ct130', vmid: '130' }),
      };
      await refused(selfWords(h), stdinOf(other), 'the plan is for another machine than this one (ct129)', h);
      await killed(h, await host.ssh(selfWords(h), { input: stdinOf(tier1(h)) }));
    } finally {
      await writeFile(conf(), original);
    }
  });
});
