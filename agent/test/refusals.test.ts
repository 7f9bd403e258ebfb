/**
 * Issue 21, "a stolen worker key alone can only read": a real sshd with a stock sshd_config and the
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
import { parseMachineRead } from '../../src/agent-grammar/templates/machine-read.ts';
import { freePort } from '../../test/harness/sshd.ts';
import { type AgentHost, GPU_UUID, isAlive, startAgentHost } from './agent-host.ts';
import { APPROVAL, decision, INCIDENT, plan, request, stdinOf, target } from './envelopes.ts';

const execFileP = promisify(execFile);
const REFUSED = /^gpu-medic-agent: refused: .+\n$/;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let host: AgentHost;
let holder: { pid: number; start: number; ns: string; inode: string };

async function identity(pid: number) {
  const stat = await readFile(`/proc/${pid}/stat`, 'latin1');
  const start = Number(stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[19]);
  const ns = await import('node:fs/promises').then((f) => f.readlink(`/proc/${pid}/ns/pid`));
  return { pid, start, ns, inode: /^pid:\[(\d+)\]$/.exec(ns)?.[1] ?? '' };
}

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
    expect(r).toEqual({ code: 0, stdout: 'gpu-medic-agent 1.0.0 protocol 1\n', stderr: '' });
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

  it('--explain (print, run nothing) is unreachable: a word after the front, refused through sudo even from a shell of the account', async () => {
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
    expect(viaSudo.stderr).toBe('gpu-medic-agent: refused: --explain is for root on the host, never through sudo\n');
    expect((viaSudo as { code: number }).code).toBe(126);
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

describe('destructive verbs need the signed envelopes', () => {
  const signalWords = () => [
    'gpu-medic',
    '1',
    '10000',
    'host',
    'signal',
    'host',
    'TERM',
    holder.inode,
    INCIDENT,
    'none',
    String(holder.pid),
    String(holder.start),
    String(holder.pid),
  ];
  const genuinePlan = () => plan(host.worker.privateKey, { targets: [target(holder.pid, holder.start, holder.ns)] });

  it('no envelopes: refused, the holder lives', async () => {
    const r = await refusedAndNothingRan(() => host.ssh(signalWords()));
    expect(r.stderr).toBe('gpu-medic-agent: refused: no signed plan on stdin\n');
    expect(r.audit).toMatch(
      new RegExp(
        `refused verb=signal where=host incident=${INCIDENT} approval=none targets=${holder.pid}:${holder.start} `,
      ),
    );
  });

  it('forged: a plan and a request signed by keys the host does not trust: refused', async () => {
    const other = generateKeyPairSync('ed25519');
    const forgedPlan = await refusedAndNothingRan(() =>
      host.ssh(signalWords(), {
        input: stdinOf({
          plan: plan(other.privateKey, { targets: [target(holder.pid, holder.start, holder.ns)] }),
          request: request(host.bot.privateKey),
        }),
      }),
    );
    expect(forgedPlan.stderr).toBe('gpu-medic-agent: refused: the plan does not carry a valid worker signature\n');
    const forgedRequest = await refusedAndNothingRan(() =>
      host.ssh(signalWords(), { input: stdinOf({ plan: genuinePlan(), request: request(other.privateKey) }) }),
    );
    expect(forgedRequest.stderr).toBe(
      'gpu-medic-agent: refused: the request does not carry a valid signature of the bot\n',
    );
  });

  it('an altered plan (signature of another body): refused', async () => {
    const p = genuinePlan();
    const altered = { body: p.body.replace('"vmid":129', '"vmid":130'), sig: p.sig };
    const r = await refusedAndNothingRan(() =>
      host.ssh(signalWords(), { input: stdinOf({ plan: altered, request: request(host.bot.privateKey) }) }),
    );
    expect(r.stderr).toBe('gpu-medic-agent: refused: the plan does not carry a valid worker signature\n');
  });

  it('expired: a genuine request whose expires_at has passed: refused', async () => {
    const r = await refusedAndNothingRan(() =>
      host.ssh(signalWords(), {
        input: stdinOf({ plan: genuinePlan(), request: request(host.bot.privateKey, { expiresAt: Date.now() - 1 }) }),
      }),
    );
    expect(r.stderr).toBe('gpu-medic-agent: refused: the signed request has expired\n');
  });

  it('another plan: genuine envelopes for another incident, and a plan whose targets are other processes: refused', async () => {
    const otherIncident = 'inc_20261202_010203_other';
    const a = await refusedAndNothingRan(() =>
      host.ssh(signalWords(), {
        input: stdinOf({
          plan: plan(host.worker.privateKey, {
            incidentId: otherIncident,
            targets: [target(holder.pid, holder.start, holder.ns)],
          }),
          request: request(host.bot.privateKey, { incident: otherIncident }),
        }),
      }),
    );
    expect(a.stderr).toBe('gpu-medic-agent: refused: the plan is for another incident\n');
    const b = await refusedAndNothingRan(() =>
      host.ssh(signalWords(), {
        input: stdinOf({
          plan: plan(host.worker.privateKey, { targets: [target(holder.pid, holder.start + 1, holder.ns)] }),
          request: request(host.bot.privateKey),
        }),
      }),
    );
    expect(b.stderr).toBe(`gpu-medic-agent: refused: target ${holder.pid}:${holder.start} is not in the signed plan\n`);
  });

  it('tier 2: a decision that names another plan (its digest), or was declined: refused', async () => {
    const words = ['gpu-medic', '1', '10000', 'host', 'reset', GPU_UUID, INCIDENT, APPROVAL];
    const p = plan(host.worker.privateKey, { approvalId: APPROVAL, kind: 'host_reset', gpuUuids: [GPU_UUID] });
    const otherDigest = await refusedAndNothingRan(() =>
      host.ssh(words, {
        input: stdinOf({ plan: p, decision: decision(host.bot.privateKey, p, { planDigest: '0'.repeat(64) }) }),
      }),
    );
    expect(otherDigest.stderr).toBe('gpu-medic-agent: refused: the decision is for another plan\n');
    const declined = await refusedAndNothingRan(() =>
      host.ssh(words, {
        input: stdinOf({ plan: p, decision: decision(host.bot.privateKey, p, { decision: 'declined' }) }),
      }),
    );
    expect(declined.stderr).toBe('gpu-medic-agent: refused: the decision is not an approval\n');
  });

  it('a container signal through `ct <vmid>` for another container than the plan names: refused', async () => {
    const words = [
      'gpu-medic',
      '1',
      '10000',
      'ct',
      '130',
      'signal',
      'container',
      'TERM',
      '0',
      INCIDENT,
      'none',
      String(holder.pid),
      String(holder.start),
      '0',
    ];
    const r = await refusedAndNothingRan(() =>
      host.ssh(words, { input: stdinOf({ plan: genuinePlan(), request: request(host.bot.privateKey) }) }),
    );
    expect(r.stderr).toBe("gpu-medic-agent: refused: the container is not the plan's\n");
    expect(r.audit).toContain('where=ct:130');
  });

  it('no audit possible (no /dev/log, audit file unwritable): a genuine signal is refused', async () => {
    const conf = host.inHost('/etc/gpu-medic/agent.conf');
    const original = await readFile(conf, 'utf8');
    await writeFile(conf, original.replace(/^audit_file=.*$/m, 'audit_file=/nonexistent/gpu-medic/audit.log'));
    try {
      const r = await host.ssh(signalWords(), {
        input: stdinOf({ plan: genuinePlan(), request: request(host.bot.privateKey) }),
      });
      expect(r.code).toBe(126);
      expect(r.stderr).toMatch(/^gpu-medic-agent: refused: no audit line can be written/);
      expect(isAlive(holder.pid)).toBe(true);
    } finally {
      await writeFile(conf, original);
    }
  });

  it('tier 2 reset with a genuine decision and plan: nvidia-smi --gpu-reset ran for that UUID, audited before and after', async () => {
    const p = plan(host.worker.privateKey, { approvalId: APPROVAL, kind: 'host_reset', gpuUuids: [GPU_UUID] });
    const auditBefore = (await host.audit()).length;
    const r = await host.ssh(['gpu-medic', '1', '10000', 'host', 'reset', GPU_UUID, INCIDENT, APPROVAL], {
      input: stdinOf({ plan: p, decision: decision(host.bot.privateKey, p) }),
    });
    expect(r.code).toBe(0);
    expect((await host.ran()).at(-1)).toBe(`--gpu-reset -i ${GPU_UUID}`);
    const audit = (await host.audit()).slice(auditBefore);
    expect(audit).toHaveLength(2);
    expect(audit[0]).toContain(
      `accepted verb=reset where=host incident=${INCIDENT} approval=${APPROVAL} targets=${GPU_UUID}`,
    );
    expect(audit[1]).toMatch(/ done verb=reset .* status=0$/);
  });

  it('tier 1 signal with a genuine request and plan: the holder is signalled by identity and exits', async () => {
    const auditBefore = (await host.audit()).length;
    const r = await host.ssh(signalWords(), {
      input: stdinOf({ plan: genuinePlan(), request: request(host.bot.privateKey) }),
    });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`@method pidfd perl\n@sig ${holder.pid} sent\n@done\n`);
    expect(r.code).toBe(0);
    for (let i = 0; i < 100 && isAlive(holder.pid); i++) await sleep(20);
    expect(isAlive(holder.pid)).toBe(false);
    const audit = (await host.audit()).slice(auditBefore);
    expect(audit.map((l) => l.split(' ')[1])).toEqual(['accepted', 'done']);
  });
});
