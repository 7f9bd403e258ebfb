/**
 * A Proxmox container as a real LXC container (Debian's lxc 5), under the fleet's own lxcpath
 * (`<fleet>/lxc/<vmid>/`), so fleets running side by side never share a name:
 *   - rootfs: a copy of one busybox rootfs built once per machine with `lxc-create -t busybox`
 *     (offline; cached under the fleet cache dir), owned by the container's root on the host
 *     (uid 100000 with the default map), /usr merged as on Debian; the host's /usr/bin, /usr/sbin,
 *     /usr/lib, /usr/share and /etc/passwd, /etc/group, /etc/alternatives are bound in read-only (the container runs the
 *     host's ps, fuser, perl, bash); /etc/shadow lists those users without a password; with
 *     `ownUsers` (a container whose own agent is installed in it) /etc/passwd, /etc/group and the PAM
 *     config are copies instead, the container's own;
 *   - unprivileged by default: `lxc.idmap = u|g 0 <base> 65536`, base 100000 as Proxmox's default
 *     map, or the container's own (`idmapBase`, written as `lxc.idmap:` lines in its pct config);
 *   - cgroups: `lxc.cgroup.dir.container = <tag>/lxc/<vmid>` with `inner = ns` (Proxmox names them
 *     `lxc/<vmid>` and `lxc/<vmid>/ns`; the fleet's tag keeps concurrent fleets apart and is removed at stop);
 *   - `lxc.net.0.type = none` (the host's network: its own sshd listens on the host's 127.0.0.1)
 *     for containers with an address of their own, `empty` (only lo) for the others;
 *   - GPU device files: the host's stand-ins bound at `/dev/nvidiaN` (`devN: /dev/nvidiaN` in its pct config);
 *   - the fleet dir bound at its own path (signal log, tool socket), the container's bin/ (and sys/)
 *     over its host's: `pct exec` keeps the host's PATH and finds the container's tools there;
 *   - PID 1 is the fleet's holder program in init mode (reaps orphans; a GPU holder with `initHolds`).
 * Started in the foreground (`lxc-start -F`, its own monitor) so the fleet sees it end; the LXC log
 * (INFO) tells by which signal its init died.
 */
