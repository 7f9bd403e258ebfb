/**
 * The `/gpu unstick` scenarios S2, S3, S4, S5, S7 of test-fleet.md, each played end to end
 * (real bot, Redis, workers, sshd fleet, fake Slack) with assertions on its report. Each file's
 * own `expect:` block must hold too. A file marked `pending:` is skipped with its reason.
 * Kept apart from the status scenarios so the two files run in parallel (S4 waits out its card's
 * 10 s approval TTL).
 */
import { describe, expect, it } from 'vitest';
import { expectRunClean, file } from './report-helpers.ts';
import { runScenario, type Report } from './run-scenario.ts';
import type { Step } from '../../src/plan/unstick-plan.ts';
import { loadScenario } from './schema.ts';

/** Runs the scenario once per describe block, lazily, and skips the block when the file is pending. */
function scenario(prefix: string, body: (get: () => Promise<Report>) => void): void {
  const f = file(prefix);
  const s = loadScenario(f);
  let run: Promise<Report> | null = null;
  const get = () => (run ??= runScenario(f));
  if (s.pending !== undefined) {
    describe(s.name, () => {
      it.skip(`pending: ${s.pending}`, () => undefined);
    });
    return;
  }
  describe(s.name, () => {
    it('runs cleanly and meets its expect block', async () => {
      expectRunClean(await get());
    }, 120_000);
    body(get);
  });
}

const signalsOf = (r: Report, name: string) => r.signals.filter((x) => x.process === name);
const threadText = (r: Report) => r.incidents.flatMap((i) => i.thread.map((m) => m.text)).join('\n');
const approvalEvents = (r: Report) =>
  r.incidents.flatMap((i) => i.events).filter((e) => e.type.startsWith('approval_'));

scenario('s2-', (get) => {
  it('kills exactly the hung TP workers from inside the container, with no approval, and verdict Recovered', async () => {
    const r = await get();
    expect(new Set(r.signals.map((x) => x.process))).toEqual(new Set(['tp0', 'tp2']));
    // The catchable SIGTERM shows its sender: a process inside ct129's own PID namespace.
    for (const n of ['tp0', 'tp2']) {
      const term = signalsOf(r, n).find((x) => x.signal === 'SIGTERM');
      expect(term?.byPid).toBeGreaterThan(0);
    }
    expect(approvalEvents(r)).toEqual([]);
    expect(r.gpuMemory.kpro5?.every((g) => g.usedMiB === 0)).toBe(true);
    expect(r.incidents[0]?.thread[0]?.text).toContain('Recovered');
    // Through pct exec on the host, as in the seed; never a GPU reset.
    const kills = (r.commands.kpro5 ?? []).filter((c) => c.t >= 0 && /\bkill\b/.test(c.cmd));
    expect(kills.length).toBeGreaterThan(0);
    expect(kills.every((c) => c.cmd.includes('pct exec 129 --'))).toBe(true);
  }, 120_000);
});

