/** Fleet start/stop: fast, and nothing left behind — after stop(), and after a test process that crashed. */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { startFleet } from '../harness/fleet/index.ts';
import { processesMentioning } from '../harness/fleet/registry.ts';
import { procStartTime } from '../harness/fleet/state.ts';
import { eventually, onMachine } from './ssh-run.ts';

const HERE = dirname(fileURLToPath(import.meta.url));

function alive(pid: number): boolean {
  return procStartTime('/proc', pid) !== null;
}

function mountsMentioning(needle: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(needle));
}

describe('fleet lifecycle', () => {
  it('stop() leaves no process, no mount and no dir, with sessions still running on its sshds', async () => {
    const fleet = await startFleet({
      // The simulation itself is under test: its hosts take any shell line (the agent's tests are agent/test).
      access: 'shell',
      hosts: [{ id: 'life-host', gpus: 8 }],
      containers: [
        { id: 'life-ct', vmid: 129, host: 'life-host', ownAddress: true },
        { id: 'life-pct', vmid: 130, host: 'life-host' },
      ],
    });
    const dir = fleet.dir;
    const holders = await Promise.all([
      fleet.spawnHolder('life-host', { gpus: [{ index: 0, mib: 1 }] }),
      fleet.spawnHolder('life-ct', { gpus: [{ index: 1, mib: 1 }], ignoreTerm: true, user: 'fleetuser' }),
      fleet.spawnBystander('life-pct', { title: 'python3 monitor.py' }),
    ]);
    // A session still running on each sshd when the fleet stops.
    const hanging = [onMachine(fleet, 'life-host', 'sleep 60'), onMachine(fleet, 'life-ct', 'sleep 60')];
    await eventually(async () => (await processesMentioning(`${dir}/m/`)).length >= 4);
    const inits = ['life-ct', 'life-pct'].map((id) => fleet.machine(id).initHostPid);

    await fleet.stop();
    for (const h of holders) expect(alive(h.hostPid)).toBe(false);
    for (const pid of inits) expect(pid !== null && alive(pid)).toBe(false);
    expect(await processesMentioning(dir)).toEqual([]);
    expect(mountsMentioning(dir)).toEqual([]);
    expect(existsSync(dir)).toBe(false);
    for (const r of await Promise.all(hanging)) expect(r.code).not.toBe(0);
    // The signals were the fleet's own: none is reported.
    expect(fleet.signals()).toEqual([]);
  });

  it('stopMachine: a host becomes unreachable; a container reports stopped to pct', async () => {
    const fleet = await startFleet({
      // The simulation itself is under test: its hosts take any shell line (the agent's tests are agent/test).
      access: 'shell',
      hosts: [{ id: 'down-host', gpus: 1 }],
      containers: [{ id: 'down-ct', vmid: 140, host: 'down-host' }],
    });
    try {
      await fleet.stopMachine('down-ct');
      const r = await onMachine(fleet, 'down-host', 'pct status 140; pct exec 140 -- true; echo rc=$?');
      expect(r.stdout).toBe('status: stopped\nrc=255\n');
      expect(r.stderr).toContain("container '140' not running!");
      const port = fleet.machine('down-host').sshPort;
      await fleet.stopMachine('down-host');
      expect(fleet.machine('down-host').sshPort).toBeNull();
      const { sshRun } = await import('./ssh-run.ts');
      const down = await sshRun(fleet, port ?? 1, 'true');
      expect(down.code).toBe(255);
      expect(down.stderr).toMatch(/Connection refused/);
    } finally {
      await fleet.stop();
    }
  });

  it('a fleet whose test process crashed is swept by the next startFleet', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(HERE, 'fixtures/crash-owner.ts')], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const line = await new Promise<string>((resolve, reject) => {
      let buf = '';
      child.stdout.on('data', (c: Buffer) => {
        buf += c.toString();
        if (buf.includes('\n')) resolve(buf.split('\n')[0] ?? '');
      });
      child.once('exit', (code) => reject(new Error(`crash owner exited early (${code})`)));
    });
    const { dir, pids } = JSON.parse(line) as { dir: string; pids: number[] };
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    // Left behind: holders, the container, sshds.
    expect(pids.every(alive)).toBe(true);
    expect((await processesMentioning(`${dir}/`)).length).toBeGreaterThan(3);

    const next = await startFleet({
      // The simulation itself is under test: its hosts take any shell line (the agent's tests are agent/test).
      access: 'shell',
      hosts: [{ id: 'after-crash', gpus: 1 }],
    });
    try {
      expect(pids.some(alive)).toBe(false);
      expect(await processesMentioning(`${dir}/`)).toEqual([]);
      expect(existsSync(dir)).toBe(false);
    } finally {
      await next.stop();
    }
  });
});