import { execFile } from 'node:child_process';
import { type Dirent, existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { CACHE_ROOT, type FleetTools } from './build-tools.ts';
import { removeCgroupDirs } from './cgroup.ts';
import type { InitEnv, RunningContainer } from './container.ts';
import { spawnReady } from './spawn-ready.ts';
import { procStartTime } from './state.ts';

const execFileP = promisify(execFile);

/** Proxmox's default map for unprivileged containers: container uid 0 is host uid 100000. */
export const DEFAULT_ID_SHIFT = 100000;
const ID_RANGE = 65536;
const ROOTFS_CACHE = join(CACHE_ROOT, 'lxc-busybox-rootfs-v2');

export interface LxcContainerOptions {
  lxcPath: string;
  vmid: number;
  hostname: string;
  ctDir: string;
  hostDir: string;
  fleetDir: string;
  tools: FleetTools;
  /** First path component of its cgroups (unique per fleet). */
  cgroupTag: string;
  /** Host uid/gid of its root; null: privileged (no map). */
  idShift: number | null;
  net: 'none' | 'empty';
  /** It and its host have a sys/ dir: bind its own over the host's. */
  systemPath: boolean;
  /** Host GPU indices whose device files it gets (null: all of the host's). */
  gpus: number[] | null;
  initEnv?: InitEnv;
  /**
   * Its own accounts and PAM config, as a real container has: /etc/passwd and /etc/group copied from
   * the host's at creation (not bound), /etc/pam.d, /etc/security, /etc/login.defs, /etc/default and
   * /etc/environment copied too. For a container whose own stock sshd (UsePAM yes) and agent install
   * script (which changes the account it installs for) run inside it.
   */
  ownUsers?: boolean;
}

let rootfsPending: Promise<string> | null = null;

/** The busybox rootfs every fleet container is copied from (built once per machine, offline). */
function lxcRootfs(): Promise<string> {
  rootfsPending ??= buildRootfs().catch((e: unknown) => {
    rootfsPending = null;
    throw e;
  });
  return rootfsPending;
}

async function buildRootfs(): Promise<string> {
  const done = join(ROOTFS_CACHE, 'rootfs');
  if (existsSync(join(ROOTFS_CACHE, 'complete'))) return done;
  const tmp = `${ROOTFS_CACHE}.${process.pid}.tmp`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  await writeFile(join(tmp, 'base.conf'), 'lxc.net.0.type = empty\n');
  await execFileP('lxc-create', ['-P', tmp, '-n', 'base', '-t', 'busybox', '-f', join(tmp, 'base.conf')]);
  await rename(join(tmp, 'base', 'rootfs'), join(tmp, 'rootfs'));
  await rm(join(tmp, 'base'), { recursive: true, force: true });
  const root = join(tmp, 'rootfs');
  // Merged /usr as on the host (and Proxmox's Debian templates): /bin and /sbin are the host's bound
  // /usr/bin and /usr/sbin, so login shells named in the bound /etc/passwd (/bin/bash) exist. The
  // busybox applets stay in /busybox (nothing on PATH: the host's ps and fuser are the ones to test).
  await mkdir(join(root, 'busybox'));
  await rename(join(root, 'bin'), join(root, 'busybox', 'bin'));
  await rename(join(root, 'sbin'), join(root, 'busybox', 'sbin'));
  await symlink('usr/bin', join(root, 'bin'));
  await symlink('usr/sbin', join(root, 'sbin'));
  // Mount points for what the fleet binds in (the rootfs is copied, so they exist in every container).
  for (const d of ['usr/bin', 'usr/sbin', 'usr/share', 'run', 'dev']) await mkdir(join(root, d), { recursive: true });
  await writeFile(join(tmp, 'complete'), '');
  try {
    await rename(tmp, ROOTFS_CACHE);
  } catch {
    await rm(tmp, { recursive: true, force: true }); // another process built it first
  }
  return done;
}

function deviceList(hostDir: string, gpus: number[] | null): string[] {
  return readdirSync(join(hostDir, 'dev')).filter((n) => {
    const m = /^nvidia(\d+)$/.exec(n);
    return m === null || gpus === null || gpus.includes(Number(m[1]));
  });
}

/** The container's LXC config (what Proxmox generates from its pct config at start). */
function lxcConfig(o: LxcContainerOptions, rootfs: string): string {
  const rel = (p: string) => relative('/', p);
  const bind = (src: string, dst: string, opts: string) => `lxc.mount.entry = ${src} ${rel(dst)} none ${opts} 0 0`;
  const env = { FLEET_MODE: 'init', FLEET_ARGV: '/sbin/init', ...(o.initEnv ?? {}) };
  const lines = [
    `lxc.uts.name = ${o.hostname}`,
    `lxc.rootfs.path = dir:${rootfs}`,
    `lxc.net.0.type = ${o.net}`,
    'lxc.apparmor.profile = unconfined',
    ...(o.idShift === null
      ? []
      : [`lxc.idmap = u 0 ${o.idShift} ${ID_RANGE}`, `lxc.idmap = g 0 ${o.idShift} ${ID_RANGE}`]),
    'lxc.autodev = 1',
    'lxc.tty.max = 0',
    'lxc.pty.max = 16',
    'lxc.console.path = none',
    'lxc.cap.drop = sys_module mac_admin mac_override sys_time',
    // sysfs can only be mounted in a network namespace of its own (not with `none` when unprivileged).
    `lxc.mount.auto = proc:mixed cgroup:mixed${o.net === 'empty' ? ' sys:ro' : ''}`,
    `lxc.cgroup.dir.container = ${o.cgroupTag}/lxc/${o.vmid}`,
    'lxc.cgroup.dir.container.inner = ns',
    `lxc.cgroup.dir.monitor = ${o.cgroupTag}/lxc.monitor/${o.vmid}`,
    // cgroup v1 here: Proxmox's lxc.cgroup2.devices.allow would be ignored (no NVIDIA char devices here anyway).
    'lxc.cgroup.devices.allow = c 195:* rwm',
    'lxc.mount.entry = shm dev/shm tmpfs defaults,create=dir 0 0',
    bind('/lib', '/lib', 'ro,bind'),
    bind('/usr/lib', '/usr/lib', 'ro,bind'),
    bind('/lib64', '/lib64', 'ro,bind,optional'),
    bind('/usr/lib64', '/usr/lib64', 'ro,bind,optional,create=dir'),
    bind('/usr/bin', '/usr/bin', 'ro,bind'),
    bind('/usr/sbin', '/usr/sbin', 'ro,bind'),
    bind('/usr/share', '/usr/share', 'ro,bind'),
    ...(o.ownUsers === true
      ? []
      : [
          bind('/etc/passwd', '/etc/passwd', 'ro,bind,create=file'),
          bind('/etc/group', '/etc/group', 'ro,bind,create=file'),
        ]),
    // Debian's alternatives: /usr/bin/awk and others are links through /etc/alternatives.
    bind('/etc/alternatives', '/etc/alternatives', 'ro,bind,create=dir'),
    bind(o.tools.dir, o.tools.dir, 'ro,bind,create=dir'),
    bind(o.fleetDir, o.fleetDir, 'bind,create=dir'),
    // The host's /proc at <ct>/hostproc, as in a namespace container: only the fleet's fake tools read it
    // (a holder's liveness by host PID, when run inside, e.g. the standalone nvidia-smi).
    bind('/proc', join(o.ctDir, 'hostproc'), 'rbind,create=dir'),
    bind(join(o.ctDir, 'bin'), join(o.hostDir, 'bin'), 'ro,bind,create=dir'),
    ...(o.systemPath ? [bind(join(o.ctDir, 'sys'), join(o.hostDir, 'sys'), 'ro,bind,create=dir')] : []),
    ...deviceList(o.hostDir, o.gpus).map((n) =>
      bind(join(o.hostDir, 'dev', n), `/dev/${n}`, 'bind,optional,create=file'),
    ),
    // Not lxc.environment: LXC gives that to every lxc-attach too (a holder would start as an init).
    `lxc.init.cmd = /usr/bin/env ${Object.entries(env)
      .map(([k, v]) => {
        if (/[\s"'\\]/.test(v)) throw new Error(`fleet: ${k} of ${o.hostname}'s init has a space or quote: ${v}`);
        return `${k}=${v}`;
      })
      .join(' ')} ${o.tools.holder}`,
    '',
  ];
  return lines.join('\n');
}

/** Creates `<lxcPath>/<vmid>/` (rootfs copied from the cached one, config) for a first start. */
export async function createLxcContainer(o: LxcContainerOptions): Promise<void> {
  const base = await lxcRootfs();
  const dir = join(o.lxcPath, String(o.vmid));
  await mkdir(dir, { recursive: true });
  const rootfs = join(dir, 'rootfs');
  if (!existsSync(rootfs)) {
    await execFileP('cp', ['-a', base, rootfs]);
    // The host's users are bound in (/etc/passwd): each gets a shadow line with no password (not locked),
    // so the container's own sshd lets them log in with a key, as on the host.
    const users = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .map((l) => l.split(':')[0])
      .filter((u): u is string => u !== undefined && u !== '');
    await writeFile(join(rootfs, 'etc', 'shadow'), users.map((u) => `${u}:*:19000:0:99999:7:::\n`).join(''), {
      mode: 0o640,
    });
    if (o.ownUsers === true) {
      const etc = ['/etc/passwd', '/etc/group', '/etc/pam.d', '/etc/security', '/etc/login.defs', '/etc/default'];
      const present = [...etc, '/etc/environment'].filter((f) => existsSync(f));
      // Over the busybox template's own passwd and group.
      await execFileP('cp', ['-a', '--remove-destination', ...present, join(rootfs, 'etc')]);
    }
    if (o.idShift !== null) await execFileP('chown', ['-R', `${o.idShift}:${o.idShift}`, rootfs]);
  }
}

/** Writes its config (again: a GPU-holding init's environment may differ per boot) and starts it. */
export async function startLxcContainer(o: LxcContainerOptions): Promise<RunningContainer> {
  const dir = join(o.lxcPath, String(o.vmid));
  await writeFile(join(dir, 'config'), lxcConfig(o, join(dir, 'rootfs')));
  clearStaleLxcCgroups(o.cgroupTag, o.vmid);
  const log = join(o.ctDir, 'lxc.log');
  await rm(log, { force: true });
  // lxc-start -F stays in the foreground as the container's monitor; it prints nothing when the
  // container runs, so the ready line is ours: lxc-info, once the init runs, names its PID.
  const script = [
    `lxc-start -F -P "$1" -n "$2" -l INFO -o "$3" </dev/null >/dev/null 2>>"$3.err" &`,
    'm=$!',
    'for i in $(seq 1 400); do',
    '  p=$(lxc-info -P "$1" -n "$2" -p -H 2>/dev/null)',
    '  if [ -n "$p" ]; then echo "READY $p $m"; wait $m; exit $?; fi',
    '  kill -0 $m 2>/dev/null || exit 1',
    '  sleep 0.025',
    'done',
    'kill -9 $m; exit 1',
  ].join('\n');
  const r = await spawnReady('/bin/sh', ['-c', script, 'lxc-start', o.lxcPath, String(o.vmid), log], {
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
    stderrPath: join(o.ctDir, 'init.log'),
  });
  const m = /^READY (\d+) (\d+)$/.exec(r.line);
  if (m === null) throw new Error(`container ${o.hostname}: bad ready line ${JSON.stringify(r.line)}`);
  const initHostPid = Number(m[1]);
  const initStartTime = procStartTime('/proc', initHostPid);
  if (initStartTime === null) throw new Error(`container ${o.hostname}: init ${initHostPid} gone right after start`);
  // lxc-start exits 0 however its init ended: the log says which signal killed it.
  const exited = r.exited.then(({ code }) => ({ code, signal: initSignal(log) }));
  return { launcherPid: Number(m[2]), initHostPid, initStartTime, exited };
}

/** `SIGKILL` when LXC logged "Child <pid> ended on signal Killed(9)", else null. */
function initSignal(log: string): string | null {
  let text = '';
  try {
    text = readFileSync(log, 'utf8');
  } catch {
    return null;
  }
  const all = [...text.matchAll(/ended on signal [^(]*\((\d+)\)/g)];
  const n = all.at(-1)?.[1];
  if (n === undefined) return null;
  const names: Record<string, string> = {
    '9': 'SIGKILL',
    '15': 'SIGTERM',
    '2': 'SIGINT',
    '1': 'SIGHUP',
    '6': 'SIGABRT',
  };
  return names[n] ?? `SIG${n}`;
}

/** Argv prefix that runs a command inside the container (what `pct exec` does): lxc-attach keeping the environment. */
export function lxcAttachArgs(lxcPath: string, vmid: number): string[] {
  return ['-P', lxcPath, '-n', String(vmid), '--keep-env', '--'];
}

/** Host PIDs of the processes in a container's cgroup (the pids hierarchy: v1 here, or v2). */
export function cgroupPids(cgroupTag: string, vmid: number): number[] {
  const roots = ['/sys/fs/cgroup/pids', '/sys/fs/cgroup/unified', '/sys/fs/cgroup'];
  for (const r of roots) {
    const top = join(r, cgroupTag, 'lxc', String(vmid));
    if (!existsSync(top)) continue;
    const out: number[] = [];
    const walk = (d: string) => {
      let entries: Dirent[];
      try {
        entries = readdirSync(d, { withFileTypes: true });
      } catch {
        return;
      }
      try {
        for (const l of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n')) if (l !== '') out.push(Number(l));
      } catch {
        // removed meanwhile
      }
      for (const e of entries) if (e.isDirectory()) walk(join(d, e.name));
    };
    walk(top);
    return out;
  }
  return [];
}

/** Stops every container under a fleet's lxcpath (`lxc-stop -k`), e.g. one left by a test process that died. */
export async function stopAllLxc(lxcPath: string): Promise<void> {
  let names: string[];
  try {
    names = readdirSync(lxcPath);
  } catch {
    return;
  }
  await Promise.all(names.map((n) => execFileP('lxc-stop', ['-P', lxcPath, '-n', n, '-k']).catch(() => undefined)));
}

/** Removes a fleet's cgroup tree `<tag>` from every hierarchy (after its containers stopped). */
export function removeCgroupTree(cgroupTag: string): void {
  removeCgroupDirs(cgroupTag);
}

/** What a start needs cleared first: lxc-start cannot remove the monitor cgroup it sits in when it ends. */
function clearStaleLxcCgroups(cgroupTag: string, vmid: number): void {
  removeCgroupDirs(join(cgroupTag, 'lxc.monitor', String(vmid)));
  removeCgroupDirs(join(cgroupTag, 'lxc', String(vmid)));
}

/** Where a container's processes live (`<tag>/lxc/<vmid>/ns`), in the pids hierarchy (v1 here, else v2). */
export function lxcCgroupPath(cgroupTag: string, vmid: number): string {
  const root = existsSync('/sys/fs/cgroup/pids/cgroup.procs') ? '/sys/fs/cgroup/pids' : '/sys/fs/cgroup';
  return join(root, cgroupTag, 'lxc', String(vmid), 'ns');
}

/** The container's `ns` cgroup in every hierarchy (what a process joins to be in the container's cgroups). */
export function lxcCgroupDirs(cgroupTag: string, vmid: number): string[] {
  let hierarchies: string[];
  try {
    hierarchies = readdirSync('/sys/fs/cgroup').map((h) => join('/sys/fs/cgroup', h));
  } catch {
    return [];
  }
  return hierarchies.map((h) => join(h, cgroupTag, 'lxc', String(vmid), 'ns')).filter((d) => existsSync(d));
}
