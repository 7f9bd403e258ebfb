/**
 * A real OpenSSH sshd on 127.0.0.1 for tests. Every remote command goes through a
 * ForceCommand wrapper that sets PATH/env (a client-sent PATH is overwritten by sshd, and
 * `SetEnv PATH` loses to root's .bashrc), appends `{ts, cmd}` to the command log, then
 * `exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"`.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, open, readFile, readdir, readlink, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { publicKeyLineFingerprint } from '../../src/ssh/host-key.ts';
import { shellQuote } from '../../src/text/shell-quote.ts';

const execFileP = promisify(execFile);

export interface SshdOptions {
  /** Work dir for config, keys, logs (created if missing). */
  dir: string;
  /** Public key lines accepted for login (any user, root included). */
  authorizedKeys: string[];
  /** Dir put FIRST on PATH for remote commands (fake tools). */
  pathPrefix?: string;
  /** What follows `pathPrefix` on PATH; default the standard system dirs. */
  basePath?: string;
  /** Extra env for remote commands. */
  env?: Record<string, string>;
  /** Reuse a host key (default: generate ed25519 in `dir`). Its mode is set to 0600. */
  hostKeyPath?: string;
  /** Default: a free port. */
  port?: number;
  /** File each remote command line is appended to, one JSON line `{ts, cmd}` (ts: ISO time). Default `<dir>/commands.jsonl`. */
  commandLog?: string;
  /** sshd's MaxSessions, sessions per connection (default 10, OpenSSH's own default). */
  maxSessions?: number;
  /**
   * A machine reached only through gpu-medic-agent (a least-privilege host). sshd then runs the
   * distribution's own
   * `sshd_config` (STOCK_SSHD_CONFIG) with no ForceCommand, no wrapper and forwarding at its
   * defaults, preceded only by this instance's port, address, host key and pid file: every
   * restriction must come from what the agent's install script wrote (the account, its
   * `authorized_keys` line, the sudoers entry). It runs in a private mount namespace where each
   * `binds` source is bound over its target (the install paths, so nothing is installed on this
   * machine itself), after `setup` (shell lines, e.g. the install script) ran in that namespace.
   * `authorizedKeys`, `pathPrefix`, `basePath`, `env` do not apply (the agent's config sets its PATH);
   * `commandLog` is the file the agent's own command log writes.
   */
  agent?: { binds: ReadonlyArray<{ from: string; to: string }>; setup: readonly string[] };
  /**
   * How long sshd may take to listen, default 30 s. With `agent`, counted from the end of `setup`:
   * a fleet's installs may wait on one lock (agent-install.lock: one at a time until the account
   * exists), which is not sshd being slow (`SETUP_LIMIT_MS`).
   */
  readyTimeoutMs?: number;
}

/** What an agent-mode sshd's log says once `setup` ran (inOwnMounts). */
const SETUP_DONE = 'gpu-medic test sshd: setup done';
/** The most `setup` may take, waiting included: 200 installs one at a time (a fresh machine) on a loaded 2-core machine. */
const SETUP_LIMIT_MS = 30 * 60_000;

/** Debian's shipped sshd_config (what a fresh install has as /etc/ssh/sshd_config). */
const STOCK_SSHD_CONFIG = ['/usr/share/openssh/sshd_config', '/etc/ssh/sshd_config'];

export interface Sshd {
  port: number;
  pid: number;
  hostKeyPath: string;
  /** `SHA256:...` as `ssh-keygen -l` prints it. */
  hostKeyFingerprint: string;
  /** The command log in use (see SshdOptions.commandLog). */
  commandLog: string;
  /** sshd's own log (`-e` output, LogLevel VERBOSE): one `Accepted publickey` line per login. */
  logPath: string;
  /** Parsed command log, oldest first; [] when nothing ran. */
  commands(): Promise<Array<{ ts: string; cmd: string }>>;
  /** Number of successful logins so far (from the sshd log). */
  loginCount(): Promise<number>;
  /** Pids of processes under the listener (per-connection sshd and what they run). */
  descendants(): Promise<number[]>;
  /**
   * Kills (SIGKILL, by PID) the listener, everything under it, and processes its sessions left
   * behind (found by the wrapper's env tag / cmdline), and waits for them to be gone.
   * `treeOnly: true` spares processes no longer under the listener (e.g. deliberately detached).
   */
  stop(options?: { treeOnly?: boolean }): Promise<void>;
}

