/**
 * One simulated Proxmox host for the agent's tests: a REAL sshd with a stock sshd_config (no
 * ForceCommand, no AuthorizedKeysFile, forwarding left at its defaults) and the agent installed by
 * the REAL `agent/install.sh`, both inside a private mount namespace (host-ns.sh): the account, the
 * sudoers entry, the agent's files, its config and its audit file live in overlays that vanish with
 * the namespace. Every restriction a client meets comes from what install.sh wrote.
 *
 * The agent's config points `path=` at this host's `bin/` first, where `nvidia-smi` is a recorder:
 * each run appends its arguments to `ran.log`, so "nothing ran" is a file that did not grow.
 */
import { execFile, spawn } from 'node:child_process';
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createContainerCgroup, removeContainerCgroup } from '../../test/harness/fleet/cgroup.ts';
import { freePort, generateKeyPair } from '../../test/harness/sshd.ts';

const execFileP = promisify(execFile);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export const AGENT_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const SAMPLE_GRAMMAR = join(AGENT_DIR, 'test', 'grammar.sample.json');
/** agentw's generated grammar once it is on this branch, else the sample in the same format. */
const GRAMMAR = existsSync(join(AGENT_DIR, 'grammar.json')) ? join(AGENT_DIR, 'grammar.json') : SAMPLE_GRAMMAR;

/** What the fake nvidia-smi prints for the GPU table: one GPU. */
export const GPU_UUID = 'GPU-12345678-1234-1234-1234-123456789012';
const GPU_ROW = `0, ${GPU_UUID}, NVIDIA Fake, 00000000:01:00.0, 10, 81559, 0`;

/**
 * The host's `nvidia-smi -q -x` is a real capture (two RTX A5000, minors 1 and 0), and `pct config
 * <vmid>` serves real container configs: 129 the devN style passing /dev/nvidia0 only, 130 the
 * classic style (lxc.mount.entry of /dev/nvidia0). So of the two GPUs, minor 0 is passed to both
 * containers and minor 1 to neither: a reset of minor 1 for a container must be refused.
 */
const FIXTURES = resolve(AGENT_DIR, '..', 'test', 'fixtures');
const HOST_XML = join(FIXTURES, 'nvidia-smi', 'xml', '2x-rtx-a5000_v13.xml');
const PCT_CONFIG: Record<string, string> = {
  '129': join(FIXTURES, 'proxmox', 'pct-config', 'ct113-comfyui_dev-style-nvidia_tags_pve9.1.6_unknown-repo.conf'),
  '130': join(
    FIXTURES,
    'proxmox',
    'pct-config',
    'ct116-xtts-api_classic-cgroup2-nvidia_tags_pve9.1.6_unknown-repo.conf',
  ),
};
/** Minor 0 in the capture: passed to ct129 and ct130 by their configs. */
export const PASSED_GPU = 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd';
/** Minor 1 in the capture: passed to no container. */
export const UNPASSED_GPU = 'GPU-12345678-aaaa-bbbb-cccc-0123456789ab';
/** The inventory id install.sh writes into this host's agent.conf (machine=). */
const HOST_ID = 'kpro5';
/** The container whose cgroup (`lxc/129`, Proxmox's naming) the holder is put in. */
const HOLDER_VMID = 129;

export interface SshResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface SshOptions {
  sshArgs?: readonly string[];
  input?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  /** Another private key than the worker's (a rotation's new key, or a key the install must have dropped). */
  identity?: string;
  /** Another account than the agent's. */
  user?: string;
}

/** A GPU holder's identity as the host sees it: PID, start time (ticks), PID namespace and its inode. */
export interface Holder {
  pid: number;
  start: number;
  ns: string;
  inode: string;
}

export async function identity(pid: number): Promise<Holder> {
  const stat = await readFile(`/proc/${pid}/stat`, 'latin1');
  const start = Number(stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[19]);
  const ns = await readlink(`/proc/${pid}/ns/pid`);
  return { pid, start, ns, inode: /^pid:\[(\d+)\]$/.exec(ns)?.[1] ?? '' };
}

