/**
 * S5 (leaked memory: a host reset offered for approval, never `nvidia-smi -r` in the container),
 * a reset skipped when the GPU gained a holder meanwhile, no approvers configured, a denial, an
 * expiry, and tier 1 through `pct exec` — on the test fleet with real SSH and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDecisionJob, runExpireJob, runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { APPROVER, TTL_MS, ofType, procStart, signalTail, startRig, type Rig } from './rig.ts';

let rig: Rig;
let outsider: FleetProcess;

const RESET_OR_PM = /nvidia-smi\b.*(\s-r(\s|$)|--gpu-reset|\s-pm\s)/;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: Array.from({ length: 8 }, (_, i) => ({ persistence: i === 7 })) }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      { id: 'ct130', vmid: 130, host: 'kpro5' },
    ],
  });
  outsider = await rig.fleet.spawnHolder('ct130', {
    gpus: [{ index: 5, mib: 40_211 }],
    title: 'python3 train.py --epochs 3',
  });
});

afterAll(async () => {
  await rig?.stop();
});

function toolCalls(machine: string): string[] {
  return toolCallsSince(machine, 0);
}

/** What actually ran on a machine (its fleet tool log) from `since` (epoch ms) on. */
function toolCallsSince(machine: string, since: number): string[] {
  return rig.fleet
    .commandLog(machine)
    .filter((c) => c.via === 'tool' && c.ts >= since)
    .map((c) => c.cmd);
}

describe('S5: memory held with no process anywhere', () => {
  it('offers a host-level reset for approval and never resets inside the container; after approval the host resets with persistence handled', async () => {
    await rig.fleet.setLeak('kpro5', 7, 30_000);
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    let ev = await rig.events(id);
    const d = ofType(ev, 'diagnosis')[0]?.diagnosis;
    expect(d?.gpus.find((g) => g.index === 7)?.kind).toBe('orphaned_memory');
    expect(d?.gpus.find((g) => g.index === 7)?.sentence).toMatch(
      /only a host-level GPU reset can, and a container cannot reset a GPU/,
    );
    expect(ofType(ev, 'step_started')).toEqual([]);
    const req = ofType(ev, 'approval_requested')[0];
    expect(req?.step.kind).toBe('host_reset');
    expect(req?.step.gpus.map((g) => g.hostIndex)).toEqual([7]);
    expect(req?.step.commands.every((c) => c.on === 'host')).toBe(true);
    expect(req?.step.explanation).toMatch(/never inside ct129/);
    expect(rig.fleet.gpuMemory('kpro5')[7]?.usedMiB).toBe(30_000);

    // BullMQ re-runs the job (its worker stalled) while the card waits: no second card, incident stays open.
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    ev = await rig.events(id);
    expect(ofType(ev, 'approval_requested')).toHaveLength(1);
    expect(ofType(ev, 'finished')).toEqual([]);
    expect((await rig.lock.holder('ct129'))?.incidentId).toBe(id);

    expect(
      await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' }, rig.deps());

    expect(rig.fleet.gpuMemory('kpro5')[7]?.usedMiB).toBe(0);
    ev = await rig.events(id);
    const cmds = ofType(ev, 'command');
    expect(
      cmds.map((c) => [c.role, c.on, c.record.machineId]).filter(([r]) => r !== 'read_gpus' && r !== 'check_apps'),
    ).toEqual([
      ['read_persistence', 'host', 'kpro5'],
      ['persistence_off', 'host', 'kpro5'],
      ['reset', 'host', 'kpro5'],
      ['persistence_on', 'host', 'kpro5'],
    ]);
    expect(cmds.find((c) => c.role === 'reset')?.record).toMatchObject({ code: 0 });
    // Host GPU 7, named by its UUID.
    const u7 = req?.step.gpus[0]?.uuid ?? '?';
    expect(u7).toMatch(/^GPU-[0-9a-f-]{36}$/);
    // The worker asked the host's agent to reset that UUID; the host's own tool log shows what ran.
    expect(cmds.find((c) => c.role === 'reset')?.record.command).toMatch(
      new RegExp(`^gpu-medic 1 \\d+ host reset ${u7} ${id} ${req?.approvalId}$`),
    );
    const host = toolCalls('kpro5');
    const resetAt = host.findIndex((c) => c.endsWith(`--gpu-reset -i ${u7}`));
    expect(resetAt).toBeGreaterThan(0);
    expect(host.slice(0, resetAt).some((c) => c.endsWith(`-pm 0 -i ${u7}`))).toBe(true);
    expect(host.slice(resetAt).some((c) => c.endsWith(`-pm 1 -i ${u7}`))).toBe(true);
    // The container was only ever read.
    expect(rig.fleet.commandLog('ct129').filter((c) => RESET_OR_PM.test(c.cmd))).toEqual([]);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    expect(ev.at(-1)?.type).toBe('finished');
    expect(await rig.lock.holder('ct129')).toBeNull();
    expect(procStart(outsider.hostPid)).toBe(outsider.startTime);
  });

  it('skips the reset of a GPU that some process holds by the time it is approved, and signals nothing', async () => {
    await rig.fleet.setLeak('kpro5', 3, 8_000);
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(req?.step.kind).toBe('host_reset');
    // Another container starts using GPU 3 before anyone clicks.
    const late = await rig.fleet.spawnHolder('ct130', { gpus: [{ index: 3, mib: 1_024 }], title: 'python3 eval.py' });
    expect(
      await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'approved', now: Date.now() }),
    ).toMatchObject({ ok: true });
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' }, rig.deps());
    const ev = await rig.events(id);
    expect(ofType(ev, 'command').filter((c) => c.role === 'reset' || c.role === 'persistence_off')).toEqual([]);
    expect(ofType(ev, 'step_finished').at(-1)).toMatchObject({ outcome: 'failed' });
    expect(ofType(ev, 'step_finished').at(-1)?.message).toMatch(
      new RegExp(`skipped, host PID ${late.hostPid} now holds it`),
    );
    expect(rig.fleet.gpuMemory('kpro5')[3]?.usedMiB).toBe(8_000 + 1_024);
    expect(rig.fleet.signals()).toEqual([]);
    expect(procStart(late.hostPid)).toBe(late.startTime);
    expect(ev.at(-1)?.type).toBe('finished');
    process.kill(late.hostPid, 'SIGKILL');
    await late.exited;
    await rig.fleet.setLeak('kpro5', 3, 0);
  });
});

