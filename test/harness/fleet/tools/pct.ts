/**
 * Proxmox `pct` on a fleet host: `list`, `status <vmid>`, `config <vmid>`, `exec <vmid> [--keep-env 0|1] -- cmd...`,
 * `start <vmid>`, `stop <vmid>`. Texts and exit codes as pve-container's src/PVE/CLI/pct.pm and
 * API2/LXC/Status.pm give them (errors are `die`s: the message and exit 255).
 * A real LXC container (its record names an lxcpath) is a thin shim over lxc-*: `exec` is
 * `lxc-attach -n <vmid> --keep-env|--clear-env -- cmd` with the command's exit code, `status`
 * asks `lxc-info`, `start`/`stop` are `lxc-start`/`lxc-stop -k`. A namespace container is entered
 * with nsenter (its PID + mount + UTS namespaces). `config` prints `<host>/pve/lxc/<vmid>.conf`
 * as PVE does: sorted `key: value` lines (no `digest`), then the raw `lxc.*` lines.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import { joinCgroup, removeCgroupDirs } from '../cgroup.ts';
import { pveConfigPath } from '../pve-config.ts';
import { appendToolLog, type ContainerRecord, type MachineInfo, procStartTime, readJson } from '../state.ts';
import { machineContext } from './machine-context.ts';

interface InitRecord {
  hostPid: number;
  startTime: number;
}

const argv = process.argv.slice(2);
const ctx = machineContext();
appendToolLog(ctx.dir, 'pct', argv);

function containers(): ContainerRecord[] {
  const dir = join(ctx.info.hostDir, 'containers');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((n) => n.endsWith('.json'))
    .map((n) => readJson<ContainerRecord>(join(dir, n)))
    .sort((a, b) => a.vmid - b.vmid);
}

/** The container's init (host PID) when it runs, else null. */
function runningInit(c: ContainerRecord): InitRecord | null {
  if (c.lxcPath !== undefined) {
    const r = spawnSync('/usr/bin/lxc-info', ['-P', c.lxcPath, '-n', String(c.vmid), '-p', '-H'], { encoding: 'utf8' });
    const pid = Number(r.stdout.trim());
    return r.status === 0 && pid > 0 ? { hostPid: pid, startTime: procStartTime('/proc', pid) ?? 0 } : null;
  }
  const path = join(c.dir, 'init.json');
  if (!existsSync(path)) return null;
  const init = readJson<InitRecord>(path);
  return procStartTime('/proc', init.hostPid) === init.startTime ? init : null;
}

function find(vmidText: string | undefined): ContainerRecord {
  const vmid = Number(vmidText);
  const c = containers().find((x) => x.vmid === vmid);
  if (vmidText === undefined || c === undefined) {
    process.stderr.write(`Configuration file 'nodes/${ctx.info.hostId}/lxc/${vmidText ?? ''}.conf' does not exist\n`);
    process.exit(255);
  }
  return c;
}

function die(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(255);
}

const row = (a: string, b: string, c: string, d: string) =>
  `${a.padEnd(10)} ${b.padEnd(10)} ${c.padEnd(12)} ${d.padEnd(20)}\n`;

