/**
 * The test fleet against real clients: OpenSSH with pinned keys, real ps/kill/fuser, and the
 * project's own parsers reading what the fake nvidia-smi / pct print.
 * One host (8 GPUs), one container with its own sshd (ct129), one reached only via pct (ct130).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { InventorySchema } from '../../src/config/inventory.ts';
import { parseFuser, parseNvidiaOutput, parsePctList, parsePctStatus } from '../../src/gpu/parse/index.ts';
import type { ParsedOutput } from '../../src/gpu/types.ts';
import { readFixture } from '../gpu/fixture-files.ts';
import { type Fleet, nsPids, startFleet } from '../harness/fleet/index.ts';
import { procStartTime } from '../harness/fleet/state.ts';
import { eventually, onMachine, sleep } from './ssh-run.ts';

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({
    // The simulation itself is under test: its hosts take any shell line (the agent's tests are agent/test).
    access: 'shell',
    hosts: [{ id: 'kpro5', gpus: 8, ramTotalGiB: 449, ramUsedGiB: 20 }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      { id: 'ct130', vmid: 130, host: 'kpro5' },
    ],
  });
});

afterAll(async () => {
  await fleet?.stop();
});

// Each test starts from no workload: a failed test must not leave its holders to the next.
afterEach(async () => {
  const live = fleet.processes().filter((p) => procStartTime('/proc', p.hostPid) === p.startTime);
  for (const p of live) process.kill(p.hostPid, 'SIGKILL');
  await Promise.all(live.map((p) => p.exited));
});

function parsed(text: string): ParsedOutput {
  const r = parseNvidiaOutput(text);
  if (!r.ok) throw new Error(`unparseable nvidia-smi output: ${r.error.reason}\n${text}`);
  return r.value;
}

function usedByIndex(p: ParsedOutput): Record<number, number | null> {
  return Object.fromEntries(p.gpus.map((g) => [g.index ?? -1, g.memoryUsedMiB]));
}

function stateByIndex(): Record<number, number> {
  return Object.fromEntries(fleet.gpuMemory('kpro5').map((g) => [g.index, g.usedMiB]));
}

describe('inventory and SSH', () => {
  it('gives an inventory the schema accepts, pinning the keys the machines really present', () => {
    const inv = InventorySchema.parse(fleet.inventory());
    expect(inv.hosts.map((h) => h.id)).toEqual(['kpro5']);
    expect(inv.containers.map((c) => [c.id, c.vmid, c.address ?? null])).toEqual([
      ['ct129', 129, '127.0.0.1'],
      ['ct130', 130, null],
    ]);
    // Fingerprints from the real keys in known_hosts, computed by ssh-keygen.
    const listed = execFileSync('ssh-keygen', ['-l', '-f', fleet.knownHostsPath], { encoding: 'utf8' });
    expect(listed).toContain(inv.hosts[0]?.hostKeys[0]);
    expect(listed).toContain(inv.containers[0]?.hostKeys?.[0]);
    expect(inv.hosts[0]?.hostKeys[0]).not.toBe(inv.containers[0]?.hostKeys?.[0]);
  });

  it('runs commands on the host and in the container with the fleet key and strict host key checking', async () => {
    const host = await onMachine(fleet, 'kpro5', 'echo hi; command -v nvidia-smi; command -v pct');
    expect(host.code).toBe(0);
    expect(host.stdout).toMatch(/^hi\n.*\/m\/kpro5\/bin\/nvidia-smi\n.*\/m\/kpro5\/bin\/pct\n$/);
    const ct = await onMachine(fleet, 'ct129', 'hostname; command -v pct; echo rc=$?');
    expect(ct.stdout).toBe('ct129\nrc=127\n');
    const log = fleet.commandLog('kpro5');
    expect(log.some((e) => e.via === 'ssh' && e.cmd === 'echo hi; command -v nvidia-smi; command -v pct')).toBe(true);
  });
});

describe('nvidia-smi from the state', () => {
  it('table and CSV on an idle host: 8 GPUs, 0 MiB, totals from the state', async () => {
    const table = await onMachine(fleet, 'kpro5', 'nvidia-smi');
    expect(table.code).toBe(0);
    const t = parsed(table.stdout);
    expect(t.gpus).toHaveLength(8);
    expect(t.gpus.every((g) => g.memoryUsedMiB === 0 && g.memoryTotalMiB === 143771)).toBe(true);
    expect(t.processes).toEqual([]);
    const csv = await onMachine(
      fleet,
      'kpro5',
      'nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits',
    );
    expect(csv.stdout.split('\n')[0]).toBe('0, 0, 143771');
    expect(csv.stdout.trim().split('\n')).toHaveLength(8);
  });

  it('shows a holder by host PID on the host, its memory in the container without processes, and frees it when killed', async () => {
    const h = await fleet.spawnHolder('ct129', {
      gpus: [
        { index: 0, mib: 96413 },
        { index: 2, mib: 96417 },
      ],
      title: 'sglang::scheduler_TP0',
    });
    expect(h.containerPid).not.toBeNull();
    expect(h.containerPid).not.toBe(h.hostPid);
    expect(h.cmdline).toBe('sglang::scheduler_TP0');
    expect(stateByIndex()).toMatchObject({ 0: 96413, 1: 0, 2: 96417 });

    const hostTable = parsed((await onMachine(fleet, 'kpro5', 'nvidia-smi')).stdout);
    expect(usedByIndex(hostTable)).toEqual(stateByIndex());
    expect(hostTable.processes.map((p) => [p.gpuIndex, p.pid, p.usedMiB])).toEqual([
      [0, h.hostPid, 96413],
      [2, h.hostPid, 96417],
    ]);
    const apps = await onMachine(
      fleet,
      'kpro5',
      'nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits',
    );
    expect(
      apps.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(', ').slice(1)),
    ).toEqual([
      [String(h.hostPid), '96413'],
      [String(h.hostPid), '96417'],
    ]);

    // Container: same global memory, empty Processes panel, header-only compute apps.
    const ctTable = await onMachine(fleet, 'ct129', 'nvidia-smi');
    expect(usedByIndex(parsed(ctTable.stdout))).toEqual(stateByIndex());
    expect(parsed(ctTable.stdout).processes).toEqual([]);
    expect(ctTable.stdout).not.toContain(String(h.hostPid));
    const ctApps = await onMachine(fleet, 'ct129', 'nvidia-smi --query-compute-apps=pid,used_gpu_memory --format=csv');
    expect(ctApps.stdout).toBe('pid, used_gpu_memory [MiB]\n');
    // Through pct exec (host PATH kept) the container's own nvidia-smi answers.
    const viaPct = await onMachine(
      fleet,
      'kpro5',
      'pct exec 129 -- nvidia-smi --query-compute-apps=pid --format=csv,noheader',
    );
    expect(viaPct).toMatchObject({ code: 0, stdout: '' });

    // kill -9 from inside the container, by container PID: memory goes.
    const kill = await onMachine(fleet, 'ct129', `kill -9 ${h.containerPid}`);
    expect(kill.code).toBe(0);
    expect(await h.exited).toEqual({ code: null, signal: 'SIGKILL' });
    const after = await onMachine(fleet, 'kpro5', 'nvidia-smi --query-gpu=index,memory.used --format=csv,noheader');
    expect(after.stdout.split('\n').slice(0, 3)).toEqual(['0, 0 MiB', '1, 0 MiB', '2, 0 MiB']);
    expect(fleet.signals().filter((s) => s.hostPid === h.hostPid)).toMatchObject([
      {
        machine: 'ct129',
        containerPid: h.containerPid,
        signal: 'SIGKILL',
        cmdline: 'sglang::scheduler_TP0',
        kind: 'holder',
      },
    ]);
  });

  it('a holder under a launcher (parentTitle): the rank is the fleet process, its parent shows the launch line, holds no device and dies with it', async () => {
    const launch = 'python3 -m sglang.launch_server --tp-size 8 --enable-hierarchical-cache --hicache-size 300';
    const h = await fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 1000 }],
      title: 'sglang::scheduler_TP0',
      parentTitle: launch,
    });
    expect(h.cmdline).toBe('sglang::scheduler_TP0');
    const status = readFileSync(`/proc/${h.hostPid}/status`, 'utf8');
    const ppid = Number(/^PPid:\s+(\d+)$/m.exec(status)?.[1]);
    expect(
      readFileSync(`/proc/${ppid}/cmdline`, 'utf8')
        .split('\0')
        .filter((w) => w !== '')
        .join(' '),
    ).toBe(launch);
    // Inside the container the parent is a container process too (not its init), so a walk up from the rank finds it.
    const ctPpid = (
      await onMachine(fleet, 'ct129', `sed -n 's/^PPid:[[:space:]]*//p' /proc/${h.containerPid}/status`)
    ).stdout.trim();
    expect(Number(ctPpid)).toBeGreaterThan(1);
    expect((await onMachine(fleet, 'ct129', `tr '\\0' ' ' </proc/${ctPpid}/cmdline`)).stdout.trim()).toBe(launch);
    const fuser = parseFuser((await onMachine(fleet, 'ct129', 'fuser -v /dev/nvidia* 2>&1; true')).stdout);
    expect(fuser.ok && fuser.value.holders.map((x) => x.pid)).not.toContain(Number(ctPpid));
    process.kill(h.hostPid, 'SIGKILL');
    await h.exited;
    await eventually(() => procStartTime('/proc', ppid) === null, 10_000);
  });

  it('keeps a killed holder memory for dieDelayMs, then frees it', async () => {
    const h = await fleet.spawnHolder('kpro5', { gpus: [{ index: 3, mib: 5000 }], dieDelayMs: 1500 });
    process.kill(h.hostPid, 'SIGKILL');
    await h.exited;
    const t0 = Date.now();
    expect(fleet.gpuMemory('kpro5')[3]?.usedMiB).toBe(5000);
    const soon = parsed((await onMachine(fleet, 'kpro5', 'nvidia-smi')).stdout);
    if (Date.now() - t0 < 1400) {
      expect(usedByIndex(soon)[3]).toBe(5000);
      expect(soon.processes).toEqual([]); // the process is gone; only its memory lingers
    }
    await eventually(() => fleet.gpuMemory('kpro5')[3]?.usedMiB === 0, 4000);
    expect(Date.now() - t0).toBeGreaterThan(1000);
  });

  it('nvidia-smi -r: not supported in a container; refused on the host while held; clears a leak once free', async () => {
    const ct = await onMachine(fleet, 'ct129', 'nvidia-smi -r -i 1');
    expect(ct).toMatchObject({ code: 3, stdout: 'Resetting GPU 00000000:02:00.0 is not supported.\n' });
    await fleet.setLeak('kpro5', 1, 4242);
    const h = await fleet.spawnHolder('ct130', { gpus: [{ index: 1, mib: 100 }] });
    const refused = await onMachine(fleet, 'kpro5', 'nvidia-smi -r -i 1');
    expect(refused.code).toBe(255);
    expect(refused.stdout).toContain('GPU 00000000:02:00.0: In use by another client');
    process.kill(h.hostPid, 'SIGKILL');
    await h.exited;
    expect(fleet.gpuMemory('kpro5')[1]?.usedMiB).toBe(4242); // leak: no process, memory held
    const ok = await onMachine(fleet, 'kpro5', 'nvidia-smi -r -i 1');
    expect(ok).toMatchObject({ code: 0, stdout: 'GPU 00000000:02:00.0 was successfully reset.\nAll done.\n' });
    expect(fleet.gpuMemory('kpro5')[1]?.usedMiB).toBe(0);
    expect(fleet.commandLog('ct129').some((e) => e.via === 'tool' && e.cmd === 'nvidia-smi -r -i 1')).toBe(true);
  });

  it('persistence mode on refuses a reset until -pm 0', async () => {
    const on = await onMachine(fleet, 'kpro5', 'nvidia-smi -pm 1 -i 4');
    expect(on).toMatchObject({ code: 0, stdout: 'Enabled persistence mode for GPU 00000000:05:00.0.\nAll done.\n' });
    expect((await onMachine(fleet, 'kpro5', 'nvidia-smi -r -i 4')).code).toBe(255);
    expect((await onMachine(fleet, 'ct129', 'nvidia-smi -pm 0 -i 4')).code).toBe(4);
    expect((await onMachine(fleet, 'kpro5', 'nvidia-smi -pm 0 -i 4; nvidia-smi -r -i 4')).code).toBe(0);
  });

  it('prints the error texts with their exit codes, and hangs on demand', async () => {
    await fleet.setGpuError('kpro5', 'nvml_version_mismatch');
    const mm = await onMachine(fleet, 'ct129', 'nvidia-smi');
    expect(mm).toMatchObject({ code: 18, stdout: 'Failed to initialize NVML: Driver/library version mismatch\n' });
    await fleet.setGpuError('kpro5', null);
    await fleet.setGpuError('kpro5', 'gpu_lost', 6);
    const lost = await onMachine(fleet, 'kpro5', 'nvidia-smi --query-gpu=index --format=csv');
    expect(lost.code).toBe(15);
    expect(lost.stdout).toContain('GPU0000:07:00.0: GPU is lost');
    expect(parsed(lost.stdout).error?.kind).toBe('gpu_lost');
    await fleet.setGpuError('kpro5', null);
    expect((await onMachine(fleet, 'kpro5', 'nvidia-smi')).code).toBe(0);

    await fleet.setHang('kpro5', true);
    const t0 = Date.now();
    const hung = await onMachine(fleet, 'ct129', 'timeout 1 nvidia-smi; echo rc=$?');
    expect(hung.stdout).toBe('rc=124\n');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
    await fleet.setHang('kpro5', false);
    expect((await onMachine(fleet, 'ct129', 'timeout 5 nvidia-smi -q -x')).stdout).toContain(
      '<attached_gpus>8</attached_gpus>',
    );
  });

  it('free -b reports the state RAM', async () => {
    await fleet.setRam('kpro5', { totalGiB: 449, usedGiB: 439 });
    const free = await onMachine(fleet, 'kpro5', 'free -b');
    const mem = free.stdout.split('\n')[1]?.trim().split(/\s+/);
    expect(mem?.slice(0, 3)).toEqual(['Mem:', String(449 * 1024 ** 3), String(439 * 1024 ** 3)]);
  });
});