/** Exported by the wrapper to every remote command, so stop() can find orphans too. */
const TAG_VAR = 'GPU_MEDIC_TEST_SSHD';
const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const SSHD = '/usr/sbin/sshd';

// Last-resort cleanup if a test process dies without running its afterAll.
const live = new Set<number>();
let exitHookInstalled = false;
function track(pid: number): void {
  live.add(pid);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const p of live) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });
}

export async function generateKeyPair(
  dir: string,
  name: string,
): Promise<{ privateKeyPath: string; publicKey: string; fingerprint: string }> {
  await mkdir(dir, { recursive: true });
  const privateKeyPath = resolve(dir, name);
  await rm(privateKeyPath, { force: true });
  await rm(`${privateKeyPath}.pub`, { force: true });
  await execFileP('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', name, '-f', privateKeyPath]);
  const publicKey = (await readFile(`${privateKeyPath}.pub`, 'utf8')).trim();
  return { privateKeyPath, publicKey, fingerprint: publicKeyLineFingerprint(publicKey) };
}

/** A free loopback port (listen on 0, read it, close). */
export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr !== null ? addr.port : 0;
      srv.close(() => res(port));
    });
  });
}

/** awk, not node, per command: fast, and byte-exact JSON escaping of the command line. */
const JSON_LOG_AWK = String.raw`BEGIN {
  for (i = 1; i < 32; i++) esc[sprintf("%c", i)] = sprintf("\\u%04x", i)
  esc["\n"] = "\\n"; esc["\t"] = "\\t"; esc["\r"] = "\\r"; esc["\""] = "\\\""; esc["\\"] = "\\\\"
  s = ENVIRON["SSH_ORIGINAL_COMMAND"]; out = ""; n = length(s)
  for (i = 1; i <= n; i++) { c = substr(s, i, 1); out = out ((c in esc) ? esc[c] : c) }
  printf "{\"ts\":\"%s\",\"cmd\":\"%s\"}\n", ts, out
}`;

/**
 * Setup lines (run as root where the agent is installed) that put a logging wrapper in front of the
 * installed agent front: each line a key sends is appended to `log` as `{ts, cmd}`, then the real
 * front runs it. The test fleet's own eyes: the agent itself has no logging mode.
 */
export function agentCommandLog(front: string, log: string): string[] {
  const script = [
    '#!/bin/sh',
    '# Test fleet only: the line this key sent, as JSON, then the installed front.',
    'if [ -n "${SSH_ORIGINAL_COMMAND+set}" ]; then',
    `  LC_ALL=C awk -v ts="$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" ${shellQuote(JSON_LOG_AWK)} </dev/null >> ${shellQuote(log)}`,
    'fi',
    `exec ${shellQuote(`${front}.real`)}`,
    '',
  ].join('\n');
  return [
    `[ -e ${shellQuote(`${front}.real`)} ] || mv ${shellQuote(front)} ${shellQuote(`${front}.real`)}`,
    `printf '%s' ${shellQuote(script)} > ${shellQuote(front)}`,
    `chmod 0755 ${shellQuote(front)}`,
  ];
}

