/**
 * The post-mortem Markdown is the thread, better organised, so nothing the thread said is lost. Rendered from
 * the seed incident's status read and from an S3-like unstick, it carries the thread's facts: the root causes
 * the Why lines said, what was still open when it closed (RAM pressure) instead of "Nothing left to do", and
 * for each command the machine it really ran on (a container reached through `pct exec` on its host is the
 * container, not "on container kpro5").
 */
import { describe, expect, it } from 'vitest';
import { causesInSnapshot } from '../../src/gpu/snapshot-causes.ts';
import { GIB, type MachineSnapshot } from '../../src/gpu/snapshot.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { renderIncidentMarkdown } from '../../src/render/incident-markdown.ts';
import { whyLines } from '../../src/render/status.ts';
import { gpus } from '../unstick/seed-fleet.ts';

const AT = '2026-12-01T20:52:24.000Z';
const SEED_LAUNCH =
  'python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300';

type NoId<T> = T extends unknown ? Omit<T, 'id'> : never;
const logged = (list: Array<NoId<AnyLoggedEvent>>): AnyLoggedEvent[] =>
  list.map((e, i) => ({ ...e, id: `1796158344000-${i}` }) as AnyLoggedEvent);

function seedSnapshot(): MachineSnapshot {
  const s: MachineSnapshot = {
    machineId: 'ct129',
    view: 'container',
    takenAt: AT,
    gpus: gpus({ 0: 96_413, 2: 96_417, 5: 49_152 }),
    processes: [],
    holders: [],
    kernelMounts: [],
    ram: { totalBytes: 449 * GIB, usedBytes: 439 * GIB, availableBytes: null },
    gpuError: null,
  };
  return { ...s, rootCauses: causesInSnapshot(s, [SEED_LAUNCH]) };
}

const meta = (kind: 'status' | 'unstick'): IncidentMeta => ({
  id: 'inc_20261201_205224_d0od8xsy',
  kind,
  requester: 'U0ALICE',
  channel: 'C0ONCALL01',
  targets: ['ct129'],
  text: `${kind} ct129`,
  reason: null,
  createdAt: AT,
});

