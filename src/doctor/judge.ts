import { AGENT_VERSION } from '../agent-grammar/arg-types.ts';
import type { ErrorCode } from '../errors.ts';
import { detectNvidiaError } from '../gpu/parse/detect-nvidia-error.ts';
import { AGENT_PROBES, type ProbeName } from '../agent-grammar/templates/doctor-probes.ts';
import { judgeRootKeys, parseRootKeys } from './root-keys.ts';

/**
 * The doctor's judgement: a pure function of what the fixed probes printed. Every problem names
 * the machine, says what was seen, and carries one fix hint. `fail` means unstick would fail or
 * act on the wrong thing there; `warn` means it works with a caveat.
 */

/** One probe's result: it ran (any exit), or it could not run (SSH refused, unreachable, ...). */
export type ProbeRun =
  | { ran: true; code: number | null; signal: string | null; stdout: string; stderr: string; timedOut: boolean }
  | { ran: false; code: ErrorCode; message: string };

export interface Login {
  via: 'ssh' | 'pct';
  user: string;
  /** `root@10.0.0.5:22`, or `pct exec 129 on kpro5`. */
  where: string;
}

/** The forced-key probes' results (src/agent-grammar/templates/doctor-probes.ts AGENT_PROBES); null: the worker does not speak to agents here. */
export interface AgentReading {
  version: ProbeRun;
  unknownVerb: ProbeRun;
  shell: ProbeRun;
}

/**
 * The agent's `root-keys` read (root's authorized_keys and authorized_keys2) and the worker's own public
 * key, whose lines there the doctor looks for; null or absent: not read (root-shell access, or a
 * container reached through pct exec, where the worker's key does not log in).
 */
export interface RootKeysReading {
  run: ProbeRun;
  /** The worker's public key blob (base64, as authorized_keys has it), from its private key; or why not. */
  worker: { type: string; blob: string } | { error: string };
}

export interface HostReading {
  kind: 'host';
  machineId: string;
  login: Login;
  probes: Partial<Record<ProbeName, ProbeRun>>;
  agent?: AgentReading | null;
  rootKeys?: RootKeysReading | null;
  /** One per inventory container of this host: its init's PID (lxc-info) and that PID's namespace. */
  inits: Array<{ containerId: string; vmid: number; lxcInfo: ProbeRun | null; ns: ProbeRun | null }>;
  /** The clock probe's answer and when (the worker's ms since the epoch) it was sent and came back. */
  clock?: { sentAt: number; answeredAt: number } | undefined;
}

export interface ContainerReading {
  kind: 'container';
  machineId: string;
  hostId: string;
  vmid: number;
  login: Login;
  probes: Partial<Record<ProbeName, ProbeRun>>;
  agent?: AgentReading | null;
  rootKeys?: RootKeysReading | null;
}

export type MachineReading = HostReading | ContainerReading;

export type CheckStatus = 'ok' | 'warn' | 'fail' | 'skip';

export const CHECKS = [
  'ssh',
  'timeout -k',
  'nvidia-smi',
  'persistence',
  'fuser',
  'pidfd kill',
  '/proc',
  'pct',
  'lxc-info',
  'pid namespace',
  'GPU UUIDs',
  'agent',
  'forced key',
  'root keys',
  'clock',
] as const;
export type CheckName = (typeof CHECKS)[number];

export interface Finding {
  machineId: string;
  kind: 'host' | 'container';
  check: CheckName;
  status: CheckStatus;
  /** What was seen, one line; machine text is cleaned (one line, bounded) but not escaped for any markup. */
  detail: string;
  /** What to do about it; null when there is nothing to do. */
  hint: string | null;
}

export interface DoctorReport {
  findings: Finding[];
  failed: number;
  warned: number;
}

/** Longest detail a finding carries (a table cell, not a log). */
export const DETAIL_MAX = 240;