describe('containers', () => {
  it('pct list / status / exec in the real formats, with the command exit status', async () => {
    const r = await onMachine(fleet, 'kpro5', 'pct list');
    expect(r.stdout).toBe(
      'VMID       Status     Lock         Name                \n' +
        '129        running                 ct129               \n' +
        '130        running                 ct130               \n',
    );
    const list = parsePctList(r.stdout);
    expect(list.ok && list.value.map((c) => [c.vmid, c.status, c.name])).toEqual([
      [129, 'running', 'ct129'],
      [130, 'running', 'ct130'],
    ]);
    const st = await onMachine(fleet, 'kpro5', 'pct status 130');
    expect(parsePctStatus(st.stdout)).toEqual({ ok: true, value: 'running' });
    expect((await onMachine(fleet, 'kpro5', "pct exec 130 -- sh -c 'exit 7'")).code).toBe(7);
    expect((await onMachine(fleet, 'kpro5', "pct exec 130 -- sh -c 'kill -9 $$'; echo rc=$?")).stdout).toBe('rc=137\n');
    expect((await onMachine(fleet, 'kpro5', 'pct exec 130 -- hostname')).stdout).toBe('ct130\n');
  });

  it('pct exec sees container PIDs; NSpid on the host maps host to container PID', async () => {
    const h = await fleet.spawnHolder('ct130', { gpus: [{ index: 5, mib: 2048 }], title: 'sglang::scheduler_TP1' });
    const ps = await onMachine(fleet, 'kpro5', 'pct exec 130 -- ps -eo pid=,args=');
    const rows = ps.stdout
      .trim()
      .split('\n')
      .map((l) => l.trim());
    expect(rows[0]).toBe('1 /sbin/init');
    expect(rows).toContain(`${h.containerPid} sglang::scheduler_TP1`);
    expect(rows.some((r) => r.startsWith(`${h.hostPid} `))).toBe(false);
    expect(nsPids(h.hostPid)).toEqual([h.hostPid, h.containerPid]);
    const status = await onMachine(fleet, 'kpro5', `grep NSpid /proc/${h.hostPid}/status`);
    expect(status.stdout).toBe(`NSpid:\t${h.hostPid}\t${h.containerPid}\n`);
    // The other container sees neither.
    const other = await onMachine(fleet, 'ct129', 'ps -eo args=');
    expect(other.stdout).not.toContain('sglang::scheduler_TP1');
    process.kill(h.hostPid, 'SIGKILL');
    await h.exited;
  });

  it('fuser -v /dev/nvidia* in the container: real kernel mount rows plus the holder by container PID', async () => {
    const h = await fleet.spawnHolder('ct129', {
      gpus: [
        { index: 0, mib: 1000 },
        { index: 1, mib: 1000 },
      ],
      title: 'python',
    });
    const r = await onMachine(fleet, 'ct129', 'fuser -v /dev/nvidia* 2>&1; echo rc=$?');
    expect(r.stdout.endsWith('rc=0\n')).toBe(true);
    const text = r.stdout.replace(/rc=0\n$/, '');
    const fixture = readFixture('fuser/container_4gpu_kernel-mount_with-orphan-python.txt');
    // Same line shapes as the real capture: header, kernel mount rows, holder rows.
    expect(text).toContain('                     USER        PID ACCESS COMMAND\n');
    expect(fixture).toContain('                     USER        PID ACCESS COMMAND\n');
    expect(text).toContain('/dev/nvidia0:        root     kernel mount /dev/nvidia0\n');
    expect(text).toContain(
      `/dev/nvidia-uvm-tools:\n                     root     kernel mount /dev/nvidia-uvm-tools\n`,
    );
    expect(text).toMatch(new RegExp(`\\n {21}root {6,}${h.containerPid} F\\.\\.\\.m python\\n`));
    const p = parseFuser(text);
    if (!p.ok) throw new Error(p.error.reason);
    expect(p.value.kernelMounts.sort()).toEqual(
      [
        '/dev/nvidia-uvm',
        '/dev/nvidia-uvm-tools',
        '/dev/nvidiactl',
        ...Array.from({ length: 8 }, (_, i) => `/dev/nvidia${i}`),
      ].sort(),
    );
    expect([...new Set(p.value.holders.map((x) => x.pid))]).toEqual([h.containerPid]);
    expect(p.value.holders.map((x) => x.device).sort()).toEqual([
      '/dev/nvidia-uvm',
      '/dev/nvidia0',
      '/dev/nvidia1',
      '/dev/nvidiactl',
    ]);
    process.kill(h.hostPid, 'SIGKILL');
    await h.exited;
  });
});