const [sub, ...rest] = argv;
switch (sub) {
  case 'list': {
    const all = containers();
    if (all.length === 0) process.exit(0);
    let out = row('VMID', 'Status', 'Lock', 'Name');
    for (const c of all) out += row(String(c.vmid), runningInit(c) ? 'running' : 'stopped', '', c.id);
    process.stdout.write(out);
    process.exit(0);
    break;
  }
  case 'status': {
    const c = find(rest[0]);
    process.stdout.write(`status: ${runningInit(c) ? 'running' : 'stopped'}\n`);
    process.exit(0);
    break;
  }
  case 'config': {
    const c = find(rest[0]);
    const text = readFileSync(pveConfigPath(ctx.info.hostDir, c.vmid), 'utf8');
    const plain: Array<[string, string]> = [];
    const raw: string[] = [];
    for (const l of text.split('\n')) {
      const m = /^([a-z][a-z0-9_.-]*):\s*(.*)$/.exec(l);
      if (m === null || m[1] === 'digest') continue;
      if (m[1]?.startsWith('lxc.')) raw.push(`${m[1]}: ${m[2]}`);
      else plain.push([m[1] ?? '', m[2] ?? '']);
    }
    const key = (k: string) => k.replace(/\d+$/, (d) => d.padStart(4, '0'));
    plain.sort((a, b) => (key(a[0]) < key(b[0]) ? -1 : 1));
    process.stdout.write([...plain.map(([k, v]) => `${k}: ${v}`), ...raw].map((l) => `${l}\n`).join(''));
    process.exit(0);
    break;
  }
  case 'start':
  case 'stop': {
    const c = find(rest[0]);
    const running = runningInit(c) !== null;
    if (sub === 'start' && running) die(`CT ${c.vmid} already running`);
    if (sub === 'stop' && !running) die(`CT ${c.vmid} not running`);
    if (c.lxcPath === undefined) die(`pct ${sub}: not supported on this fleet's namespace containers`);
    const args =
      sub === 'start' ? ['-P', c.lxcPath, '-n', String(c.vmid)] : ['-P', c.lxcPath, '-n', String(c.vmid), '-k'];
    if (sub === 'start' && c.cgroupTag !== undefined) {
      // As the fleet does before a start: the last lxc-start could not remove the monitor cgroup it sat in.
      removeCgroupDirs(join(c.cgroupTag, 'lxc.monitor', String(c.vmid)));
      removeCgroupDirs(join(c.cgroupTag, 'lxc', String(c.vmid)));
    }
    const r = spawnSync(sub === 'start' ? '/usr/bin/lxc-start' : '/usr/bin/lxc-stop', args, { stdio: 'inherit' });
    process.exit(r.status === 0 ? 0 : 255);
    break;
  }
  case 'exec': {
    const c = find(rest[0]);
    let i = 1;
    let keepEnv = true; // PVE 8's default (pct.pm: "switch to default 0 with pve 9")
    while (i < rest.length && rest[i] !== '--') {
      if (rest[i] === '--keep-env') keepEnv = !/^(0|false|no|off)$/i.test(rest[i + 1] ?? '');
      i += rest[i] === '--keep-env' ? 2 : 1;
    }
    const cmd = rest.slice(i + 1);
    if (cmd.length === 0) {
      process.stderr.write('400 not enough arguments\npct exec <vmid> [<extra-args>] [OPTIONS]\n');
      process.exit(255);
    }
    const init = runningInit(c);
    if (init === null) {
      process.stderr.write(`container '${c.vmid}' not running!\n`);
      process.exit(255);
    }
    let r: ReturnType<typeof spawnSync>;
    if (c.lxcPath !== undefined) {
      const env = keepEnv ? ['--keep-env'] : ['--clear-env'];
      r = spawnSync('/usr/bin/lxc-attach', ['-P', c.lxcPath, '-n', String(c.vmid), ...env, '--', ...cmd], {
        stdio: 'inherit',
      });
    } else {
      // As lxc-attach does, what runs in the container joins its cgroup (our children follow us).
      joinCgroup(readJson<MachineInfo>(join(c.dir, 'machine.json')).cgroup);
      r = spawnSync('nsenter', ['--target', String(init.hostPid), '--pid', '--mount', '--uts', '--', ...cmd], {
        stdio: 'inherit',
      });
    }
    if (r.error !== undefined) {
      process.stderr.write(`pct: ${r.error.message}\n`);
      process.exit(1);
    }
    if (r.signal !== null) process.exit(128 + (constants.signals[r.signal] ?? 0));
    process.exit(r.status ?? 1);
    break;
  }
  default:
    process.stderr.write(`ERROR: unknown command 'pct ${sub ?? ''}'\n`);
    process.exit(255);
}