/** Machine text as one bounded line: control characters out, whitespace folded. */
function oneLine(text: string, max = 160): string {
  const clean = text
    .replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, '')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '')
    .join(' | ')
    .replace(/\s+/g, ' ');
  return clean.length > max ? `${clean.slice(0, max - 1)}…` : clean;
}

type Ran = Extract<ProbeRun, { ran: true }>;

const said = (r: Ran): string => oneLine(`${r.stderr}\n${r.stdout}`) || 'no output';

function exitText(r: Ran): string {
  if (r.timedOut) return 'timed out';
  if (r.signal !== null) return `killed by ${r.signal}`;
  return `exit ${r.code ?? '?'}`;
}

const okRun = (r: ProbeRun | undefined | null): r is Ran => r?.ran === true && r.code === 0 && !r.timedOut;
/** 127: the shell, `timeout`, nsenter or lxc-attach found no such program. */
const notFound = (r: ProbeRun | undefined | null): boolean => r?.ran === true && r.code === 127;

/**
 * `timeout` itself is missing: the shell or the container attach could not run it (not `timeout` failing to
 * run its command). lxc-attach (`pct exec`) execs without a shell and says `No such file or directory - Failed to exec "timeout"`.
 */
function timeoutMissing(r: Ran): boolean {
  const text = `${r.stderr}\n${r.stdout}`;
  return (
    r.code === 127 &&
    (/\btimeout\b[^\n]*(not found|No such file)/.test(text) || /Failed to exec "timeout"/.test(text)) &&
    !/failed to run command/.test(text)
  );
}

function failedRun(r: ProbeRun | undefined | null, tool: string): string {
  if (r === undefined || r === null) return `${tool} was not run`;
  if (!r.ran) return oneLine(r.message);
  if (notFound(r)) return `${tool} not found (${said(r)})`;
  return `${tool}: ${exitText(r)}: ${said(r)}`;
}

const SSH_HINTS: Record<string, string> = {
  host_key_mismatch:
    'If the machine was reinstalled, check its new key out of band (console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and replace hostKeys in the inventory; otherwise treat it as an attack.',
  host_key_unpinned:
    'Pin the host key: run `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the machine (console) and put the SHA256: value in its hostKeys.',
  auth_failed: "Add the worker's public key to the login user's ~/.ssh/authorized_keys on this machine.",
  connect_timeout:
    'Check that the machine is up and its SSH port is reachable from the worker (firewall, address, port).',
  connect_failed: 'Check address and port in the inventory and that sshd runs on the machine.',
  connection_lost: 'The connection dropped: check the machine and the network, then run doctor again.',
  config_invalid: 'Check keyFile in the inventory: the worker must be able to read an unencrypted private key there.',
  agent_refused: `Install or upgrade gpu-medic-agent ${AGENT_VERSION} on this machine (agent/install.sh, docs/deploy.md).`,
};

const VERSION_LINE = /^gpu-medic-agent (\d+)\.(\d+)\.(\d+) protocol (\d+)$/m;