describe('signals and processes', () => {
  it('records catchable signals with the sender, SIGKILL deaths, and never a bystander that was left alone', async () => {
    const bystander = await fleet.spawnBystander('ct129', { title: 'python3 /opt/monitor.py' });
    const h = await fleet.spawnHolder('ct129', {
      gpus: [{ index: 7, mib: 777 }],
      title: 'sglang::scheduler_TP7',
      ignoreTerm: true,
      user: 'fleetuser',
    });
    const ps = await onMachine(fleet, 'ct129', `ps -o user:16=,pid=,comm=,args= -p ${h.containerPid}`);
    expect(ps.stdout.trim().split(/\s+/)).toEqual([
      'fleetuser',
      String(h.containerPid),
      'sglang::schedul',
      'sglang::scheduler_TP7',
    ]);

    const term = await onMachine(
      fleet,
      'ct129',
      `kill ${h.containerPid}; sleep 0.2; kill -0 ${h.containerPid} && echo alive`,
    );
    expect(term.stdout).toBe('alive\n'); // ignores SIGTERM
    const termRec = fleet.signals().find((s) => s.hostPid === h.hostPid && s.signal === 'SIGTERM');
    expect(termRec).toMatchObject({ machine: 'ct129', containerPid: h.containerPid, cmdline: 'sglang::scheduler_TP7' });
    expect(termRec?.by).toBeGreaterThan(0); // the sender, as a container PID

    await onMachine(fleet, 'kpro5', `kill -KILL ${h.hostPid}`);
    await h.exited;
    await eventually(() => fleet.signals().some((s) => s.hostPid === h.hostPid && s.signal === 'SIGKILL'));
    expect(fleet.signals().some((s) => s.hostPid === bystander.hostPid)).toBe(false);
    expect(fleet.gpuMemory('kpro5')[7]?.usedMiB).toBe(0);

    await onMachine(fleet, 'ct129', `kill -USR1 ${bystander.containerPid}`);
    await bystander.exited;
    expect(fleet.signals().filter((s) => s.hostPid === bystander.hostPid)).toMatchObject([
      { kind: 'bystander', signal: 'SIGUSR1', cmdline: 'python3 /opt/monitor.py' },
    ]);
  });

  // The crash rows rely on this order (test/faults/lib/run-signals.ts): a run that starts after its
  // previous run awaited its holders' exits finds their SIGKILL deaths already recorded.
  it('a SIGKILL death is in signals() by the time its exited resolves, stamped no later than that', async () => {
    for (const machine of ['kpro5', 'ct130', 'ct129']) {
      const h = await fleet.spawnHolder(machine, { gpus: [{ index: 6, mib: 512 }], ignoreTerm: true });
      process.kill(h.hostPid, 'SIGKILL');
      await h.exited;
      const at = Date.now();
      const deaths = fleet.signals().filter((s) => s.id === h.id);
      expect(deaths, machine).toMatchObject([{ signal: 'SIGKILL', by: null, hostPid: h.hostPid }]);
      expect(deaths[0]?.ts, machine).toBeLessThanOrEqual(at);
    }
  });
});