describe('the post-mortem carries the thread’s facts', () => {
  it('seed status: the Why lines are its root causes, and the RAM pressure still open is said, not "nothing left to do"', () => {
    const snap = seedSnapshot();
    const md = renderIncidentMarkdown(
      meta('status'),
      logged([
        { type: 'requested', at: AT },
        { type: 'snapshot', at: AT, label: 'status', snapshot: snap, commands: [] },
        { type: 'finished', at: AT, outcome: 'ok', durationMs: 900 },
      ]),
    );
    // Every Why line of the thread is a root cause of the document, in the same words.
    const why = whyLines(snap).map((l) => l.replace(':bulb: Why: ', ''));
    expect(why.length).toBeGreaterThan(0);
    const causes = md.slice(md.indexOf('## Root causes'), md.indexOf('## GPUs read'));
    for (const w of why) expect(causes).toContain(w.slice(0, 30));
    expect(causes).toContain('--hicache-size');
    expect(md).toMatch(/RAM pressure on `ct129` was still open at the last reading .*98 % used \(439 of 449 GiB\)/);
    expect(md).not.toContain('Nothing left to do');
    expect(md).not.toContain('Nothing was left open');
  });

  it("the GPU tables name each GPU's holders as the thread's Processes column does, for a status read and an unstick's before table alike", () => {
    const snap: MachineSnapshot = {
      ...seedSnapshot(),
      holderRows: [
        { gpuIndex: 0, containerPid: 3, hostPid: 11093, command: 'sglang::scheduler_TP0', usedMiB: 96_413 },
        { gpuIndex: 2, containerPid: 5, hostPid: 11097, command: 'sglang::scheduler_TP2', usedMiB: 96_417 },
      ],
    };
    for (const [kind, label] of [
      ['status', 'status'],
      ['unstick', 'before'],
    ] as const) {
      const md = renderIncidentMarkdown(
        meta(kind),
        logged([
          { type: 'requested', at: AT },
          { type: 'snapshot', at: AT, label, snapshot: snap, commands: [] },
        ]),
      );
      const rows = md.split('\n').filter((l) => l.startsWith('| '));
      const row = (gpu: number): string => rows.find((l) => l.startsWith(`| ${gpu} | NVIDIA H20 |`)) ?? '';
      expect(rows.find((l) => l.startsWith('| GPU | Name |'))).toContain('Processes (PID, command, MiB)');
      expect(row(0)).toContain('3 (host 11093) sglang::scheduler\\_TP0 96,413 MiB');
      expect(row(2)).toContain('5 (host 11097) sglang::scheduler\\_TP2 96,417 MiB');
      expect(row(1)).toMatch(/\| - \|$/);
    }
  });

  it('the watchdog alerts still open on the incident’s machines are what to follow up; not those of another machine or raised after it ended', () => {
    const rec = {
      machineId: 'kpro5',
      command: 'nvidia-smi -q -x',
      code: 0,
      signal: null,
      durationMs: 90,
      timedOut: false,
    };
    const events = logged([
      { type: 'requested', at: AT },
      // The status read the container and, for its GPU map, its host kpro5.
      { type: 'snapshot', at: AT, label: 'status', snapshot: { ...seedSnapshot(), ram: null }, commands: [rec] },
      { type: 'finished', at: AT, outcome: 'ok', durationMs: 900 },
    ]);
    const alert = (machineId: string, raisedAt: string) => ({
      incidentId: `inc_alert_${machineId}`,
      kind: 'ram_high',
      machineId,
      gpu: null,
      sentence: 'Host RAM 98 % used (439 of 449 GiB). Why: `--hicache-size` is per rank.',
      raisedAt,
    });
    const md = renderIncidentMarkdown(meta('status'), events, {
      openAlerts: [
        alert('kpro5', '2026-12-01T20:40:00.000Z'),
        alert('kpro9', '2026-12-01T20:40:00.000Z'),
        { ...alert('ct129', '2026-12-01T21:30:00.000Z'), kind: 'xid' },
      ],
    });
    const follow = md.slice(md.indexOf('## What to follow up'));
    expect(follow).toContain(
      '- Host RAM high on `kpro5` is still open (raised 2026-12-01 20:40:00 UTC, alert `inc_alert_kpro5`): Host RAM 98 % used (439 of 449 GiB). Why: `--hicache-size` is per rank.',
    );
    expect(follow).not.toContain('kpro9');
    expect(follow).not.toContain('NVIDIA Xid');
    expect(md).not.toContain('Nothing was left open');
    // Without alerts (or none open) the document says nothing was left open.
    expect(renderIncidentMarkdown(meta('status'), events)).toContain('- Nothing was left open.');
  });

  it('S3-like unstick: a command through pct exec is said to run in the container, through its host', () => {
    const rec = (machineId: string, command: string) => ({
      machineId,
      command,
      code: 0,
      signal: null,
      durationMs: 100,
      timedOut: false,
    });
    const md = renderIncidentMarkdown(
      meta('unstick'),
      logged([
        { type: 'requested', at: AT },
        {
          type: 'step_started',
          at: AT,
          stepId: 's1',
          kind: 'container_signal',
          tier: 1,
          machineId: 'ct129',
          explanation: '',
        },
        {
          type: 'command',
          at: AT,
          stepId: 's1',
          role: 'term',
          on: 'container',
          record: rec('kpro5', 'pct exec 129 -- kill'),
        },
        {
          type: 'command',
          at: AT,
          stepId: 's1',
          role: 'read_procs',
          on: 'container',
          record: rec('ct129', 'sh -c read'),
        },
        { type: 'step_finished', at: AT, stepId: 's1', outcome: 'done', durationMs: 100, message: '' },
        { type: 'step_started', at: AT, stepId: 's2', kind: 'host_kill', tier: 2, machineId: 'kpro5', explanation: '' },
        { type: 'command', at: AT, stepId: 's2', role: 'kill', on: 'host', record: rec('kpro5', 'sh -c kill') },
        { type: 'step_finished', at: AT, stepId: 's2', outcome: 'done', durationMs: 100, message: '' },
        { type: 'finished', at: AT, outcome: 'ok', durationMs: 900 },
      ]),
    );
    expect(md).toContain('1. term in container `ct129` (through `pct exec` on `kpro5`) at');
    expect(md).toContain('2. read\\_procs in container `ct129` at');
    expect(md).toContain('3. kill on host `kpro5` at');
    expect(md).not.toMatch(/on container `kpro5`/);
  });
});