/** -1, 0, 1 as a is older than, the same as, newer than b (`x.y.z`). */
function compareVersions(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < 3; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

const INSTALL_HINT = `Install gpu-medic-agent ${AGENT_VERSION} with its forced-command key (agent/install.sh install, docs/deploy.md), or set GPU_MEDIC_SSH_ACCESS=root-shell to keep the old way (config check says what it gives up).`;

/**
 * The agent and the key, checked because the worker's key must run the agent alone and never a shell: the
 * agent's version against the one this worker needs, a verb no agent has refused (exit 126 and the agent's
 * `refused:` line), and `true` not run. A key that runs `true` (exit 0, no output) still opens a shell: a
 * stolen worker key is a root shell there.
 */
function judgeAgent(a: AgentReading, f: Findings): void {
  const v = a.version;
  const m = v.ran && v.code === 0 ? VERSION_LINE.exec(v.stdout) : null;
  if (!v.ran) f.add('agent', 'fail', oneLine(v.message, 240), INSTALL_HINT);
  else if (m === null)
    f.add(
      'agent',
      'fail',
      `no gpu-medic-agent answered \`${AGENT_PROBES.version}\` (${exitText(v)}: ${said(v)})`,
      INSTALL_HINT,
    );
  else {
    const have = [Number(m[1]), Number(m[2]), Number(m[3])];
    const need = AGENT_VERSION.split('.').map(Number);
    const ver = have.join('.');
    if (compareVersions(have, need) < 0)
      f.add(
        'agent',
        'fail',
        `gpu-medic-agent ${ver} is older than the ${AGENT_VERSION} this worker needs: reads it knows still work, newer verbs are refused`,
        `Upgrade it: agent/install.sh upgrade on this machine (docs/deploy.md).`,
      );
    else f.add('agent', 'ok', `gpu-medic-agent ${ver} (protocol ${m[4]}; this worker needs ${AGENT_VERSION})`);
  }
  const u = a.unknownVerb;
  const refused = u.ran && u.code === 126 && /^gpu-medic-agent: refused: /m.test(u.stderr);
  const s = a.shell;
  const shellRan = s.ran && s.code === 0 && !s.timedOut && s.stdout === '' && s.stderr === '';
  if (shellRan)
    f.add(
      'forced key',
      'fail',
      "`true` ran: the worker's key still opens a shell here (a stolen key is a shell on this machine)",
      "Log in with the agent's account and forced-command key only (agent/install.sh install), and remove the worker key from root's authorized_keys (on a Proxmox cluster: /etc/pve/priv/authorized_keys).",
    );
  else if (!refused)
    f.add(
      'forced key',
      'fail',
      `a verb no agent has was not refused as the agent refuses (${u.ran ? `${exitText(u)}: ${said(u)}` : oneLine(u.message)})`,
      INSTALL_HINT,
    );
  else
    f.add(
      'forced key',
      'ok',
      `forced to the agent: an unknown verb is refused, \`true\` does not run (${s.ran ? exitText(s) : 'refused'})`,
    );
}

interface NvidiaRow {
  index: number;
  uuid: string;
  driver: string;
  persistence: string;
}

function nvidiaRows(r: Ran): NvidiaRow[] {
  const rows: NvidiaRow[] = [];
  for (const line of r.stdout.split('\n')) {
    const cells = line.split(',').map((c) => c.trim());
    const [index, uuid, driver, persistence] = cells;
    if (
      cells.length !== 4 ||
      index === undefined ||
      !/^\d+$/.test(index) ||
      uuid === undefined ||
      !/^GPU-[0-9a-fA-F-]+$/.test(uuid)
    )
      continue;
    rows.push({ index: Number(index), uuid, driver: driver ?? '?', persistence: persistence ?? '?' });
  }
  return rows;
}

/** The GPUs this machine's nvidia-smi listed, or null when it did not answer usefully. */
function gpusOf(probes: Partial<Record<ProbeName, ProbeRun>>): NvidiaRow[] | null {
  const r = probes.nvidia;
  if (r === undefined || !r.ran || r.timedOut) return null;
  const rows = nvidiaRows(r);
  return rows.length > 0 ? rows : null;
}

class Findings {
  readonly list: Finding[] = [];
  constructor(
    private readonly machineId: string,
    private readonly kind: 'host' | 'container',
  ) {}
  add(check: CheckName, status: CheckStatus, detail: string, hint: string | null = null): void {
    this.list.push({
      machineId: this.machineId,
      kind: this.kind,
      check,
      status,
      detail: oneLine(detail, DETAIL_MAX),
      hint,
    });
  }
  skipAll(checks: readonly CheckName[], why: string): void {
    for (const c of checks) this.add(c, 'skip', why);
  }
}

const HOST_CHECKS: readonly CheckName[] = [
  'timeout -k',
  'nvidia-smi',
  'persistence',
  'pidfd kill',
  '/proc',
  'pct',
  'lxc-info',
  'clock',
];
const CONTAINER_CHECKS: readonly CheckName[] = [
  'timeout -k',
  'nvidia-smi',
  'fuser',
  'pidfd kill',
  '/proc',
  'pid namespace',
  'GPU UUIDs',
];

/** ssh and timeout: whether anything else could be looked at. Returns false when the rest is skipped. */
function judgeLogin(m: MachineReading, f: Findings): boolean {
  const rest = (m.kind === 'host' ? HOST_CHECKS : CONTAINER_CHECKS).filter((c) => c !== 'timeout -k');
  const u = m.probes.uname;
  if (u === undefined || !u.ran) {
    const code = u === undefined ? 'internal' : u.code;
    f.add(
      'ssh',
      'fail',
      u === undefined ? 'not attempted' : oneLine(u.message, 240),
      SSH_HINTS[code] ?? 'Check the machine and its inventory entry.',
    );
    f.skipAll(['timeout -k', ...rest], 'not checked: no login');
    return false;
  }
  f.add('ssh', 'ok', `${m.login.where} (pinned host key)`);
  if (u.code === 0 && !u.timedOut) {
    f.add('timeout -k', 'ok', `works; kernel ${oneLine(u.stdout, 40)}`);
    return true;
  }
  if (timeoutMissing(u)) {
    f.add(
      'timeout -k',
      'fail',
      `timeout not found (${said(u)})`,
      'Install GNU coreutils (it provides timeout): gpu-medic bounds every command with `timeout -k`.',
    );
  } else if (u.code === 125) {
    f.add(
      'timeout -k',
      'fail',
      `timeout refused -k: ${said(u)}`,
      "Install GNU coreutils' timeout (a minimal one such as busybox's may lack -k).",
    );
  } else {
    f.add(
      'timeout -k',
      'fail',
      `uname under timeout -k: ${exitText(u)}: ${said(u)}`,
      'Run `timeout -k 1 5 uname -r` on the machine as the login user and fix what it says.',
    );
  }
  f.skipAll(rest, 'not checked: every gpu-medic command runs under timeout -k');
  return false;
}

function judgeNvidia(m: MachineReading, f: Findings): NvidiaRow[] | null {
  const r = m.probes.nvidia;
  const rows = gpusOf(m.probes);
  const error = r?.ran ? detectNvidiaError(`${r.stdout}\n${r.stderr}`) : null;
  const where = m.kind === 'host' ? 'host' : 'container';
  if (rows !== null) {
    const drivers = [...new Set(rows.map((x) => x.driver))].join(', ');
    if (error !== null)
      f.add(
        'nvidia-smi',
        'warn',
        `driver ${drivers}, ${rows.length} GPUs listed; also: ${oneLine(error.message)}`,
        'A GPU reports an error: see `/gpu status` for it; a lost GPU usually needs a host reboot.',
      );
    else f.add('nvidia-smi', 'ok', `driver ${drivers}, ${rows.length} GPU${rows.length === 1 ? '' : 's'}`);
    return rows;
  }
  if (notFound(r)) {
    f.add(
      'nvidia-smi',
      'fail',
      `nvidia-smi not found`,
      where === 'host'
        ? 'Install the NVIDIA driver utilities on the host.'
        : "Put the host driver's nvidia-smi (same version) in the container, or bind-mount it from the host.",
    );
    return null;
  }
  const hint =
    error?.kind === 'nvml_version_mismatch'
      ? 'Driver and library versions differ (an upgrade without reboot): reboot the host or reload the nvidia kernel module.'
      : error?.kind === 'driver_unreachable'
        ? 'The NVIDIA kernel driver is not loaded or not reachable: check `dmesg` and `modprobe nvidia` on the host.'
        : error?.kind === 'no_devices' && where === 'container'
          ? 'No GPU is passed into this container: check its devN:/lxc.mount.entry lines for /dev/nvidia* on the host.'
          : 'Run the same nvidia-smi on the machine and fix what it says.';
  f.add('nvidia-smi', 'fail', error !== null ? oneLine(error.message) : failedRun(r, 'nvidia-smi'), hint);
  return null;
}

function judgePidfd(m: MachineReading, f: Findings): void {
  const perl = m.probes.perl;
  const py = m.probes.python3;
  const works = (r: ProbeRun | undefined): boolean => okRun(r) && r.stdout.includes('pidfd ok');
  const ok = [works(perl) ? 'perl' : null, works(py) ? 'python3' : null].filter((x): x is string => x !== null);
  if (ok.length > 0) {
    f.add('pidfd kill', 'ok', `pidfd_open works with ${ok.join(' and ')}`);
    return;
  }
  const why = (r: ProbeRun | undefined, tool: string): string => (works(r) ? '' : failedRun(r, tool));
  f.add(
    'pidfd kill',
    'fail',
    `${why(perl, 'perl')}; ${why(py, 'python3')}`,
    `Install perl (or python3 >= 3.9) on this ${m.kind}: gpu-medic signals a process only through a pidfd pinned to its PID and start time (Linux >= 5.3).`,
  );
}

function judgeProc(m: MachineReading, f: Findings): void {
  const r = m.probes.proc;
  if (!okRun(r)) {
    f.add('/proc', 'fail', failedRun(r, 'sh'), 'Check that sh, id, cat and grep run for the login user.');
    return;
  }
  const uid = /^uid (\d+)$/m.exec(r.stdout)?.[1];
  const hidden = /^pid1 hidden$/m.test(r.stdout);
  const mount = /^mount (.*)$/m.exec(r.stdout)?.[1] ?? '';
  const hidepid = /hidepid=([^,\s]+)/.exec(mount)?.[1] ?? null;
  const opts = hidepid === null ? '' : ` (/proc mounted with hidepid=${hidepid})`;
  if (uid === undefined) {
    f.add('/proc', 'fail', `could not tell the login's uid: ${said(r)}`, 'Check that `id -u` runs for the login user.');
    return;
  }
  if (uid === '0') {
    f.add('/proc', 'ok', `root: every process is visible${opts}`);
    return;
  }
  if (hidden) {
    f.add(
      '/proc',
      'fail',
      `uid ${uid} cannot read another user's /proc entries${opts}: holders of other users are invisible`,
      'Log in as root, or remount /proc with hidepid=0 (or gid= a group the login user is in).',
    );
    return;
  }
  if (m.kind === 'host') {
    f.add(
      '/proc',
      'fail',
      `login is uid ${uid}, not root: host-level kills and /proc/PID/ns reads of other users fail`,
      'Log in to hosts as root (host-level steps signal processes of every user).',
    );
    return;
  }
  // Behind the agent the login is its own account (a stolen key runs the agent, not a shell), and what runs runs
  // as the agent makes it.
  if (m.agent) {
    f.add('/proc', 'ok', `uid ${uid} through gpu-medic-agent${opts}`);
    return;
  }
  f.add(
    '/proc',
    'warn',
    `login is uid ${uid}, not root: fuser shows only this user's open device files`,
    "Log in as root in the container, so other users' GPU holders are seen by fuser.",
  );
}

function pctVmids(r: Ran): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of r.stdout.split('\n')) {
    const m = /^\s*(\d+)\s+(\S+)/.exec(line);
    if (m?.[1] !== undefined && m[2] !== undefined) out.set(Number(m[1]), m[2]);
  }
  return out;
}

