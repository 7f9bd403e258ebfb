import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { runDoctorCommand } from '../../src/cli/doctor-command.ts';
import type { InventoryInput } from '../../src/config/inventory.ts';
import type { DoctorReport, Finding } from '../../src/doctor/judge.ts';
import { startFleet, type Fleet, type FleetProcess } from '../harness/fleet/index.ts';

/**
 * `gpu-medic doctor` against the real-sshd fleet, with machines that each lack one thing
 * gpu-medic relies on. The CLI runs in-process (same code as `gpu-medic doctor`), reading a
 * YAML inventory file, with the worker's executor and the fleet's pinned keys.
 */
function sink(): { stream: Writable; text: () => string } {
  let buf = '';
  return {
    stream: new Writable({
      write(chunk: Buffer, _enc, cb) {
        buf += chunk.toString('utf8');
        cb();
      },
    }),
    text: () => buf,
  };
}

let fleet: Fleet;
let inventoryPath: string;
let holder: FleetProcess;

async function doctor(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out = sink();
  const err = sink();
  const code = await runDoctorCommand(args, {
    env: { GPU_MEDIC_INVENTORY: inventoryPath, GPU_MEDIC_SSH_ACCESS: 'root-shell' },
    out: out.stream,
    err: err.stream,
  });
  return { code, out: out.text(), err: err.text() };
}

const find = (r: DoctorReport, machine: string, check: Finding['check']): Finding => {
  const f = r.findings.find((x) => x.machineId === machine && x.check === check);
  if (!f)
    throw new Error(
      `no ${check} finding for ${machine}: ${JSON.stringify(r.findings.filter((x) => x.machineId === machine))}`,
    );
  return f;
};

beforeAll(async () => {
  fleet = await startFleet({
    hosts: [
      { id: 'kpro5', gpus: [{}, { persistence: true }, {}] },
      { id: 'kpro6', gpus: 1, omitTools: ['pct', 'lxc-info', 'perl', 'python3'] },
    ],
    containers: [
      // Sees only host GPU 2, as its GPU 0 (as Proxmox passthrough does).
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true, gpus: [2] },
      { id: 'ct130', vmid: 130, host: 'kpro5', ownAddress: true, omitTools: ['fuser'] },
      { id: 'ct131', vmid: 131, host: 'kpro5', omitTools: ['timeout'] },
      { id: 'ct132', vmid: 132, host: 'kpro5', ownAddress: true, hideProc: true },
      { id: 'ct133', vmid: 133, host: 'kpro5' },
      { id: 'ct134', vmid: 134, host: 'kpro5', omitTools: ['nvidia-smi'] },
      { id: 'ct140', vmid: 140, host: 'kpro6', ownAddress: true },
    ],
  });
  const inv: InventoryInput = fleet.inventory();
  const containers = inv.containers ?? [];
  const ct129 = containers.find((c) => c.id === 'ct129');
  // ct132 logs in as a non-root user, for whom hidepid hides root's /proc entries.
  for (const c of containers) if (c.id === 'ct132') c.user = 'fleetuser';
  // ct133's inventory entry is mis-pinned: its address (and pinned key) are ct129's sshd.
  // ct140 (really on kpro6) is listed under kpro5: its GPUs are not kpro5's, and kpro5 has no vmid 140.
  const mispinned = containers.map((c) =>
    c.id === 'ct133' && ct129 ? { ...ct129, id: 'ct133', vmid: 133 } : c.id === 'ct140' ? { ...c, host: 'kpro5' } : c,
  );
  inventoryPath = join(fleet.dir, 'inventory.yaml');
  await writeFile(inventoryPath, stringify({ ...inv, containers: mispinned }));
  holder = await fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 4096 }], title: 'python3 train.py' });
  // kpro6's clock two minutes behind: a `date` stand-in first on its PATH (the machine's own clock is never touched).
  await writeFile(
    join(fleet.machine('kpro6').dir, 'bin', 'date'),
    '#!/bin/sh\nexec /bin/date -d "@$(( $(/bin/date +%s) - 120 ))" "$@"\n',
    { mode: 0o755 },
  );
}, 120_000);

afterAll(async () => {
  await fleet?.stop();
});

