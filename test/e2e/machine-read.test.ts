/**
 * One SSH session per machine read (so reading a whole fleet stays cheap): a status read of a host or
 * container is one sshd session that runs every query (each with its own timeout), and each query is still
 * reported on its own: a missing `free` or a broken driver fails its own part, not the read.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { startStack, type Stack } from '../harness/stack.ts';

describe('a machine read is one SSH session with one answer per query', () => {
  let s: Stack;
  let log: IncidentLog;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [
          { id: 'kpro5', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
          { id: 'kpro6', gpus: 2, omitTools: ['free'] },
          { id: 'kpro7', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 100 },
        ],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
    });
    log = new IncidentLog(s.redis, s.prefix);
  });
  afterAll(async () => {
    await s?.stop();
  });

  async function statusOf(
    machine: string,
  ): Promise<{ sessions: string[]; tools: string[]; snapshot: Extract<AnyLoggedEvent, { type: 'snapshot' }> }> {
    await s.quiet();
    const before = s.fleet.commandLog(machine).length;
    const r = await s.slash(`status ${machine}`);
    expect(r.incidentId, r.ackText).not.toBeNull();
    await s.threadOf(r.incidentId as string, {
      timeoutMs: 30_000,
      done: (t) => /done|partial|failed/i.test(t[0]?.text ?? ''),
    });
    await s.quiet();
    const added = s.fleet.commandLog(machine).slice(before);
    const events = await log.events(r.incidentId as string);
    const snapshot = events.find((e): e is Extract<AnyLoggedEvent, { type: 'snapshot' }> => e.type === 'snapshot');
    if (!snapshot) throw new Error(`no snapshot event: ${JSON.stringify(events)}`);
    return {
      sessions: added.filter((e) => e.via === 'ssh').map((e) => e.cmd),
      tools: added.filter((e) => e.via === 'tool').map((e) => e.cmd),
      snapshot,
    };
  }

  it('a host read: one session, the GPU list, compute apps and RAM each answered and logged with its own exit code', async () => {
    const { sessions, tools, snapshot } = await statusOf('kpro5');
    expect(sessions).toHaveLength(1);
    expect(tools.filter((t) => t.startsWith('nvidia-smi --query-gpu='))).toHaveLength(1);
    expect(tools.filter((t) => t.startsWith('nvidia-smi --query-compute-apps='))).toHaveLength(1);
    expect(tools.filter((t) => t.startsWith('free'))).toHaveLength(1);
    expect(snapshot.snapshot.gpus).toHaveLength(2);
    expect(snapshot.snapshot.ram?.totalBytes).toBe(449 * 1024 ** 3);
    expect(snapshot.commands.map((c) => [c.command.replace(/^timeout -k \d+ \d+ /, '').split(' ')[0], c.code])).toEqual(
      [
        ['nvidia-smi', 0],
        ['nvidia-smi', 0],
        ['free', 0],
      ],
    );
  });

  it('a container read: one session, and the device holders come back with the rest; a second reads their command lines (root causes)', async () => {
    const h = await s.fleet.spawnHolder('ct129', { gpus: [{ index: 1, mib: 4096 }], title: 'python3 train.py' });
    const { sessions, snapshot } = await statusOf('ct129');
    // With something holding a GPU, the status read also runs the read-procs template on those PIDs (to say
    // why).
    expect(sessions).toHaveLength(2);
    // A container's status also reads its host's GPU map (to place its holders on GPUs),
    // logged under the host's id; the container's own five stay as they were.
    const own = snapshot.commands.filter((c) => c.machineId === 'ct129');
    expect(own).toHaveLength(5);
    // Its own agent's read-procs verb, on the holder's container PID (the container is reached at its own address).
    expect(own[4]?.command).toMatch(new RegExp(`^gpu-medic 1 \\d+ host procs ${h.containerPid}$`));
    expect(snapshot.commands.filter((c) => c.machineId !== 'ct129').every((c) => c.machineId === 'kpro5')).toBe(true);
    expect(snapshot.snapshot.holders.map((x) => x.pid)).toContain(h.containerPid);
  });

  it('a machine without free: its part fails on its own (exit 127), the GPUs are still read', async () => {
    const { sessions, snapshot } = await statusOf('kpro6');
    expect(sessions).toHaveLength(1);
    expect(snapshot.snapshot.gpus).toHaveLength(2);
    expect(snapshot.snapshot.ram).toBeNull();
    expect(snapshot.commands.map((c) => c.code)).toEqual([0, 0, 127]);
  });

  it('a broken driver: the GPU error is its own, and RAM is still read', async () => {
    await s.fleet.setGpuError('kpro7', 'nvml_version_mismatch');
    try {
      const { snapshot } = await statusOf('kpro7');
      expect(snapshot.snapshot.gpuError?.kind).toBe('nvml_version_mismatch');
      expect(snapshot.snapshot.ram?.usedBytes).toBe(100 * 1024 ** 3);
      expect(snapshot.commands.map((c) => c.code)).toEqual([18, 18, 0]);
    } finally {
      await s.fleet.setGpuError('kpro7', null);
    }
  });
});