/** How far a host's clock may be from the worker's before the doctor says so, and past which the agent refuses what the bot signed. */
const CLOCK_WARN_MS = 5000;
const CLOCK_FAIL_MS = 60_000;

/**
 * The host's clock against the worker's, read at the middle of the probe's round trip (± half of it).
 * The agent refuses a request or decision signed more than 60 s ahead of its own clock, and judges
 * every expiry by it: a host far behind refuses every destructive step, one far ahead accepts stale ones.
 */
function judgeClock(m: HostReading, f: Findings): void {
  const run = m.probes.clock;
  const t = m.clock;
  if (run === undefined || t === undefined) {
    f.add('clock', 'skip', 'not checked');
    return;
  }
  const secs = run.ran && run.code === 0 ? /^(\d{9,11})(?:\.(\d{1,9}))?\s*$/.exec(run.stdout) : null;
  if (secs === null) {
    f.add(
      'clock',
      'warn',
      `could not read the host's clock (${run.ran ? said(run) : oneLine(run.message, 120)})`,
      'Check that `date` runs on the host.',
    );
    return;
  }
  const hostMs = Number(secs[1]) * 1000 + Math.floor(Number(`0.${secs[2] ?? '0'}`) * 1000);
  const offset = hostMs - (t.sentAt + t.answeredAt) / 2;
  const within = Math.max(1, Math.round((t.answeredAt - t.sentAt) / 2));
  const s = (ms: number) => `${ms >= 0 ? '+' : '-'}${(Math.abs(ms) / 1000).toFixed(1)} s`;
  const detail = `offset ${s(offset)} (±${(within / 1000).toFixed(1)} s) from the worker's clock`;
  const size = Math.abs(offset) - within;
  const hint =
    'Run time sync on the host (chrony or systemd-timesyncd) and on the bot and worker machines: the agent judges every signed time by its own clock.';
  if (size <= CLOCK_WARN_MS) f.add('clock', 'ok', detail);
  else if (size <= CLOCK_FAIL_MS) f.add('clock', 'warn', detail, hint);
  else
    f.add(
      'clock',
      'fail',
      `${detail}: ${offset < 0 ? "the bot's signatures look more than 60 s in the future here, so this host's agent refuses every destructive step" : 'this host judges expiries more than a minute late'}`,
      hint,
    );
}