export interface AgentHost {
  dir: string;
  port: number;
  user: string;
  /** The worker's SSH key (private key file) that install.sh forced to the agent. */
  clientKey: string;
  bot: { privateKey: KeyObject };
  worker: { privateKey: KeyObject };
  /** PID (this PID namespace) of a `sleep` holding /dev/nvidia0 inside the host's mount namespace. */
  holderPid: number;
  /** sshd's PID: its /proc/<pid>/root is the host's view of the file system. */
  sshdPid: number;
  installLog: string;
  /** The `ssh` arguments `ssh()` runs with (for a test that runs the client itself). */
  sshArgv(words: readonly string[], o?: SshOptions): string[];
  /** `ssh` (OpenSSH client) with the worker's key: `sshArgs` before the host, then the command words; `input` on stdin. */
  ssh(words: readonly string[], o?: SshOptions): Promise<SshResult>;
  /** A path inside the host's mount namespace, as this process reads it. */
  inHost(path: string): string;
  /** The audit file's lines. */
  audit(): Promise<string[]>;
  /** The recorder's runs (one line of arguments each). */
  ran(): Promise<string[]>;
  /** The host's own readings the agent made to check a reset (`pct config`, `nvidia-smi -q -x`). */
  reads(): Promise<string[]>;
  /** Another GPU holder like the first, in container `vmid`'s cgroup (default 129): one per test that kills. */
  newHolder(vmid?: number): Promise<Holder>;
  sshdLog(): Promise<string>;
  stop(): Promise<void>;
}

/** Debian 12's stock sshd_config, but for where it listens, its host key and pid file, and no PAM. */
function stockSshdConfig(port: number, dir: string): string {
  return [
    `Port ${port}`,
    'ListenAddress 127.0.0.1',
    `HostKey ${join(dir, 'ssh_host_ed25519_key')}`,
    `PidFile ${join(dir, 'sshd.pid')}`,
    'UsePAM no',
    // DEBUG1: the log says what sshd refused (pty, agent forwarding, port forwarding) and why.
    'LogLevel DEBUG1',
    'KbdInteractiveAuthentication no',
    'X11Forwarding yes',
    'PrintMotd no',
    'AcceptEnv LANG LC_*',
    'Subsystem sftp /usr/lib/openssh/sftp-server',
    '',
  ].join('\n');
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !/^\S+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, 'latin1'));
  } catch {
    return false;
  }
}

export function isAlive(pid: number): boolean {
  return alive(pid);
}