describe('approvals that never run', () => {
  beforeAll(async () => {
    await rig.fleet.setLeak('kpro5', 4, 12_345);
  });
  afterAll(async () => {
    await rig.fleet.setLeak('kpro5', 4, 0);
  });

  it('no approvers configured: says so in plain words, asks nobody, closes the incident', async () => {
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps({ approvers: [] }));
    const ev = await rig.events(id);
    expect(ofType(ev, 'approval_requested')).toEqual([]);
    expect(ofType(ev, 'error')).toEqual([
      expect.objectContaining({
        code: 'not_approver',
        message: 'no approvers configured: host-level steps cannot run; set GPU_MEDIC_APPROVERS',
      }),
    ]);
    expect(ofType(ev, 'verdict')[0]?.verdict.kind).toBe('still_stuck');
    expect(ev.at(-1)?.type).toBe('finished');
    expect(await rig.lock.holder('ct129')).toBeNull();
  });

  it('denied: nothing runs, the verdict names who denied', async () => {
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(
      await rig.approvals.decide(req?.approvalId ?? '', { user: APPROVER, decision: 'denied', now: Date.now() }),
    ).toMatchObject({ ok: true });
    const before = toolCalls('kpro5').length;
    await runDecisionJob({ kind: 'decision', incidentId: id, approvalId: req?.approvalId ?? '' }, rig.deps());
    const ev = await rig.events(id);
    expect(ofType(ev, 'step_started')).toEqual([]);
    expect(
      toolCalls('kpro5')
        .slice(before)
        .filter((c) => RESET_OR_PM.test(c)),
    ).toEqual([]);
    const v = ofType(ev, 'verdict')[0]?.verdict;
    expect(v?.kind).toBe('still_stuck');
    expect(v?.nextStep).toMatch(new RegExp(`^Denied by <@${APPROVER}>: nothing from the approval card was run\\.`));
    expect(ev.at(-1)?.type).toBe('finished');
    expect(await rig.lock.holder('ct129')).toBeNull();
    expect(rig.fleet.gpuMemory('kpro5')[4]?.usedMiB).toBe(12_345);
  });

  it('expiry: not due → nothing; due → approval_expired, Still stuck with the next step, lock released; a late decision job runs nothing', async () => {
    const id = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct129' }, rig.deps());
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    const approvalId = req?.approvalId ?? '';
    const job = rig.enqueued.find((e) => e.data.kind === 'expire' && e.data.approvalId === approvalId);
    expect(job).toMatchObject({
      site: 'default',
      delayMs: TTL_MS,
      jobId: `expire-${approvalId}`,
      data: { kind: 'expire', incidentId: id, approvalId },
    });

    const n = (await rig.events(id)).length;
    await runExpireJob({ kind: 'expire', incidentId: id, approvalId }, rig.deps());
    expect(await rig.events(id)).toHaveLength(n);

    const before = toolCalls('kpro5').length;
    rig.clockOffsetMs = TTL_MS + 1000;
    try {
      await runExpireJob({ kind: 'expire', incidentId: id, approvalId }, rig.deps());
      expect(
        await rig.approvals.decide(approvalId, {
          user: APPROVER,
          decision: 'approved',
          now: Date.now() + rig.clockOffsetMs,
        }),
      ).toMatchObject({
        ok: false,
        code: 'approval_expired',
      });
      await runDecisionJob({ kind: 'decision', incidentId: id, approvalId }, rig.deps());
      await runExpireJob({ kind: 'expire', incidentId: id, approvalId }, rig.deps());
    } finally {
      rig.clockOffsetMs = 0;
    }
    const ev = await rig.events(id);
    expect(ofType(ev, 'approval_expired')).toEqual([expect.objectContaining({ approvalId, stepId: req?.stepId })]);
    const v = ofType(ev, 'verdict');
    expect(v).toHaveLength(1);
    expect(v[0]?.verdict.kind).toBe('still_stuck');
    expect(v[0]?.verdict.nextStep).toMatch(
      /^The approval request expired without a decision; nothing from it was run\. GPU 4: memory with no process; a host-level GPU reset on kpro5/,
    );
    expect(ofType(ev, 'finished')).toHaveLength(1);
    expect(toolCalls('kpro5').slice(before)).toEqual([]);
    expect(await rig.lock.holder('ct129')).toBeNull();
    expect(rig.fleet.gpuMemory('kpro5')[4]?.usedMiB).toBe(12_345);
  });
});