function judgeHost(m: HostReading, f: Findings): void {
  judgeClock(m, f);
  const rows = judgeNvidia(m, f);
  if (rows === null) f.add('persistence', 'skip', 'not checked: nvidia-smi did not answer');
  else {
    const on = rows.filter((g) => /^enabled$/i.test(g.persistence)).map((g) => g.index);
    if (on.length === 0) f.add('persistence', 'ok', 'off on every GPU');
    else
      f.add(
        'persistence',
        'warn',
        `on for GPU ${on.join(', ')}`,
        "A host-level reset is refused while it is on: gpu-medic's reset step turns it off first (nvidia-smi -pm 0); if nvidia-persistenced runs, it holds the GPU too.",
      );
  }
  judgePidfd(m, f);
  judgeProc(m, f);
  const pct = m.probes.pct;
  if (okRun(pct)) {
    const vmids = pctVmids(pct);
    const missing = m.inits.filter((c) => !vmids.has(c.vmid));
    const stopped = m.inits.filter((c) => vmids.has(c.vmid) && vmids.get(c.vmid) !== 'running');
    if (missing.length > 0)
      f.add(
        'pct',
        'fail',
        `not on this host: ${missing.map((c) => `${c.containerId} (vmid ${c.vmid})`).join(', ')}`,
        'Fix host and vmid of those containers in the inventory (`pct list` on the host shows its vmids).',
      );
    else if (stopped.length > 0)
      f.add(
        'pct',
        'warn',
        `stopped: ${stopped.map((c) => `${c.containerId} (vmid ${c.vmid})`).join(', ')}`,
        'Start them, or expect unstick to refuse them.',
      );
    else
      f.add(
        'pct',
        'ok',
        `${vmids.size} container${vmids.size === 1 ? '' : 's'} listed, every inventory container of this host among them`,
      );
  } else {
    f.add(
      'pct',
      'fail',
      failedRun(pct, 'pct'),
      'gpu-medic reaches containers and runs host-level steps with `pct exec`: hosts must be Proxmox VE hosts with pct on the PATH.',
    );
  }
  if (m.inits.length === 0) {
    f.add('lxc-info', 'skip', 'no container of the inventory on this host');
    return;
  }
  const broken = m.inits.find((c) => notFound(c.lxcInfo) || c.lxcInfo === null || !c.lxcInfo.ran);
  if (broken) {
    f.add(
      'lxc-info',
      'fail',
      failedRun(broken.lxcInfo, 'lxc-info'),
      "Install lxc-info (Proxmox: pve-lxc): it names the host PID of a container's init, against which logins are checked.",
    );
    return;
  }
  const parts = m.inits.map((c) => {
    const pid = c.lxcInfo !== null && okRun(c.lxcInfo) ? initPidOf(c.lxcInfo) : null;
    return pid === null ? `${c.vmid}: no init PID (not running?)` : `${c.vmid} → init PID ${pid}`;
  });
  const anyMissing = m.inits.some((c) => c.lxcInfo === null || !okRun(c.lxcInfo) || initPidOf(c.lxcInfo) === null);
  f.add(
    'lxc-info',
    anyMissing ? 'warn' : 'ok',
    parts.join(', '),
    anyMissing ? 'A container without an init PID is not running: start it, or fix its vmid.' : null,
  );
}