function wrapperScript(o: {
  pathPrefix?: string;
  basePath?: string;
  env?: Record<string, string>;
  commandLog: string;
  tag: string;
}): string {
  const base = o.basePath ?? BASE_PATH;
  const path = o.pathPrefix ? `${resolve(o.pathPrefix)}:${base}` : base;
  const lines = [
    '#!/bin/sh',
    `PATH=${shellQuote(path)}; export PATH`,
    `${TAG_VAR}=${shellQuote(o.tag)}; export ${TAG_VAR}`,
  ];
  for (const [k, v] of Object.entries(o.env ?? {})) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new Error(`bad env name ${k}`);
    lines.push(`${k}=${shellQuote(v)}; export ${k}`);
  }
  lines.push(
    'if [ -n "${SSH_ORIGINAL_COMMAND+set}" ]; then',
    `  LC_ALL=C awk -v ts="$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" ${shellQuote(JSON_LOG_AWK)} </dev/null >> ${shellQuote(o.commandLog)}`,
    '  exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"',
    'fi',
    'exec /bin/sh',
    '',
  );
  return lines.join('\n');
}

function sshdConfig(o: {
  port: number;
  dir: string;
  hostKeyPath: string;
  wrapper: string;
  maxSessions?: number;
}): string {
  return [
    `Port ${o.port}`,
    'ListenAddress 127.0.0.1',
    `HostKey ${o.hostKeyPath}`,
    `PidFile ${join(o.dir, 'sshd.pid')}`,
    `AuthorizedKeysFile ${join(o.dir, 'authorized_keys')}`,
    'StrictModes no',
    'UsePAM no',
    'PermitRootLogin prohibit-password',
    'PubkeyAuthentication yes',
    'PasswordAuthentication no',
    'KbdInteractiveAuthentication no',
    `MaxSessions ${o.maxSessions ?? 10}`,
    // Tests open many connections at once; don't let sshd drop them as a startup flood.
    'MaxStartups 200',
    'UseDNS no',
    'PrintMotd no',
    'PrintLastLog no',
    'PermitUserEnvironment no',
    'X11Forwarding no',
    'AllowTcpForwarding no',
    'LogLevel VERBOSE',
    // bash sources ~/.bashrc for commands arriving over ssh when SHLVL is unset; a developer's
    // .bashrc (pyenv init, rehash locks) then slows or wedges every remote command.
    'SetEnv SHLVL=1',
    // ForceCommand is run through the user's shell with -c: quote the path for it.
    `ForceCommand ${shellQuote(o.wrapper)}`,
    '',
  ].join('\n');
}

/** This instance's own lines, then the stock file verbatim (sshd takes the first value of a keyword). */
function stockSshdConfig(o: { port: number; dir: string; hostKeyPath: string; maxSessions?: number }): string {
  const stock = STOCK_SSHD_CONFIG.find((f) => existsSync(f));
  if (stock === undefined) throw new Error(`no stock sshd_config at ${STOCK_SSHD_CONFIG.join(' or ')}`);
  return [
    `Port ${o.port}`,
    'ListenAddress 127.0.0.1',
    `HostKey ${o.hostKeyPath}`,
    `PidFile ${join(o.dir, 'sshd.pid')}`,
    // Not restrictions: many tests connect at once, and the log must name each login.
    ...(o.maxSessions === undefined ? [] : [`MaxSessions ${o.maxSessions}`]),
    'MaxStartups 200',
    'LogLevel VERBOSE',
    'UseDNS no',
    `# --- ${stock}, as shipped ---`,
    readFileSync(stock, 'utf8'),
  ].join('\n');
}

/**
 * `unshare --mount` then, in that namespace, the binds, the setup lines and sshd (one PID: unshare
 * and the shell exec into the next). Targets are made (empty) on this machine if missing.
 */
async function inOwnMounts(agent: NonNullable<SshdOptions['agent']>, configPath: string): Promise<[string, string[]]> {
  for (const b of agent.binds) {
    await mkdir(b.from, { recursive: true });
    await mkdir(b.to, { recursive: true });
  }
  const script = [
    'set -e',
    ...agent.binds.map((b) => `mount --bind ${shellQuote(b.from)} ${shellQuote(b.to)}`),
    ...agent.setup,
    `echo ${shellQuote(SETUP_DONE)}`,
    `exec ${SSHD} -D -e -f ${shellQuote(configPath)}`,
  ].join('\n');
  return ['unshare', ['--mount', '--propagation', 'private', '--', '/bin/sh', '-c', script]];
}

