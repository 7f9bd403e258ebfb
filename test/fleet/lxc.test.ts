/**
 * The fleet's real LXC containers (engine 'lxc'), checked from where the product looks: the host's
 * /proc (uid shift, cgroup, NSpid), the host's `pct` (a shim over lxc-*) and real `lxc-info`, and
 * the device files a holder holds open inside.
 * ct129: unprivileged, Proxmox's default map (0 → 100000); ct131: its own map (0 → 200000);
 * ct132: privileged.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readlinkSync, readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePctStatus } from '../../src/gpu/parse/index.ts';
import { type Fleet, nsPids, startFleet } from '../harness/fleet/index.ts';
import { onMachine } from './ssh-run.ts';

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({
    // The simulation itself is under test: its hosts take any shell line (the agent's tests are agent/test).
    access: 'shell',
    engine: 'lxc',
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', gpus: [1, 3] },
      { id: 'ct131', vmid: 131, host: 'kpro5', idmapBase: 200000 },
      { id: 'ct132', vmid: 132, host: 'kpro5', privileged: true },
    ],
  });
});

afterAll(async () => {
  await fleet?.stop();
});

const hostPort = () => {
  const p = fleet.machine('kpro5').sshPort;
  if (p === null) throw new Error('no host sshd');
  return p;
};
void hostPort;

function statusField(pid: number, field: string): string {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`));
  return (line ?? '').slice(field.length + 1).trim();
}

describe('real LXC containers as the host sees them', () => {
  it('an unprivileged holder runs as host uid 100000 + its uid, in lxc/<vmid>/ns, with NSpid <host pid> <container pid>', async () => {
    const h = await fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 1000 }], title: 'sglang::scheduler_TP0' });
    expect(Number(statusField(h.hostPid, 'Uid').split(/\s+/)[0])).toBe(100000);
    expect(nsPids(h.hostPid)).toEqual([h.hostPid, h.containerPid]);
    expect(h.containerPid).not.toBe(h.hostPid);
    const cg = readFileSync(`/proc/${h.hostPid}/cgroup`, 'utf8');
    expect(cg).toMatch(/^\d+:pids:\/gpu-medic-[^/]+\/lxc\/129\/ns$/m);
    // Its device files are the host's stand-ins for GPU 3 (container GPU 0 = host GPU 1 in bus order: 1, 3 → 0, 1).
    const fds = readdirSync(`/proc/${h.hostPid}/fd`).map((fd) => {
      try {
        return readlinkSync(`/proc/${h.hostPid}/fd/${fd}`);
      } catch {
        return '';
      }
    });
    expect(fds).toContain('/dev/nvidia1');
    expect(fds).toContain('/dev/nvidiactl');
  });

  it('a container with its own id map runs its root as host uid 200000; a privileged one as uid 0', async () => {
    const a = await fleet.spawnHolder('ct131', { gpus: [{ index: 0, mib: 10 }] });
    const b = await fleet.spawnHolder('ct132', { gpus: [{ index: 0, mib: 10 }] });
    expect(Number(statusField(a.hostPid, 'Uid').split(/\s+/)[0])).toBe(200000);
    expect(Number(statusField(b.hostPid, 'Uid').split(/\s+/)[0])).toBe(0);
    expect(nsPids(b.hostPid)).toHaveLength(2);
  });

  it('a holder running as another user shows as host uid shift + that uid', async () => {
    const uid = Number(execFileSync('id', ['-u', 'fleetuser'], { encoding: 'utf8' }).trim());
    const h = await fleet.spawnHolder('ct129', { gpus: [{ index: 1, mib: 10 }], user: 'fleetuser' });
    expect(Number(statusField(h.hostPid, 'Uid').split(/\s+/)[0])).toBe(100000 + uid);
  });
});

describe('pct on the host, a shim over lxc-*', () => {
  const pct = (args: string) => onMachine(fleet, 'kpro5', `pct ${args}`);

  it('status says running, config says unprivileged: 1 with devN lines and a custom map as lxc.idmap lines', async () => {
    const s = await pct('status 129');
    expect(s.code).toBe(0);
    expect(parsePctStatus(s.stdout)).toEqual({ ok: true, value: 'running' });
    const c129 = await pct('config 129');
    expect(c129.stdout).toMatch(/^dev0: \/dev\/nvidia1\ndev1: \/dev\/nvidia3\n/m);
    expect(c129.stdout).toMatch(/^unprivileged: 1$/m);
    expect(c129.stdout).not.toMatch(/lxc\.idmap|digest/);
    const c131 = await pct('config 131');
    expect(c131.stdout.trim().split('\n').slice(-2)).toEqual([
      'lxc.idmap: u 0 200000 65536',
      'lxc.idmap: g 0 200000 65536',
    ]);
    const c132 = await pct('config 132');
    expect(c132.stdout).not.toMatch(/unprivileged/);
  });

  it('exec runs through lxc-attach with the command exit code; a missing vmid is a config error, exit 255', async () => {
    const r = await pct('exec 129 -- sh -c "id -u; cat /proc/self/status | grep NSpid; exit 7"');
    expect(r.code).toBe(7);
    expect(r.stdout.split('\n')[0]).toBe('0');
    expect(r.stdout).toMatch(/^NSpid:\s+\d+$/m); // the host's /proc is not visible: one level, the container's
    const missing = await pct('status 999');
    expect(missing.code).toBe(255);
    expect(missing.stderr).toBe("Configuration file 'nodes/kpro5/lxc/999.conf' does not exist\n");
  });

  it('lxc-info is the real one (its own labels), pointed at the fleet lxcpath', async () => {
    const r = await onMachine(fleet, 'kpro5', 'lxc-info -n 129; lxc-info -n 129 -p -H; lxc-info -n 999');
    expect(r.stdout).toMatch(/^Name:\s+129\nState:\s+RUNNING\nPID:\s+(\d+)\n/);
    expect(r.stdout).toMatch(/^Memory use:/m);
    expect(r.stdout).toContain(`\n${fleet.machine('ct129').initHostPid}\n`);
    expect(r.stderr).toMatch(/999 doesn't exist/);
  });

  it('a stopped container: status stopped, exec "not running!" exit 255, lxc-info STOPPED with no PID; pct start/stop with their refusals; a start brings a new init', async () => {
    const before = fleet.machine('ct132').initHostPid;
    await fleet.stopMachine('ct132');
    expect(parsePctStatus((await pct('status 132')).stdout)).toEqual({ ok: true, value: 'stopped' });
    const ex = await pct('exec 132 -- true');
    expect(ex.code).toBe(255);
    expect(ex.stderr).toBe("container '132' not running!\n");
    const info = await onMachine(fleet, 'kpro5', 'lxc-info -n 132');
    expect(info.stdout).toBe('Name:           132\nState:          STOPPED\n');
    const stop = await pct('stop 132');
    expect([stop.code, stop.stderr]).toEqual([255, 'CT 132 not running\n']);
    const start = await pct('start 132');
    expect(start.code).toBe(0);
    expect(parsePctStatus((await pct('status 132')).stdout)).toEqual({ ok: true, value: 'running' });
    const again = await pct('start 132');
    expect([again.code, again.stderr]).toEqual([255, 'CT 132 already running\n']);
    expect((await pct('stop 132')).code).toBe(0);
    expect(parsePctStatus((await pct('status 132')).stdout)).toEqual({ ok: true, value: 'stopped' });
    await fleet.startMachine('ct132');
    const after = fleet.machine('ct132').initHostPid;
    expect(after).not.toBeNull();
    expect(after).not.toBe(before);
    expect(nsPids(after ?? 0)).toEqual([after, 1]);
  });
});

describe('tools are per machine', () => {
  it('a host that loses lxc-info has none, though this machine has it installed', async () => {
    expect(existsSync('/usr/bin/lxc-info')).toBe(true);
    await fleet.removeTool('kpro5', 'lxc-info');
    const r = await onMachine(fleet, 'kpro5', 'lxc-info -n 129 -p');
    expect(r.code).toBe(127);
  });
});

describe('cleanup', () => {
  it('stop() removes the containers, their lxcpath and the fleet cgroup tree from every hierarchy', async () => {
    const f = await startFleet({
      // The simulation itself is under test: its hosts take any shell line (the agent's tests are agent/test).
      access: 'shell',
      engine: 'lxc',
      hosts: [{ id: 'h1', gpus: 1 }],
      containers: [{ id: 'c1', vmid: 140, host: 'h1' }],
    });
    const cg = f.machine('c1').cgroup ?? '';
    const tagDir = cg.replace(/\/lxc\/140\/ns$/, '');
    expect(tagDir).toMatch(/\/gpu-medic-[^/]+$/);
    expect(existsSync(cg)).toBe(true);
    const init = f.machine('c1').initHostPid ?? 0;
    await f.stop();
    expect(existsSync(`/proc/${init}`)).toBe(false);
    expect(existsSync(f.dir)).toBe(false);
    const left = readdirSync('/sys/fs/cgroup').filter((h) =>
      existsSync(`/sys/fs/cgroup/${h}/${tagDir.split('/').pop()}`),
    );
    expect(left).toEqual([]);
  });
});