/**
 * Root's own key lines, as the agent read them (never by logging in as root): a line holding the worker's
 * key without the agent's forced command is a root shell for whoever steals that key.
 */
function judgeRootLines(m: MachineReading, r: RootKeysReading, f: Findings): void {
  if ('error' in r.worker) {
    f.add(
      'root keys',
      'warn',
      `not checked: the worker's public key could not be had (${oneLine(r.worker.error, 120)})`,
      SSH_HINTS.config_invalid ?? null,
    );
    return;
  }
  const run: ProbeRun = r.run;
  if (!run.ran || run.code !== 0 || run.timedOut) {
    const refused = run.ran && run.code === 126 && /refused: unknown verb root-keys/.test(run.stderr);
    f.add(
      'root keys',
      'warn',
      refused
        ? "not checked: this agent has no root-keys read (older than this worker's)"
        : `not checked: ${failedRun(run, 'root-keys')}`,
      refused
        ? `Upgrade the agent (agent/install.sh upgrade) to ${AGENT_VERSION}; meanwhile \`sh install.sh status\` as root lists root's lines holding the worker's key.`
        : "Run `sh install.sh status` as root on the machine: it lists root's lines holding the worker's key.",
    );
    return;
  }
  const v = judgeRootKeys(parseRootKeys(run.stdout, r.worker.blob), m.login.user);
  f.add('root keys', v.status, v.detail, v.hint);
}