scenario('s3-', (get) => {
  it('container step fails, a different approver approves, the host kills exactly those host PIDs', async () => {
    const r = await get();
    const decided = approvalEvents(r).filter((e) => e.type === 'approval_decided');
    expect(decided).toHaveLength(1);
    expect(decided[0]?.by).toBe(r.users.bob);
    expect(decided[0]?.decision).toBe('approved');
    const hostPids = ['tp0', 'tp2'].map((n) => r.processes[n]?.hostPid);
    // The host-side signals the worker asked kpro5's agent for: `host signal host <TERM|KILL> <ns>
    // <incident> <approval>` and then (host PID, start, container PID) per target.
    const hostSignal = /^gpu-medic 1 \d+ host signal host (?:TERM|KILL) \d+ \S+ (apr_\S+) ((?:\d+ \d+ \d+ ?)+)$/;
    const hostKills = (r.commands.kpro5 ?? []).filter((c) => c.t >= 0 && c.via === 'ssh' && hostSignal.test(c.cmd));
    expect(hostKills.length).toBeGreaterThan(0);
    const killed = new Set(
      hostKills.flatMap((c) =>
        (hostSignal.exec(c.cmd)?.[2] ?? '')
          .trim()
          .split(' ')
          .filter((_, i) => i % 3 === 0)
          .map(Number),
      ),
    );
    expect([...killed].sort()).toEqual(hostPids.map(Number).sort());
    expect(r.processes.shell?.alive).toBe(true);
    expect(signalsOf(r, 'shell')).toEqual([]);
    expect(threadText(r)).toContain('Recovered');
    // The container step went to ct129's own agent (fleetuser's: it runs as fleetuser, no sudo), and the
    // kernel refused it (EPERM), not the agent.
    const ctSignals = (r.commands.ct129 ?? []).filter(
      (c) => c.via === 'ssh' && /^gpu-medic 1 \d+ host signal /.test(c.cmd),
    );
    expect(ctSignals.length).toBeGreaterThan(0);
    expect(JSON.stringify(r.incidents.flatMap((i) => i.events))).toContain('not_permitted');
  }, 120_000);
});

scenario('s4-', (get) => {
  it('requester and non-approver are refused privately, the card expires, nothing is signalled', async () => {
    const r = await get();
    const refused = approvalEvents(r).filter((e) => e.type === 'approval_refused');
    expect(refused.map((e) => [e.by, e.reason])).toEqual([
      [r.users.alice, 'self_approval'],
      [r.users.carol, 'not_approver'],
    ]);
    expect(approvalEvents(r).some((e) => e.type === 'approval_expired')).toBe(true);
    expect(approvalEvents(r).some((e) => e.type === 'approval_decided')).toBe(false);
    for (const n of ['tp0', 'tp2']) expect(r.processes[n]?.alive).toBe(true);
    // The refusals went only to the clicker (response_url), never as a thread reply.
    expect(r.answers.filter((a) => a.via !== 'ack').map((a) => a.user)).toEqual(['alice', 'carol']);
  }, 120_000);
});

scenario('s5-', (get) => {
  it('no reset inside the container; a host reset is offered behind approval and explained', async () => {
    const r = await get();
    const all = Object.values(r.commands)
      .flat()
      .filter((c) => c.t >= 0);
    expect(all.filter((c) => /nvidia-smi\b.*(\s-r\b|--gpu-reset)/.test(c.cmd))).toEqual([]);
    const requested = approvalEvents(r).find((e) => e.type === 'approval_requested');
    expect(requested).toBeDefined();
    expect(JSON.stringify(requested)).toContain('host_reset');
    expect(threadText(r)).toMatch(/Host-level GPU reset/);
    expect(r.gpuMemory.kpro5?.[1]?.usedMiB).toBe(49152);
  }, 120_000);
});

scenario('s7-', (get) => {
  it('the monitor, the host monitor and the other container’s job are never signalled; their memory stays', async () => {
    const r = await get();
    expect(new Set(r.signals.map((x) => x.process))).toEqual(new Set(['tp0']));
    for (const n of ['monitor', 'host-monitor', 'ct130-job']) expect(r.processes[n]?.alive).toBe(true);
    expect(r.gpuMemory.kpro5?.[3]?.usedMiB).toBe(40960);
    expect(threadText(r)).toMatch(/outside ct129.*left alone/);
  }, 120_000);
});