describe('container membership and permissions', () => {
  it('lxc-info gives the init PID; /proc/<pid>/cgroup and ns/pid tie a holder to its container', async () => {
    const h = await fleet.spawnHolder('ct130', { gpus: [{ index: 6, mib: 64 }] });
    const init = fleet.machine('ct130').initHostPid;
    const info = await onMachine(fleet, 'kpro5', 'lxc-info -n 130 -p; lxc-info -n 130 -p -H');
    expect(info.stdout).toBe(`PID:            ${init}\n${init}\n`);
    const ns = await onMachine(
      fleet,
      'kpro5',
      `readlink /proc/${h.hostPid}/ns/pid /proc/${init}/ns/pid /proc/1/ns/pid`,
    );
    const [holderNs, initNs, hostNs] = ns.stdout.trim().split('\n');
    expect(holderNs).toBe(initNs);
    expect(holderNs).not.toBe(hostNs);
    const cg = await onMachine(fleet, 'kpro5', `cat /proc/${h.hostPid}/cgroup /proc/${init}/cgroup`);
    if (fleet.machine('ct130').cgroup !== null) {
      // Each of the two is in the container's cgroup (one line per hierarchy: one on v2, several on v1).
      for (const pid of [h.hostPid, init]) expect(readFileSync(`/proc/${pid}/cgroup`, 'utf8')).toMatch(/\/lxc\/130\//);
      // Whatever pct exec runs lands there too: in the cgroups of the container's init. A real LXC
      // container has a cgroup namespace of its own, rooted there: inside, both read `/`.
      const viaPct = await onMachine(
        fleet,
        'kpro5',
        'pct exec 130 -- cat /proc/self/cgroup; pct exec 130 -- cat /proc/1/cgroup',
      );
      const lines = viaPct.stdout.trim().split('\n');
      const [self, ofInit] = [lines.slice(0, lines.length / 2), lines.slice(lines.length / 2)];
      // Same cgroup as the init or one below it (lxc-attach uses `.lxc` under it on cgroup v2).
      expect(self.map((l, i) => l.startsWith(ofInit[i] ?? '\0'))).toEqual(self.map(() => true));
      if (fleet.machine('ct130').engine === 'namespaces') expect(viaPct.stdout).toContain('/lxc/130/');
    }
    expect(cg.stdout).not.toContain('/lxc/129/');
  });

  it('a non-root user in the container cannot kill root holders (the S3 container step)', async () => {
    const h = await fleet.spawnHolder('ct129', { gpus: [{ index: 4, mib: 4096 }], title: 'sglang::scheduler_TP4' });
    const r = await onMachine(fleet, 'ct129', `id -un; kill -9 ${h.containerPid}`, 'fleetuser');
    expect(r.stdout).toBe('fleetuser\n');
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/Operation not permitted/);
    expect(procStartTime('/proc', h.hostPid)).toBe(h.startTime);
    expect(fleet.gpuMemory('kpro5')[4]?.usedMiB).toBe(4096);
  });
});

describe('host keys', () => {
  it('replaceHostKey: the pinned known_hosts now fails, the inventory keeps the old pin', async () => {
    const before = fleet.machine('ct129').hostKeyFingerprint;
    const pinned = fleet.inventory().containers?.find((c) => c.id === 'ct129')?.hostKeys?.[0];
    expect(pinned).toBe(before);
    await fleet.replaceHostKey('ct129');
    const after = fleet.machine('ct129');
    expect(after.hostKeyFingerprint).not.toBe(before);
    expect(fleet.inventory().containers?.find((c) => c.id === 'ct129')?.hostKeys?.[0]).toBe(pinned);
    const r = await onMachine(fleet, 'ct129', 'true');
    expect(r.code).toBe(255);
    expect(r.stderr).toMatch(/REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed/);
    await sleep(0);
  });
});