describe('tier 1 through pct exec (container without its own address)', () => {
  it('signals every GPU holder of ct130 by container PID via `pct exec 130`, and nothing in ct129 or on the host', async () => {
    const h = await rig.fleet.spawnHolder('ct130', {
      gpus: [{ index: 2, mib: 70_000 }],
      title: 'sglang::scheduler_TP2',
      dieDelayMs: 2000,
    });
    const hostOwn = await rig.fleet.spawnBystander('kpro5', { title: 'nvidia-persistenced --user nvidia' });
    const ct129Own = await rig.fleet.spawnBystander('ct129', { title: 'python3 /opt/monitor/monitor.py' });
    const t0 = Date.now();
    const id = await rig.newIncident('ct130');
    await runUnstickJob({ kind: 'unstick', incidentId: id, machineId: 'ct130' }, rig.deps());
    const ev = await rig.events(id);
    const term = ofType(ev, 'command').find((c) => c.role === 'term');
    // Targets in host-PID order, each by its container PID.
    const pids = [h, outsider]
      .sort((a, b) => a.hostPid - b.hostPid)
      .map((p) => ({ pid: p.containerPid ?? 0, start: p.startTime }));
    // Reached through its host: the SSH session is kpro5's, the command runs inside ct130.
    expect(term?.on).toBe('container');
    expect(term?.record.command).toMatch(
      new RegExp(`^gpu-medic 1 \\d+ ct 130${signalTail('container', 'TERM', pids)}`),
    );
    // What ran: the signal script inside ct130 through kpro5's `pct exec`, once, and nowhere else.
    const ranTerm = new RegExp(signalTail('container', 'TERM', pids, 'script'));
    expect(toolCallsSince('kpro5', t0).filter((c) => ranTerm.test(c))).toEqual([
      expect.stringMatching(/^pct exec 130 -- timeout -k 1 10 sh -c /),
    ]);
    expect(toolCallsSince('ct129', t0).filter((c) => / (TERM|KILL) /.test(c))).toEqual([]);
    const sig = rig.fleet.signals().filter((s) => s.ts >= t0);
    expect(sig.map((s) => [s.hostPid, s.signal]).sort()).toEqual(
      [
        [h.hostPid, 'SIGTERM'],
        [outsider.hostPid, 'SIGTERM'],
      ].sort(),
    );
    expect(ofType(ev, 'step_finished')[0]?.message).toMatch(/GPU memory came back after/);
    expect(rig.fleet.gpuMemory('kpro5')[2]?.usedMiB).toBe(0);
    expect(rig.fleet.gpuMemory('kpro5')[5]?.usedMiB).toBe(0);
    expect(procStart(hostOwn.hostPid)).toBe(hostOwn.startTime);
    expect(procStart(ct129Own.hostPid)).toBe(ct129Own.startTime);
    expect(ofType(ev, 'verdict')[0]?.verdict.kind).toBe('recovered');
  });
});