scenario('s9-', (get) => {
  it("reads, resets and reports host GPU 2 for ct131's GPU 0: the card and the reset name its UUID, host GPU 0 is untouched", async () => {
    const r = await get();
    const req = approvalEvents(r).find((e) => e.type === 'approval_requested');
    // The report's events are loose JSON; this one is an approval_requested event with its planned step.
    const step = req?.step as Step | undefined;
    expect(step?.kind).toBe('host_reset');
    expect(step?.gpus.map((g) => [g.index, g.hostIndex])).toEqual([[0, 2]]);
    const uuid = step?.gpus[0]?.uuid ?? '?';
    expect(uuid).toMatch(/^GPU-[0-9a-f-]{36}$/);
    // The reset ran on kpro5 by that UUID, and nothing named host GPU 0's.
    // Asked of kpro5's agent by UUID (`host reset <uuid> <incident> <approval>`), and what ran there.
    const asked = (r.commands.kpro5 ?? []).filter((c) => c.via === 'ssh' && / host reset /.test(c.cmd));
    expect(asked.map((c) => / host reset (\S+) inc_\S+ apr_\S+$/.exec(c.cmd)?.[1])).toEqual([uuid]);
    const resets = (r.commands.kpro5 ?? []).filter((c) => c.via === 'tool' && /--gpu-reset/.test(c.cmd));
    expect(resets.map((c) => c.cmd.endsWith(`--gpu-reset -i ${uuid}`))).toEqual([true]);
    expect(threadText(r)).toContain(uuid);
    expect(r.gpuMemory.kpro5?.map((g) => g.usedMiB)).toEqual([12000, 0, 0, 0, 0, 0, 0, 0]);
  }, 120_000);
});

scenario('s10-', (get) => {
  it('the newcomer on the reused PIDs survives with no signal, the host kill said "PID reused", and the report tells them apart by start time', async () => {
    const r = await get();
    const [old, fresh] = [r.processes.tp1, r.processes.newcomer];
    expect([fresh?.hostPid, fresh?.containerPid]).toEqual([old?.hostPid, old?.containerPid]);
    expect(fresh?.startTime).not.toBe(old?.startTime);
    expect(fresh?.alive).toBe(true);
    expect(signalsOf(r, 'newcomer')).toEqual([]);
    const kill = r.incidents.flatMap((i) => i.events).filter((e) => e.type === 'signalled' && e.signal === 'KILL');
    expect(kill.map((e) => [e.hostPid, e.startTimeTicks, e.result])).toEqual([
      [old?.hostPid, old?.startTime, 'skipped'],
    ]);
    expect(String(kill[0]?.reason)).toMatch(/^PID reused/);
  }, 120_000);
});

scenario('s11-', (get) => {
  it('no card and no signal for a container whose init holds the GPU; the container still runs', async () => {
    const r = await get();
    expect(r.processes.server?.containerPid).toBe(1);
    expect(r.processes.server?.alive).toBe(true);
    expect(r.processes.shell?.alive).toBe(true);
    expect(approvalEvents(r)).toEqual([]);
    expect(r.signals).toEqual([]);
    expect(
      r.incidents
        .flatMap((i) => i.events)
        .filter((e) => e.type === 'command' && (e.role === 'kill' || e.role === 'term')),
    ).toEqual([]);
  }, 120_000);
});

scenario('s12-', (get) => {
  it('after a restart nothing is signalled: the planned process is gone and the new job is untouched', async () => {
    const r = await get();
    expect(r.processes.tp3?.alive).toBe(false);
    expect(r.processes.fresh?.alive).toBe(true);
    expect(r.signals).toEqual([]);
    const sent = r.incidents.flatMap((i) => i.events).filter((e) => e.type === 'signalled' && e.result === 'sent');
    expect(sent).toEqual([]);
  }, 120_000);
});

// Proxmox has privileged containers too: S2 (the container's own kill) and S3 (the host kill after an
// approval) once more with every container privileged (no id map: its root is host root).
describe('S2 and S3 on privileged containers', () => {
  for (const prefix of ['s2-', 's3-']) {
    it(`${prefix} runs cleanly and meets its expect block`, async () => {
      const s = loadScenario(file(prefix));
      const privileged = {
        ...s,
        fleet: { ...s.fleet, containers: s.fleet.containers.map((c) => ({ ...c, privileged: true })) },
      };
      expectRunClean(await runScenario(privileged));
    }, 120_000);
  }
});