/** The processes in a mount namespace (an agent-mode sshd's: its sessions, sudo, the agent, what it ran). */
async function inMountNamespace(ns: string): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if ((await readlink(`/proc/${name}/ns/mnt`)) === ns) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

async function childrenMap(): Promise<Map<number, number[]>> {
  const byParent = new Map<number, number[]>();
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = await readFile(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue;
    }
    // comm may hold spaces and parens: fields after the last ')' are fixed.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const list = byParent.get(ppid) ?? [];
    list.push(Number(name));
    byParent.set(ppid, list);
  }
  return byParent;
}

async function descendantsOf(pid: number): Promise<number[]> {
  const byParent = await childrenMap();
  const out: number[] = [];
  const stack = [...(byParent.get(pid) ?? [])];
  while (stack.length > 0) {
    const p = stack.pop() as number;
    out.push(p);
    stack.push(...(byParent.get(p) ?? []));
  }
  return out;
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/**
 * SIGSTOPs the listener and everything under it, rescanning until nothing new appears, so
 * no session forks a child after the scan that would outlive the kill as an orphan.
 */
async function freezeTree(pid: number, tag: string | null, mountNs: string | null = null): Promise<number[]> {
  signal(pid, 'SIGSTOP');
  const frozen = new Set<number>();
  for (let round = 0; round < 50; round++) {
    const found = [
      ...(await descendantsOf(pid)),
      ...(tag === null ? [] : await taggedProcesses(tag)),
      ...(mountNs === null ? [] : await inMountNamespace(mountNs)),
    ];
    const fresh = found.filter((p) => p !== pid && !frozen.has(p));
    if (fresh.length === 0) break;
    for (const p of fresh) {
      signal(p, 'SIGSTOP');
      frozen.add(p);
    }
  }
  return [...frozen];
}

/**
 * Processes carrying this sshd's tag in their environment: also session processes orphaned
 * when their connection closed mid-command (sshd sends no SIGHUP without a pty).
 */
async function taggedProcesses(tag: string): Promise<number[]> {
  const wrapperPath = join(tag, 'force-command.sh');
  const needle = `${TAG_VAR}=${tag}\0`;
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const environ = await readFile(`/proc/${name}/environ`, 'latin1');
      // Before the wrapper runs, the login shell (still in .bashrc) only names it on its cmdline.
      const cmdline = environ.includes(needle) ? '' : await readFile(`/proc/${name}/cmdline`, 'latin1');
      if (environ.includes(needle) || cmdline.includes(wrapperPath)) out.push(Number(name));
    } catch {
      // gone, or not ours to read
    }
  }
  return out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function waitGone(pids: number[], ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  for (;;) {
    if (pids.every((p) => !alive(p) || isZombie(p))) return true;
    if (Date.now() > until) return false;
    await sleep(20);
  }
}

function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}