export async function startAgentHost(o: { grammar?: string } = {}): Promise<AgentHost> {
  const dir = await mkdtemp(join(tmpdir(), 'gpu-medic-agent-'));
  const user = `gmt${Math.random().toString(36).slice(2, 8)}`;
  const client = await generateKeyPair(dir, 'worker_ssh');
  await execFileP('ssh-keygen', [
    '-q',
    '-t',
    'ed25519',
    '-N',
    '',
    '-C',
    'host',
    '-f',
    join(dir, 'ssh_host_ed25519_key'),
  ]);
  const bot = generateKeyPairSync('ed25519');
  const worker = generateKeyPairSync('ed25519');
  await writeFile(join(dir, 'bot.pub.pem'), bot.publicKey.export({ type: 'spki', format: 'pem' }));
  await writeFile(join(dir, 'worker.pub.pem'), worker.publicKey.export({ type: 'spki', format: 'pem' }));
  await writeFile(join(dir, 'env'), `AGENT='${AGENT_DIR}'\nGRAMMAR='${o.grammar ?? GRAMMAR}'\nUSER_NAME='${user}'\n`);
  const bin = join(dir, 'bin');
  await execFileP('mkdir', ['-p', bin]);
  const ranLog = join(dir, 'ran.log');
  const readsLog = join(dir, 'reads.log');
  const fake = [
    '#!/bin/sh',
    `if [ "$*" = '-q -x' ]; then echo "nvidia-smi $*" >> '${readsLog}'; exec cat '${HOST_XML}'; fi`,
    `echo "$*" >> '${ranLog}'`,
    // The test's switch (`mode` beside ran.log): fail with status 3, hang with a child, hang ignoring TERM.
    `case $(cat '${join(dir, 'mode')}' 2>/dev/null) in`,
    `  fail) echo 'NVIDIA-SMI has failed' >&2; exit 3 ;;`,
    `  slow) sleep 30 & echo $! > '${join(dir, 'child.pid')}'; wait ;;`,
    `  stubborn) trap '' TERM; sleep 30 & echo $! > '${join(dir, 'child.pid')}'; wait; wait ;;`,
    // flood: 64 MiB on stdout (a container's root can make its reads as long as it likes).
    `  flood) head -c 67108864 /dev/zero; exit 0 ;;`,
    // hold: the tool itself waits (its PID in tool.pid), so a test can freeze it.
    `  hold) echo $$ > '${join(dir, 'tool.pid')}'; exec sleep 30 ;;`,
    'esac',
    `echo '${GPU_ROW}'`,
    '',
  ];
  await writeFile(join(bin, 'nvidia-smi'), fake.join('\n'), { mode: 0o755 });
  // `pct exec <vmid> -- <argv>`: recorded, then <argv> runs here (the host plays the container).
  // `pct config <vmid>`: the container's config, as Proxmox prints it (a real one per vmid, else its error).
  const pct = [
    '#!/bin/sh',
    'if [ "$1" = config ]; then',
    `  echo "pct $*" >> '${readsLog}'`,
    '  case $2 in',
    ...Object.entries(PCT_CONFIG).map(([v, f]) => `    ${v}) exec cat '${f}' ;;`),
    `    *) echo "Configuration file 'nodes/${HOST_ID}/lxc/$2.conf' does not exist" >&2; exit 2 ;;`,
    '  esac',
    'fi',
    `echo "pct $*" >> '${ranLog}'`,
    'shift 3',
    'exec "$@"',
    '',
  ];
  await writeFile(join(bin, 'pct'), pct.join('\n'), { mode: 0o755 });
  const port = await freePort();
  await writeFile(join(dir, 'sshd_config'), stockSshdConfig(port, dir));
  const logPath = join(dir, 'sshd.log');
  const fd = openSync(logPath, 'a');
  const child = spawn(
    'unshare',
    ['-m', '--propagation', 'private', 'bash', join(AGENT_DIR, 'test', 'host-ns.sh'), dir],
    { stdio: ['ignore', fd, fd] },
  );
  closeSync(fd);
  let exited = false;
  child.once('exit', () => {
    exited = true;
  });
  const until = Date.now() + 30_000;
  while (!(await readFile(logPath, 'utf8')).includes(`Server listening on 127.0.0.1 port ${port}.`)) {
    if (exited || Date.now() > until) {
      const install = await readFile(join(dir, 'install.log'), 'utf8').catch(() => '');
      throw new Error(`the agent host did not start:\n${install}\n${await readFile(logPath, 'utf8')}`);
    }
    await sleep(50);
  }
  const sshdPid = child.pid as number; // unshare execs bash, which execs sshd: the same PID
  const holderPid = Number((await readFile(join(dir, 'holder.pid'), 'utf8')).trim());
  // The holder sits in container 129's cgroup, as a container's process does on a Proxmox host.
  const cgroups = new Map<number, string>();
  const cgroupOf = (vmid: number): string => {
    const have = cgroups.get(vmid);
    if (have !== undefined) return have;
    const made = createContainerCgroup(dir, vmid);
    if (made === null) throw new Error(`no cgroup v2 hierarchy to put a holder in lxc/${vmid}`);
    cgroups.set(vmid, made);
    return made;
  };
  await writeFile(join(cgroupOf(HOLDER_VMID), 'cgroup.procs'), String(holderPid));
  const holders = [holderPid];
  const installLog = await readFile(join(dir, 'install.log'), 'utf8');
  const inHost = (p: string) => `/proc/${sshdPid}/root${p}`;

  /** The OpenSSH client's arguments for `words` with the worker's key (or `so.identity`) on this host. */
  const sshArgv = (words: readonly string[], so: SshOptions = {}): string[] => [
    '-F',
    '/dev/null',
    '-i',
    so.identity ?? client.privateKeyPath,
    '-o',
    'IdentitiesOnly=yes',
    '-o',
    'StrictHostKeyChecking=no',
    '-o',
    'UserKnownHostsFile=/dev/null',
    '-o',
    'LogLevel=ERROR',
    '-o',
    'BatchMode=yes',
    '-p',
    String(port),
    '-l',
    so.user ?? user,
    ...(so.sshArgs ?? []),
    '127.0.0.1',
    ...words,
  ];

  return {
    dir,
    port,
    user,
    clientKey: client.privateKeyPath,
    bot,
    worker,
    holderPid,
    sshdPid,
    installLog,
    inHost,
    sshArgv,
    ssh(words, so = {}) {
      const argv = sshArgv(words, so);
      return new Promise((res, rej) => {
        const c = spawn('ssh', argv, {
          stdio: ['pipe', 'pipe', 'pipe'],
          env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...(so.env ?? {}) },
        });
        let stdout = '';
        let stderr = '';
        c.stdout.on('data', (b: Buffer) => (stdout += b.toString('utf8')));
        c.stderr.on('data', (b: Buffer) => (stderr += b.toString('utf8')));
        const timer = setTimeout(() => c.kill('SIGKILL'), so.timeoutMs ?? 20_000);
        c.once('error', rej);
        c.once('close', (code) => {
          clearTimeout(timer);
          res({ code, stdout, stderr });
        });
        c.stdin.end(so.input ?? '');
      });
    },
    async audit() {
      const text = await readFile(inHost('/var/log/gpu-medic/agent-audit.log'), 'utf8');
      return text.split('\n').filter((l) => l !== '');
    },
    async ran() {
      const text = await readFile(ranLog, 'utf8').catch(() => '');
      return text.split('\n').filter((l) => l !== '');
    },
    async newHolder(vmid = HOLDER_VMID) {
      // In the host's mount namespace (its /dev/nvidia0), detached, like the first holder.
      const c = spawn(
        'nsenter',
        ['-t', String(sshdPid), '-m', '--', 'sh', '-c', 'exec 3</dev/nvidia0; exec sleep 600'],
        { stdio: 'ignore', detached: true },
      );
      c.unref();
      const pid = c.pid as number;
      holders.push(pid);
      // Wait until it is sleep holding the device, then move it into the container's cgroup.
      for (let i = 0; i < 200; i++) {
        const comm = await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '');
        if (comm.trim() === 'sleep') break;
        await sleep(10);
      }
      await writeFile(join(cgroupOf(vmid), 'cgroup.procs'), String(pid));
      return identity(pid);
    },
    async reads() {
      const text = await readFile(readsLog, 'utf8').catch(() => '');
      return text.split('\n').filter((l) => l !== '');
    },
    sshdLog: () => readFile(logPath, 'utf8'),
    async stop() {
      for (const p of [...holders, sshdPid]) {
        try {
          process.kill(p, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      const end = Date.now() + 5000;
      while ((alive(sshdPid) || holders.some(alive)) && Date.now() < end) await sleep(20);
      for (const c of cgroups.values()) removeContainerCgroup(c);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** argv run as root inside the host's mount namespace (its overlays of /etc, /usr/local, /var): exit status and output. */
export async function inHostNs(host: AgentHost, argv: readonly string[]): Promise<{ code: number; out: string }> {
  try {
    const r = await execFileP('nsenter', ['-t', String(host.sshdPid), '-m', '--', ...argv]);
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, out: x.stdout + x.stderr };
  }
}

/** The real agent/install.sh run on the host, inside its mount namespace, as an admin would. */
export function hostInstall(host: AgentHost, ...args: string[]) {
  return inHostNs(host, ['sh', join(AGENT_DIR, 'install.sh'), ...args]);
}

/**
 * A tmpfs over /root and one over /home in the host's mount namespace only (it is private): tests of root's
 * authorized_keys then write there, never to the machine's own /root.
 */
export async function privateRootHome(host: AgentHost): Promise<void> {
  const r = await inHostNs(host, ['mount', '-t', 'tmpfs', '-o', 'mode=0700,size=1m', 'gpu-medic-test-root', '/root']);
  if (r.code !== 0) throw new Error(`cannot mount a private /root: ${r.out}`);
  // The accounts a test makes get their homes here too, never in the machine's own /home.
  const h = await inHostNs(host, ['mount', '-t', 'tmpfs', '-o', 'mode=0755,size=4m', 'gpu-medic-test-home', '/home']);
  if (h.code !== 0) throw new Error(`cannot mount a private /home: ${h.out}`);
}
