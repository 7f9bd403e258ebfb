import { describe, expect, it } from 'vitest';
import {
  DETAIL_MAX,
  judge,
  type ContainerReading,
  type Finding,
  type HostReading,
  type ProbeRun,
} from '../../src/doctor/judge.ts';
import { reportText } from '../../src/doctor/report-table.ts';

// Outputs as the real tools print them (GNU coreutils, psmisc, dash, util-linux, Proxmox pct/lxc-info, nvidia-smi).
const ok = (stdout: string, stderr = ''): ProbeRun => ({
  ran: true,
  code: 0,
  signal: null,
  stdout,
  stderr,
  timedOut: false,
});
const exit = (code: number, stderr: string, stdout = ''): ProbeRun => ({
  ran: true,
  code,
  signal: null,
  stdout,
  stderr,
  timedOut: false,
});
const UUID = [
  'GPU-5fa3c8d2-6b1e-4c2a-9e8f-0a1b2c3d4e5f',
  'GPU-7c2e9a41-1d3b-4f5e-8a6c-9b0d1e2f3a4b',
  'GPU-0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b',
];
const smi = (rows: Array<[number, string, string]>): ProbeRun =>
  ok(rows.map(([i, u, p]) => `${i}, ${u}, 590.48.01, ${p}\n`).join(''));
const PERL_OK = ok('pidfd ok\n');
const FUSER_V = ok(
  '',
  'fuser (PSmisc) 23.6\nCopyright (C) 1993-2020 Werner Almesberger and Craig Small\n\nPSmisc comes with ABSOLUTELY NO WARRANTY.\n',
);
const ROOT_PROC = ok('uid 0\npid1 readable\nmount proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n');
const PCT_LIST = ok(
  'VMID       Status     Lock         Name                \n129        running                 ct129               \n130        running                 ct130               \n',
);
const NS_A = 'pid:[4026532281]';
const NS_B = 'pid:[4026532399]';

/** The worker sent the clock probe at T0 and had its answer a second later; `date +%s.%N` printed `hostAt`. */
const T0 = 1_796_100_000_000;
const clockAt = (hostMs: number): ProbeRun =>
  ok(`${Math.floor(hostMs / 1000)}.${String(hostMs % 1000).padStart(3, '0')}000000\n`);

function host(over: Partial<HostReading['probes']> = {}, inits?: HostReading['inits']): HostReading {
  return {
    clock: { sentAt: T0, answeredAt: T0 + 1000 },
    kind: 'host',
    machineId: 'kpro5',
    login: { via: 'ssh', user: 'root', where: 'root@10.0.0.5:22' },
    probes: {
      uname: ok('6.8.12-4-pve\n'),
      nvidia: smi(UUID.map((u, i) => [i, u, 'Disabled'])),
      perl: PERL_OK,
      python3: PERL_OK,
      proc: ROOT_PROC,
      pct: PCT_LIST,
      clock: clockAt(T0 + 500),
      ...over,
    },
    inits: inits ?? [{ containerId: 'ct129', vmid: 129, lxcInfo: ok('4242\n'), ns: ok(`${NS_A}\n`) }],
  };
}

function container(over: Partial<ContainerReading['probes']> = {}): ContainerReading {
  return {
    kind: 'container',
    machineId: 'ct129',
    hostId: 'kpro5',
    vmid: 129,
    login: { via: 'ssh', user: 'root', where: 'root@10.0.0.129:22' },
    probes: {
      uname: ok('6.8.12-4-pve\n'),
      nvidia: smi([[0, UUID[2] ?? '', 'Disabled']]),
      fuser: FUSER_V,
      perl: PERL_OK,
      python3: PERL_OK,
      proc: ROOT_PROC,
      ns: ok(`${NS_A}\n`),
      ...over,
    },
  };
}

const find = (fs: Finding[], machine: string, check: Finding['check']): Finding => {
  const f = fs.find((x) => x.machineId === machine && x.check === check);
  if (!f) throw new Error(`no ${check} finding for ${machine}`);
  return f;
};