/** `lxc-info -p -H` prints the bare PID; the labelled form (`PID: 4242`) is accepted too. */
export function initPidOf(r: Ran): number | null {
  const m = /^(?:PID:\s*)?(\d+)\s*$/m.exec(r.stdout);
  const n = m?.[1] === undefined ? NaN : Number(m[1]);
  return Number.isInteger(n) && n > 0 ? n : null;
}

const NS = /^pid:\[\d+\]$/;

function judgeContainer(m: ContainerReading, host: HostReading | undefined, f: Findings): void {
  const rows = judgeNvidia(m, f);
  const fuser = m.probes.fuser;
  if (okRun(fuser)) f.add('fuser', 'ok', oneLine(`${fuser.stderr}\n${fuser.stdout}`).split(' | ')[0] ?? 'present');
  else
    f.add(
      'fuser',
      'fail',
      failedRun(fuser, 'fuser'),
      'Install psmisc in the container (apt install psmisc): fuser finds the GPU holders by container PID.',
    );
  judgePidfd(m, f);
  judgeProc(m, f);

  // The namespace the login lands in, against the one lxc-info says this vmid's init lives in.
  const ns = m.probes.ns;
  const init = host?.inits.find((c) => c.vmid === m.vmid);
  const hostNs = init?.ns;
  const hostUnread =
    host === undefined || !okRun(host.probes.uname) ? `not compared: host ${m.hostId} could not be read` : null;
  if (!okRun(ns) || !NS.test(ns.stdout.trim())) {
    f.add('pid namespace', 'fail', failedRun(ns, 'readlink'), 'Check that readlink (coreutils) runs in the container.');
  } else if (hostUnread !== null) {
    f.add('pid namespace', 'skip', hostUnread);
  } else if (init === undefined || init.lxcInfo === null || !okRun(init.lxcInfo) || initPidOf(init.lxcInfo) === null) {
    f.add('pid namespace', 'skip', `not compared: lxc-info on ${m.hostId} gave no init PID for vmid ${m.vmid}`);
  } else if (!okRun(hostNs) || !NS.test(hostNs.stdout.trim())) {
    f.add('pid namespace', 'skip', `not compared: ${failedRun(hostNs, 'readlink')} on ${m.hostId}`);
  } else if (ns.stdout.trim() === hostNs.stdout.trim()) {
    f.add(
      'pid namespace',
      'ok',
      `${m.login.via === 'ssh' ? 'login' : 'pct exec'} lands in ${ns.stdout.trim()}, the namespace of vmid ${m.vmid}'s init`,
    );
  } else {
    f.add(
      'pid namespace',
      'fail',
      `${m.login.where} lands in ${ns.stdout.trim()}, but vmid ${m.vmid}'s init (PID ${initPidOf(init.lxcInfo) ?? '?'} on ${m.hostId}) is in ${hostNs.stdout.trim()}: this login is another machine`,
      `Fix address/port (and hostKeys) of ${m.machineId} in the inventory, or its vmid: unstick would read and signal processes of the wrong container.`,
    );
  }

  const hostGpus = host === undefined ? null : gpusOf(host.probes);
  if (rows === null) f.add('GPU UUIDs', 'skip', 'not compared: nvidia-smi in the container did not answer');
  else if (hostGpus === null) f.add('GPU UUIDs', 'skip', `not compared: nvidia-smi on ${m.hostId} did not answer`);
  else {
    const byUuid = new Map(hostGpus.map((g) => [g.uuid.toLowerCase(), g.index]));
    const foreign = rows.filter((g) => !byUuid.has(g.uuid.toLowerCase()));
    if (foreign.length > 0)
      f.add(
        'GPU UUIDs',
        'fail',
        `container GPU ${foreign.map((g) => `${g.index} (${g.uuid})`).join(', ')} not on ${m.hostId}`,
        `This container's GPUs are not ${m.hostId}'s: fix its host in the inventory (or its address, if the login is another machine).`,
      );
    else {
      const map = rows.map((g) => `${g.index}→${byUuid.get(g.uuid.toLowerCase()) ?? '?'}`).join(' ');
      f.add('GPU UUIDs', 'ok', `all ${rows.length} on ${m.hostId} (container→host index ${map})`);
    }
  }
}

/** The whole report: hosts first, then containers, each machine's checks in a fixed order. */
export function judge(readings: readonly MachineReading[]): DoctorReport {
  const hosts = new Map(readings.filter((r): r is HostReading => r.kind === 'host').map((h) => [h.machineId, h]));
  const findings: Finding[] = [];
  for (const m of [...readings].sort((a, b) => (a.kind === b.kind ? 0 : a.kind === 'host' ? -1 : 1))) {
    const f = new Findings(m.machineId, m.kind);
    if (m.agent) judgeAgent(m.agent, f);
    if (judgeLogin(m, f)) {
      if (m.rootKeys) judgeRootLines(m, m.rootKeys, f);
      if (m.kind === 'host') judgeHost(m, f);
      else judgeContainer(m, hosts.get(m.hostId), f);
    } else if (m.rootKeys) f.add('root keys', 'skip', 'not checked: nothing runs here');
    findings.push(...f.list);
  }
  return {
    findings,
    failed: findings.filter((x) => x.status === 'fail').length,
    warned: findings.filter((x) => x.status === 'warn').length,
  };
}