describe('gpu-medic doctor on the fleet (real sshd, namespaces, pinned keys)', () => {
  let report: DoctorReport;
  let code: number;

  beforeAll(async () => {
    const r = await doctor(['all', '--json']);
    code = r.code;
    report = JSON.parse(r.out) as DoctorReport;
  }, 120_000);

  it('exits 1: something would make unstick fail', () => {
    expect(code).toBe(1);
  });

  it('a healthy host and container pass every check they have', () => {
    expect(report.findings.filter((f) => f.machineId === 'ct129' && f.status !== 'ok')).toEqual([]);
    expect(find(report, 'kpro5', 'nvidia-smi').detail).toBe('driver 590.48.01, 3 GPUs');
    expect(find(report, 'ct129', 'GPU UUIDs').detail).toBe('all 1 on kpro5 (container→host index 0→2)');
    expect(find(report, 'ct129', 'pid namespace').detail).toMatch(
      /^login lands in pid:\[\d+\], the namespace of vmid 129's init$/,
    );
    expect(find(report, 'ct131', 'ssh').detail).toBe('pct exec 131 on kpro5 (pinned host key)');
  });

  it("each host's clock offset: kpro5 in step with the worker; kpro6 two minutes behind fails, saying its agent would refuse", () => {
    expect(find(report, 'kpro5', 'clock')).toMatchObject({ status: 'ok' });
    expect(find(report, 'kpro5', 'clock').detail).toMatch(
      /^offset [+-]\d+\.\d s \(±\d+\.\d s\) from the worker's clock$/,
    );
    const behind = find(report, 'kpro6', 'clock');
    expect(behind.status).toBe('fail');
    expect(behind.detail).toMatch(/^offset -1[12]\d\.\d s .*this host's agent refuses every destructive step$/);
  });

  it('persistence mode on a host GPU is a warning', () => {
    expect(find(report, 'kpro5', 'persistence')).toMatchObject({ status: 'warn', detail: 'on for GPU 1' });
  });

  it('a host without pct, lxc-info, perl and python3: each one fails', () => {
    expect(find(report, 'kpro6', 'pct')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('pct not found'),
    });
    expect(find(report, 'kpro6', 'pidfd kill')).toMatchObject({
      status: 'fail',
      detail: expect.stringMatching(/perl not found.*python3 not found/),
    });
    expect(find(report, 'kpro6', 'lxc-info').status).toBe('skip'); // no inventory container on kpro6
    expect(find(report, 'kpro6', 'nvidia-smi').status).toBe('ok');
  });

  it('a container without fuser fails that check only', () => {
    expect(find(report, 'ct130', 'fuser')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('fuser not found'),
    });
    expect(report.findings.filter((f) => f.machineId === 'ct130' && f.status === 'fail').map((f) => f.check)).toEqual([
      'fuser',
    ]);
  });

  it('a container (reached by pct exec) without timeout: timeout -k fails and the rest is skipped', () => {
    expect(find(report, 'ct131', 'timeout -k')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('timeout not found'),
    });
    expect(find(report, 'ct131', 'fuser').status).toBe('skip');
  });

  it('hidepid with a non-root login: /proc fails', () => {
    expect(find(report, 'ct132', '/proc')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('hidepid=invisible'),
    });
  });

  it("a container address pinned to another container's sshd: the pid namespace check fails", () => {
    const f = find(report, 'ct133', 'pid namespace');
    expect(f.status).toBe('fail');
    expect(f.detail).toMatch(
      /lands in pid:\[\d+\], but vmid 133's init \(PID \d+ on kpro5\) is in pid:\[\d+\]: this login is another machine/,
    );
  });

  it('nvidia-smi missing in a container: fail with where to get it; its GPU check is skipped, not passed', () => {
    expect(find(report, 'ct134', 'nvidia-smi')).toMatchObject({
      status: 'fail',
      detail: 'nvidia-smi not found',
      hint: expect.stringContaining('same version'),
    });
    expect(find(report, 'ct134', 'GPU UUIDs').status).toBe('skip');
  });

  it("a container listed under the wrong host: its GPU UUIDs are not that host's, and that host has no such vmid", () => {
    expect(find(report, 'ct140', 'GPU UUIDs')).toMatchObject({
      status: 'fail',
      detail: expect.stringMatching(/^container GPU 0 \(GPU-[0-9a-f-]+\) not on kpro5$/),
    });
    expect(find(report, 'kpro5', 'pct')).toMatchObject({
      status: 'fail',
      detail: 'not on this host: ct140 (vmid 140)',
    });
  });

  it('read-only: no process was signalled, the holder lives, and no GPU reset or persistence change ran', async () => {
    expect(fleet.signals()).toEqual([]);
    const alive = await Promise.race([
      holder.exited.then(() => false),
      new Promise<boolean>((r) => setTimeout(() => r(true), 100)),
    ]);
    expect(alive).toBe(true);
    for (const id of ['kpro5', 'kpro6', 'ct129', 'ct130', 'ct131', 'ct132', 'ct133', 'ct134', 'ct140']) {
      const log = fleet.commandLog(id);
      expect(log.filter((c) => c.via === 'ssh' && /\bkill\b|pidfd_send_signal\(|syscall\(424/.test(c.cmd))).toEqual([]);
      expect(
        log.filter((c) => c.via === 'tool' && c.cmd.startsWith('nvidia-smi') && /\s(-r|--gpu-reset|-pm)\b/.test(c.cmd)),
      ).toEqual([]);
    }
    expect(fleet.gpuMemory('kpro5').map((g) => g.usedMiB)).toEqual([0, 0, 4096]);
  });

  it('one machine by name: its table on stdout and exit 0 when nothing fails there', async () => {
    const r = await doctor(['ct129']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^Machine\s+Check\s+Result\s+Detail$/m);
    expect(r.out).toMatch(/^ct129\s+pid namespace\s+ok\s+login lands in/m);
    expect(r.out).not.toMatch(/^kpro5/m); // its host is read for the comparison, not reported
    expect(r.out).toContain('All checks passed on 1 machine.');
  }, 60_000);

  it('an unknown machine: a plain answer with a suggestion, exit 2, nothing run', async () => {
    const before = fleet.commandLog('kpro5').length;
    const r = await doctor(['ct12']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/No machine called "ct12" in the inventory; did you mean ct1\d\d\?/);
    expect(fleet.commandLog('kpro5').length).toBe(before);
  });
});