describe("doctor judgement (pure, from the probes' outputs)", () => {
  it('a healthy host and container: every check ok, nothing failed', () => {
    const r = judge([container(), host()]);
    expect(r.failed).toBe(0);
    expect(r.warned).toBe(0);
    expect(r.findings.filter((f) => f.status !== 'ok')).toEqual([]);
    expect(r.findings[0]?.machineId).toBe('kpro5'); // hosts first
    expect(find(r.findings, 'kpro5', 'nvidia-smi').detail).toBe('driver 590.48.01, 3 GPUs');
    expect(find(r.findings, 'ct129', 'GPU UUIDs').detail).toBe('all 1 on kpro5 (container→host index 0→2)');
  });

  it('timeout missing (dash cannot exec it): timeout -k fails and the rest of that machine is skipped, not failed', () => {
    const r = judge([host({ uname: exit(127, 'sh: 1: exec: timeout: not found\n') })]);
    expect(find(r.findings, 'kpro5', 'timeout -k')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('timeout not found'),
    });
    expect(find(r.findings, 'kpro5', 'timeout -k').hint).toMatch(/coreutils/);
    expect(
      r.findings.filter((f) => f.check !== 'ssh' && f.check !== 'timeout -k').every((f) => f.status === 'skip'),
    ).toBe(true);
    expect(r.failed).toBe(1);
  });

  it('timeout missing in a container reached by pct exec (real lxc-attach cannot exec it): timeout -k fails as timeout not found', () => {
    // lxc 5.0's own text, seen through a real `pct exec` (lxc-attach execs the command without a shell).
    const said =
      'lxc-attach: 131: ../src/lxc/attach.c: lxc_attach_run_command: 1841 No such file or directory - Failed to exec "timeout"\n';
    const r = judge([host(), container({ uname: exit(127, said) })]);
    expect(find(r.findings, 'ct129', 'timeout -k')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('timeout not found'),
    });
  });

  it('timeout present but the program it runs is missing is not "timeout missing"', () => {
    const r = judge([
      host({ uname: exit(127, "timeout: failed to run command 'uname': No such file or directory\n") }),
    ]);
    expect(find(r.findings, 'kpro5', 'timeout -k').detail).toMatch(/^uname under timeout -k: exit 127/);
  });

  it('fuser missing in the container (timeout could not run it): fail with the psmisc hint', () => {
    const r = judge([
      host(),
      container({ fuser: exit(127, "timeout: failed to run command 'fuser': No such file or directory\n") }),
    ]);
    const f = find(r.findings, 'ct129', 'fuser');
    expect(f.status).toBe('fail');
    expect(f.detail).toContain('fuser not found');
    expect(f.hint).toMatch(/psmisc/);
    expect(r.failed).toBe(1);
  });

  it('neither perl nor python3: pidfd kill fails; one of them is enough', () => {
    const none = exit(127, "timeout: failed to run command 'perl': No such file or directory\n");
    const r = judge([
      host({ perl: none, python3: exit(127, "timeout: failed to run command 'python3': No such file or directory\n") }),
    ]);
    expect(find(r.findings, 'kpro5', 'pidfd kill')).toMatchObject({
      status: 'fail',
      detail: expect.stringMatching(/perl not found.*python3 not found/),
    });
    const one = judge([host({ perl: none })]);
    expect(find(one.findings, 'kpro5', 'pidfd kill')).toMatchObject({
      status: 'ok',
      detail: 'pidfd_open works with python3',
    });
  });

  it('an old kernel where pidfd_open fails is a failure too, with what perl said', () => {
    const r = judge([
      host({
        perl: exit(1, '', 'pidfd_open failed: Function not implemented\n'),
        python3: exit(1, "AttributeError: module 'os' has no attribute 'pidfd_open'\n"),
      }),
    ]);
    expect(find(r.findings, 'kpro5', 'pidfd kill').detail).toContain('pidfd_open failed: Function not implemented');
  });

  it('hidepid hides PID 1 from a non-root login: fail; root with hidepid: ok', () => {
    const hidden = ok('uid 1001\npid1 hidden\nmount proc /proc proc rw,relatime,hidepid=invisible 0 0\n');
    const r = judge([host(), container({ proc: hidden })]);
    expect(find(r.findings, 'ct129', '/proc')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('hidepid=invisible'),
    });
    const root = judge([
      host(),
      container({ proc: ok('uid 0\npid1 readable\nmount proc /proc proc rw,relatime,hidepid=invisible 0 0\n') }),
    ]);
    expect(find(root.findings, 'ct129', '/proc').status).toBe('ok');
  });

  it('pct and lxc-info missing on a host: both fail', () => {
    const r = judge([
      host({ pct: exit(127, "timeout: failed to run command 'pct': No such file or directory\n") }, [
        {
          containerId: 'ct129',
          vmid: 129,
          lxcInfo: exit(127, "timeout: failed to run command 'lxc-info': No such file or directory\n"),
          ns: null,
        },
      ]),
    ]);
    expect(find(r.findings, 'kpro5', 'pct')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('pct not found'),
    });
    expect(find(r.findings, 'kpro5', 'lxc-info')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('lxc-info not found'),
    });
  });

  it('an inventory vmid that pct list does not show: fail naming it', () => {
    const r = judge([
      host({}, [{ containerId: 'ct131', vmid: 131, lxcInfo: exit(1, "131 doesn't exist\n"), ns: null }]),
    ]);
    expect(find(r.findings, 'kpro5', 'pct')).toMatchObject({
      status: 'fail',
      detail: 'not on this host: ct131 (vmid 131)',
    });
  });

  it('a container address that lands in another PID namespace: fail, naming both namespaces', () => {
    const r = judge([host(), container({ ns: ok(`${NS_B}\n`) })]);
    const f = find(r.findings, 'ct129', 'pid namespace');
    expect(f.status).toBe('fail');
    expect(f.detail).toBe(
      `root@10.0.0.129:22 lands in ${NS_B}, but vmid 129's init (PID 4242 on kpro5) is in ${NS_A}: this login is another machine`,
    );
  });

  it('container GPUs whose UUIDs the host does not have: fail', () => {
    const r = judge([
      host(),
      container({ nvidia: smi([[0, 'GPU-11111111-2222-3333-4444-555555555555', 'Disabled']]) }),
    ]);
    expect(find(r.findings, 'ct129', 'GPU UUIDs')).toMatchObject({
      status: 'fail',
      detail: 'container GPU 0 (GPU-11111111-2222-3333-4444-555555555555) not on kpro5',
    });
  });

  it('persistence mode on: a warning, not a failure (exit code stays 0)', () => {
    const r = judge([
      host({
        nvidia: smi([
          [0, UUID[0] ?? '', 'Enabled'],
          [1, UUID[1] ?? '', 'Disabled'],
        ]),
      }),
    ]);
    expect(find(r.findings, 'kpro5', 'persistence')).toMatchObject({ status: 'warn', detail: 'on for GPU 0' });
    expect(r.failed).toBe(0);
    expect(r.warned).toBe(1);
  });

  it('nvidia-smi with the driver/library mismatch: fail with the reboot hint, and the container GPU check is skipped', () => {
    const r = judge([
      host({
        nvidia: exit(
          18,
          '',
          'Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 590.48\n',
        ),
      }),
      container(),
    ]);
    expect(find(r.findings, 'kpro5', 'nvidia-smi')).toMatchObject({
      status: 'fail',
      hint: expect.stringMatching(/reboot/),
    });
    expect(find(r.findings, 'ct129', 'GPU UUIDs').status).toBe('skip');
  });

  it("a refused host key: ssh fails with the executor's words, nothing else is judged on that machine", () => {
    const refused: ProbeRun = {
      ran: false,
      code: 'host_key_mismatch',
      message:
        'Host key of kpro5 (root@10.0.0.5:22) is SHA256:abc, not the pinned SHA256:def; refused, nothing was run.',
    };
    const r = judge([host({ uname: refused }), container()]);
    expect(find(r.findings, 'kpro5', 'ssh')).toMatchObject({
      status: 'fail',
      detail: refused.message,
      hint: expect.stringMatching(/out of band/),
    });
    expect(
      r.findings.filter((f) => f.machineId === 'kpro5' && f.check !== 'ssh').every((f) => f.status === 'skip'),
    ).toBe(true);
    expect(find(r.findings, 'ct129', 'pid namespace')).toMatchObject({
      status: 'skip',
      detail: 'not compared: host kpro5 could not be read',
    });
  });

  it('machine text stays one bounded line in the table (no newlines or control characters from stderr)', () => {
    const r = judge([host(), container({ fuser: exit(1, `line one\n\u001b[31mred\u001b[0m\n${'x'.repeat(500)}`) })]);
    const f = find(r.findings, 'ct129', 'fuser');
    expect(f.detail).not.toMatch(/[\n\u001b]/);
    expect(f.detail.length).toBeLessThanOrEqual(DETAIL_MAX);
    const text = reportText(r, 2);
    expect(text.split('\n').find((l) => l.startsWith('ct129') && l.includes('fuser'))).toContain('FAIL');
    expect(text).toContain('How to fix:');
  });

  it("the host's clock against the worker's: in step ok; 30 s ahead a warning; 2 minutes behind fails, saying the agent would refuse", () => {
    const clock = (ms: number) =>
      judge([host({ clock: clockAt(T0 + 500 + ms) })]).findings.find((f) => f.check === 'clock');
    expect(clock(300)).toMatchObject({ status: 'ok', detail: "offset +0.3 s (±0.5 s) from the worker's clock" });
    expect(clock(30_000)).toMatchObject({ status: 'warn', detail: "offset +30.0 s (±0.5 s) from the worker's clock" });
    const behind = clock(-120_000);
    expect(behind?.status).toBe('fail');
    expect(behind?.detail).toContain(
      "offset -120.0 s (±0.5 s) from the worker's clock: the bot's signatures look more than 60 s in the future here",
    );
    expect(clock(Number.NaN)?.status).toBe('warn');
  });
});