export async function startSshd(o: SshdOptions): Promise<Sshd> {
  const dir = resolve(o.dir);
  await mkdir(dir, { recursive: true });
  // sshd's compiled-in privilege separation dir; must exist, root-owned, not group/world-writable.
  try {
    await mkdir('/run/sshd', { recursive: true, mode: 0o755 });
  } catch (e) {
    // Not root: sshd then runs without privilege separation and does not need it.
    if (process.getuid?.() === 0) throw e;
  }

  let hostKeyPath: string;
  if (o.hostKeyPath) {
    hostKeyPath = resolve(o.hostKeyPath);
    await chmod(hostKeyPath, 0o600); // sshd refuses a readable host key
  } else {
    hostKeyPath = join(dir, 'ssh_host_ed25519_key');
    await rm(hostKeyPath, { force: true });
    await rm(`${hostKeyPath}.pub`, { force: true });
    await execFileP('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'test-host', '-f', hostKeyPath]);
  }
  const { stdout: hostPub } = await execFileP('ssh-keygen', ['-y', '-f', hostKeyPath]);
  const hostKeyFingerprint = publicKeyLineFingerprint(hostPub);

  const commandLog = resolve(o.commandLog ?? join(dir, 'commands.jsonl'));
  await writeFile(commandLog, '', { flag: 'a' });
  const wrapper = join(dir, 'force-command.sh'); // taggedProcesses() relies on this name
  if (o.agent === undefined) {
    await writeFile(join(dir, 'authorized_keys'), `${o.authorizedKeys.map((k) => k.trim()).join('\n')}\n`, {
      mode: 0o600,
    });
    await writeFile(wrapper, wrapperScript({ ...o, commandLog, tag: dir }), { mode: 0o755 });
    await chmod(wrapper, 0o755);
  }

  const logPath = join(dir, 'sshd.log');
  const configPath = join(dir, 'sshd_config');

  for (let attempt = 0; ; attempt++) {
    const port = o.port ?? (await freePort());
    const sessions = o.maxSessions !== undefined ? { maxSessions: o.maxSessions } : {};
    await writeFile(
      configPath,
      o.agent === undefined
        ? sshdConfig({ port, dir, hostKeyPath, wrapper, ...sessions })
        : stockSshdConfig({ port, dir, hostKeyPath, ...sessions }),
    );
    await writeFile(logPath, '');
    const logFd = await open(logPath, 'a');
    const [file, args] =
      o.agent === undefined ? [SSHD, ['-D', '-e', '-f', configPath]] : await inOwnMounts(o.agent, configPath);
    const child = spawn(file, args, { stdio: ['ignore', logFd.fd, logFd.fd] });
    await logFd.close();
    const pid = child.pid;
    if (pid === undefined) throw new Error('sshd did not start');
    track(pid);
    let exited = false;
    child.once('exit', () => {
      exited = true;
      live.delete(pid);
    });

    const listening = `Server listening on 127.0.0.1 port ${port}.`;
    let mountNs: string | null = null;
    // 200 sshd starting at once (the bench's fleet) take longer than one on an idle machine.
    const readyMs = o.readyTimeoutMs ?? 30_000;
    let setUp = o.agent === undefined;
    let until = Date.now() + (setUp ? readyMs : SETUP_LIMIT_MS);
    let ready = false;
    while (!exited && Date.now() < until) {
      const text = await readFile(logPath, 'utf8');
      if (text.includes(listening)) {
        ready = true;
        break;
      }
      if (!setUp && text.includes(SETUP_DONE)) {
        setUp = true;
        until = Date.now() + readyMs;
      }
      await sleep(20);
    }
    if (!ready) {
      const log = await readFile(logPath, 'utf8');
      if (!exited) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // it exited between the check and the kill
        }
        await waitGone([pid], 2000);
      }
      // A free port can be taken between probing and binding; pick another.
      if (o.port === undefined && attempt < 4 && /Address already in use|Bind to port/i.test(log)) continue;
      throw new Error(`sshd on port ${port} did not start:\n${log}`);
    }
    if (o.agent !== undefined) mountNs = await readlink(`/proc/${pid}/ns/mnt`);

    const sshd: Sshd = {
      port,
      pid,
      hostKeyPath,
      hostKeyFingerprint,
      commandLog,
      logPath,
      async commands() {
        const text = await readFile(commandLog, 'utf8');
        return text
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => JSON.parse(l) as { ts: string; cmd: string });
      },
      async loginCount() {
        return ((await readFile(logPath, 'utf8')).match(/Accepted publickey for /g) ?? []).length;
      },
      descendants: () => descendantsOf(pid),
      async stop(options) {
        if (exited) return;
        const under = await freezeTree(pid, options?.treeOnly ? null : dir, options?.treeOnly ? null : mountNs);
        for (const p of [pid, ...under]) signal(p, 'SIGKILL');
        const exitedNow = new Promise<void>((r) => (exited ? r() : child.once('exit', () => r())));
        await Promise.race([exitedNow, sleep(5000)]);
        await waitGone(under, 5000);
        live.delete(pid);
      },
    };
    return sshd;
  }
}
