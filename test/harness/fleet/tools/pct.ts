/**
 * Fake Proxmox `pct` on a host: `list`, `status <vmid>`, `config <vmid>`, `exec <vmid> [--keep-env 0|1] -- cmd...`.
 * `config` prints the container's configuration as PVE does (sorted `key: value` lines), with
 * one `devN: /dev/nvidiaM` line per GPU passed to it (PVE 8.1+ device passthrough).
 * Formats from pve-container src/PVE/CLI/pct.pm (see docs/field-guide.md). `exec` enters the
 * container's PID + mount + UTS namespaces with nsenter, as lxc-attach does; its exit status is
 * the command's own (128+signal when killed).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import { joinCgroup } from '../cgroup.ts';
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
    const info = readJson<MachineInfo>(join(c.dir, 'machine.json'));
    const gpus = info.gpus ?? ctx.readHostState().gpus.map((g) => g.index);
    const devs = [...gpus.map((i) => `/dev/nvidia${i}`), '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools'];
    const lines: Array<[string, string]> = [
      ['arch', 'amd64'],
      ['cores', '32'],
      ...devs.map((d, i): [string, string] => [`dev${i}`, d]),
      ['hostname', c.id],
      ['memory', '460800'],
      ['net0', 'name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:3A:01,ip=dhcp,type=veth'],
      ['ostype', 'ubuntu'],
      ['rootfs', `local-zfs:subvol-${c.vmid}-disk-0,size=500G`],
      ['swap', '0'],
      ['unprivileged', '1'],
    ];
    const key = (k: string) => k.replace(/\d+$/, (d) => d.padStart(4, '0'));
    lines.sort((a, b) => (key(a[0]) < key(b[0]) ? -1 : 1));
    process.stdout.write(lines.map(([k, v]) => `${k}: ${v}\n`).join(''));
    process.exit(0);
    break;
  }
  case 'exec': {
    const c = find(rest[0]);
    let i = 1;
    while (i < rest.length && rest[i] !== '--') i += rest[i] === '--keep-env' ? 2 : 1;
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
    // As lxc-attach does, what runs in the container joins its cgroup (our children follow us).
    joinCgroup(readJson<MachineInfo>(join(c.dir, 'machine.json')).cgroup);
    const r = spawnSync('nsenter', ['--target', String(init.hostPid), '--pid', '--mount', '--uts', '--', ...cmd], {
      stdio: 'inherit',
    });
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
