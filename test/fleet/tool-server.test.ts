/**
 * The fleet's tool server (so the bench measures gpu-medic, not the simulator): bin/nvidia-smi and bin/free
 * are a small C client asking one server per fleet, instead of a Node start per call. Its answers must be the
 * tool's, byte for byte: stdout, stderr and exit code, on a host and inside a container, for every state the
 * fleet can be put in, compared with the same tool run as its own Node process on the same machine (inside
 * the container's namespaces for the container). One served call also goes over real SSH.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shellQuote } from '../../src/text/shell-quote.ts';
import { buildFleetTools } from '../harness/fleet/build-tools.ts';
import { type Fleet, startFleet } from '../harness/fleet/index.ts';
import { onMachine, type SshResult } from './ssh-run.ts';

/** The table's clock line and XML timestamp are the time of the call; nothing else may differ. */
function normal(r: SshResult): SshResult {
  const clock = /^(?:\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}|\d{4}\/\d\d\/\d\d \d\d:\d\d:\d\d\.\d{3})/gm;
  return {
    code: r.code,
    stdout: r.stdout
      .replace(clock, '<time>')
      .replace(/<timestamp>[^<]*<\/timestamp>/g, '<timestamp/>')
      .replace(/\d{4}\/\d\d\/\d\d \d\d:\d\d:\d\d\.\d{3}/g, '<time>'),
    stderr: r.stderr,
  };
}

const CALLS: Array<[string, string]> = [
  ['nvidia-smi', ''],
  [
    'nvidia-smi',
    '--query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits',
  ],
  ['nvidia-smi', '--query-gpu=index,memory.used --format=csv'],
  ['nvidia-smi', '--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits'],
  ['nvidia-smi', '--query-gpu=no.such.field --format=csv'],
  ['nvidia-smi', '--query-gpu=index'],
  ['nvidia-smi', '-q -x'],
  ['nvidia-smi', '-q'],
  ['nvidia-smi', '-i 1'],
  ['nvidia-smi', '-i 7'],
  ['nvidia-smi', '--bogus'],
  ['free', '-b'],
  ['free', ''],
  ['free', '-h'],
];

describe('fleet tool server: the same bytes as the standalone tool', () => {
  let fleet: Fleet;
  let standalone: string;
  beforeAll(async () => {
    fleet = await startFleet({
      // The simulation itself is under test: its hosts take any shell line (the agent's tests are agent/test).
      access: 'shell',
      hosts: [{ id: 'kpro5', gpus: 4, ramTotalGiB: 449, ramUsedGiB: 440 }],
      containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
    });
    standalone = (await buildFleetTools()).standalone;
  });
  afterAll(async () => {
    await fleet?.stop();
  });

  /** A shell command on the machine: on the host as is, in a container inside its init's PID and mount namespaces. */
  function on(machine: string, command: string): Promise<SshResult> {
    const m = fleet.machine(machine);
    const env = { PATH: `${join(m.dir, 'bin')}:/usr/sbin:/usr/bin:/sbin:/bin` };
    const [file, args] =
      m.initHostPid === null
        ? ['sh', ['-c', command]]
        : ['nsenter', ['-t', String(m.initHostPid), '-p', '-m', '--', 'sh', '-c', command]];
    return new Promise((resolve) => {
      execFile(file, args, { env, encoding: 'utf8', timeout: 30_000 }, (err, stdout, stderr) => {
        resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : null, stdout, stderr });
      });
    });
  }

  async function both(
    machine: string,
    tool: string,
    args: string,
  ): Promise<{ served: SshResult; reference: SshResult }> {
    const dir = fleet.machine(machine).dir;
    const served = await on(machine, `${tool} ${args}`);
    const reference = await on(
      machine,
      `FLEET_MACHINE_DIR=${shellQuote(dir)} ${shellQuote(process.execPath)} ${shellQuote(standalone)} ${tool} ${args}`,
    );
    return { served: normal(served), reference: normal(reference) };
  }

  /** Every call on both machines, at once (read-only calls: their order does not matter). */
  async function compareAll(label: string): Promise<void> {
    const runs = ['kpro5', 'ct129'].flatMap((machine) =>
      CALLS.map(async ([tool, args]) => ({
        what: `${label}: ${machine}: ${tool} ${args}`,
        ...(await both(machine, tool, args)),
      })),
    );
    for (const r of await Promise.all(runs)) expect(r.served, r.what).toEqual(r.reference);
  }

  it('idle, then with holders, a leak and persistence: every call answers alike on the host and in the container', async () => {
    await compareAll('idle');
    await fleet.spawnHolder('ct129', {
      gpus: [
        { index: 0, mib: 96413 },
        { index: 2, mib: 1200 },
      ],
      title: 'sglang::scheduler_TP0',
    });
    await fleet.spawnHolder('kpro5', { gpus: [{ index: 1, mib: 40960 }], title: 'python3 train.py' });
    await fleet.setLeak('kpro5', 3, 8192);
    await compareAll('held');
    // A state-changing call through the server changes the state the standalone tool then reads.
    const pm = await onMachine(fleet, 'kpro5', 'nvidia-smi -i 3 -pm 1; echo rc=$?');
    expect(pm.stdout).toContain('Enabled persistence mode for GPU');
    await compareAll('persistence on');
  }, 180_000);

  it('GPU errors and a broken driver answer alike (texts and exit codes)', async () => {
    try {
      await fleet.setGpuError('kpro5', 'gpu_lost', 2);
      await compareAll('gpu lost');
      await fleet.setGpuError('kpro5', 'nvml_version_mismatch');
      await compareAll('version mismatch');
    } finally {
      await fleet.setGpuError('kpro5', null);
    }
    const r = await onMachine(fleet, 'kpro5', 'nvidia-smi --query-gpu=index --format=csv,noheader; echo rc=$?');
    expect(r.stdout).toBe('0\n1\n2\n3\nrc=0\n');
  }, 180_000);

  it("a hung driver: the served call never answers and ends only by the caller's timeout, as the real tool", async () => {
    await fleet.setHang('kpro5', true);
    try {
      const r = await onMachine(fleet, 'ct129', 'timeout -k 1 2 nvidia-smi; echo rc=$?');
      expect(r.stdout).toBe('rc=124\n');
    } finally {
      await fleet.setHang('kpro5', false);
    }
    const after = await onMachine(fleet, 'ct129', 'nvidia-smi --query-gpu=index --format=csv,noheader; echo rc=$?');
    expect(after.stdout).toBe('0\n1\n2\n3\nrc=0\n');
  });
});
