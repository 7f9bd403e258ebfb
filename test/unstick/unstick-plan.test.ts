import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildHolders } from '../../src/gpu/holders.ts';
import { diagnose } from '../../src/gpu/diagnose.ts';
import type { FakeProc } from './seed-fleet.ts';
import { CONSTANT_WORDS, GPU_UUID } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { planUnstick, stepHash, stepId } from '../../src/plan/unstick-plan.ts';
import { CT129_NS, CT131_NS, HOST_NS, app, gpus, readings } from './seed-fleet.ts';
import { s2, s3, s3HostKill, s5 } from './scenarios.ts';

const INC = 'inc_20261130_091447_k3x9q2';
const opts = { incidentId: INC, vmid: 129 };
const displays = (p: ReturnType<typeof planUnstick>, i: number): string[] =>
  p.steps[i]?.commands.map((c) => `${c.on}: ${c.display}`) ?? [];

describe('planUnstick', () => {
  it('S2: one tier-1 step signalling exactly the two ranks from inside ct129', () => {
    const p = planUnstick(s2(), opts);
    expect(p.steps.map((s) => [s.kind, s.tier, s.machineId])).toEqual([['container_signal', 1, 'ct129']]);
    const step = p.steps[0];
    expect(step?.targets.map((t) => [t.hostPid, t.containerPid, t.startTimeTicks, t.cmdline])).toEqual([
      [812_345, 57, 48_113_902, 'sglang::scheduler_TP0'],
      [812_351, 63, 48_113_955, 'sglang::scheduler_TP2'],
    ]);
    expect(displays(p, 0)).toEqual([
      expect.stringMatching(/^container: sh -c '.*' sh 57 63$/s),
      expect.stringMatching(/^container: sh -c '.*' sh container TERM 4026532845 57 48113902 0 63 48113955 0$/s),
      expect.stringMatching(/^container: sh -c '.*' sh 57 63$/s),
      expect.stringMatching(/^container: sh -c '.*' sh container KILL 4026532845 57 48113902 0 63 48113955 0$/s),
    ]);
    expect(step?.commands[3]?.when).toBe('survivors');
    expect(step?.graceMs).toBe(10_000);
    expect(step?.explanation).toContain('wait 10 s');
  });

  it('S7: bystanders are never targets and are listed as left alone', () => {
    const p = planUnstick(s2(), opts);
    const pids = p.steps.flatMap((s) => s.targets.map((t) => t.hostPid));
    expect(pids).not.toContain(823_001);
    const words = p.steps.flatMap((s) => s.commands.flatMap((c) => c.argv));
    expect(words).not.toContain('90');
    expect(words).not.toContain('44');
    expect(p.leftAlone).toEqual([
      expect.stringContaining('GPU 5: 40,211 MiB held by something outside ct129'),
      expect.stringContaining(
        'PID 90 `python3` in ct129 has /dev/nvidiactl, /dev/nvidia0 open but holds no GPU memory',
      ),
    ]);
  });

  it('S3: a holder the container could not stop goes to a tier-2 check-and-signal on the host by host PID, the rank to tier 1', () => {
    const p = planUnstick(s3HostKill(), opts);
    expect(p.steps.map((s) => [s.kind, s.tier, s.machineId])).toEqual([
      ['container_signal', 1, 'ct129'],
      ['host_kill', 2, 'kpro5'],
    ]);
    expect(displays(p, 1)).toEqual([
      expect.stringMatching(/^host: sh -c '.*' sh 811900$/s),
      "host: nvidia-smi '--query-compute-apps=gpu_uuid,pid,process_name,used_memory' '--format=csv,noheader,nounits'",
      expect.stringMatching(/^host: sh -c '.*' sh host KILL 4026532845 811900 40000001 71$/s),
    ]);
    expect(p.steps[1]?.commands[2]?.when).toBe('still_matching');
    expect(p.steps[1]?.targets[0]).toMatchObject({
      hostPid: 811_900,
      containerPid: 71,
      gpus: [{ index: 0, hostIndex: 0, usedMiB: 96_413 }],
    });
    expect(p.steps[1]?.explanation).toContain('not through `pct exec`');
    expect(p.steps[1]?.explanation).toContain('pidfd');
  });

  it('S3 with the container’s init (PID 1) holding GPU 0: no step ever signals it; it is left alone with the advice to stop the container', () => {
    const p = planUnstick(s3(), opts);
    expect(p.steps.map((s) => [s.kind, s.tier])).toEqual([['container_signal', 1]]);
    expect(p.steps.flatMap((s) => s.targets.map((t) => t.containerPid))).toEqual([63]);
    expect(p.steps.flatMap((s) => s.commands.flatMap((c) => c.argv))).not.toContain('811900');
    expect(p.leftAlone).toContainEqual(
      expect.stringMatching(
        /^GPU 0: held by the init \(PID 1\) of ct129 \(host PID 811900, `\/sbin\/init`, 96,413 MiB\)\. Killing a container's init is not a process kill: every process in ct129 dies with it/,
      ),
    );
    expect(p.leftAlone.join(' ')).toContain('run `pct stop 129` on kpro5 yourself');
  });

  it('S5: a host-level reset per GPU, persistence handled, never `nvidia-smi -r`, never in the container', () => {
    const p = planUnstick(s5(), opts);
    expect(p.steps.map((s) => [s.kind, s.tier, s.machineId])).toEqual([['host_reset', 2, 'kpro5']]);
    // Each GPU is named by the UUID the host reported for it, and is first looked up by that UUID.
    const [u0, u2] = p.steps[0]?.gpus.map((g) => g.uuid) ?? [];
    expect([u0, u2].map((u) => /^GPU-[0-9a-f-]{36}$/.test(u ?? ''))).toEqual([true, true]);
    const perGpu = (u: string | null | undefined) => [
      `host: nvidia-smi '--query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total,utilization.gpu' '--format=csv,noheader,nounits' -i ${u}`,
      `host: nvidia-smi '--query-compute-apps=gpu_uuid,pid,process_name,used_memory' '--format=csv,noheader,nounits' -i ${u}`,
      `host: nvidia-smi '--query-gpu=index,persistence_mode' '--format=csv,noheader' -i ${u}`,
      `host: nvidia-smi -pm 0 -i ${u}`,
      `host: nvidia-smi --gpu-reset -i ${u}`,
      `host: nvidia-smi -pm 1 -i ${u}`,
    ];
    expect(displays(p, 0)).toEqual([...perGpu(u0), ...perGpu(u2)]);
    expect(p.steps[0]?.gpus.map((g) => g.hostIndex)).toEqual([0, 2]);
    const when = ['always', 'always', 'always', 'persistence_was_on', 'always', 'persistence_was_on'];
    expect(p.steps[0]?.commands.map((c) => c.when)).toEqual([...when, ...when]);
    expect(p.steps[0]?.commands.some((c) => c.argv.includes('-r'))).toBe(false);
    expect(p.steps[0]?.explanation).toContain('never inside ct129');
  });

  it('step ids are deterministic from incident, kind and targets, whatever the order', () => {
    expect(planUnstick(s2(), opts).steps[0]?.id).toBe(planUnstick(s2(), opts).steps[0]?.id);
    expect(stepId(INC, 'host_kill', ['1@2', '3@4'])).toBe(stepId(INC, 'host_kill', ['3@4', '1@2']));
    expect(stepId(INC, 'host_kill', ['1@2'])).not.toBe(stepId(INC, 'container_signal', ['1@2']));
    expect(stepId(INC, 'host_kill', ['1@2'])).not.toBe(stepId('inc_other', 'host_kill', ['1@2']));
    expect(stepId(INC, 'host_kill', ['1@2'])).toMatch(/^host_kill-[0-9a-f]{12}$/);
  });

  it('stepHash changes when a target or a command changes', () => {
    const step = planUnstick(s3HostKill(), opts).steps[1];
    if (!step) throw new Error('fixture');
    const h = stepHash(step);
    expect(stepHash(structuredClone(step))).toBe(h);
    expect(
      stepHash({ ...step, targets: step.targets.map((t) => ({ ...t, startTimeTicks: t.startTimeTicks + 1 })) }),
    ).not.toBe(h);
    expect(stepHash({ ...step, commands: step.commands.slice(0, 2) })).not.toBe(h);
  });
});

describe('planUnstick property: only constants and integers reach a command, only target holders are signalled', () => {
  const ns = fc.constantFrom(CT129_NS, CT131_NS, HOST_NS);
  // Hostile process titles: the only machine text that could reach a command if anything leaked.
  const title = fc.oneof(
    fc.string(),
    fc.constantFrom('sglang::scheduler_TP0', '$(reboot)', '`id`; rm -rf /', "'; kill -9 1; '", 'a\nb'),
  );
  const proc = fc.record({
    ctPid: fc.integer({ min: 1, max: 5000 }),
    hostPid: fc.integer({ min: 2, max: 4_000_000 }),
    ns,
    start: fc.integer({ min: 1, max: 2 ** 40 }),
    title,
    gpu: fc.integer({ min: 0, max: 7 }),
    mib: fc.integer({ min: 1, max: 97_000 }),
    uid: fc.constantFrom(0, 1000, 1001),
  });

  it('holds for random fleets', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(proc, { selector: (p) => p.hostPid, maxLength: 12 }),
        fc.integer({ min: 0, max: 97_000 }),
        fc.constantFrom(0, 1000),
        (ps, leaked, execUid) => {
          const fakes: FakeProc[] = ps.map((p) => ({
            pid: p.hostPid,
            nsPids: [p.hostPid, p.ctPid],
            uid: p.uid,
            ns: p.ns,
            comm: 'python3',
            start: p.start,
            cmdline: [p.title],
          }));
          const used: Record<number, number> = { 3: leaked };
          const host = {
            gpus: gpus(used),
            apps: ps.map((p, i) => app(fakes[i] as FakeProc, p.gpu, p.mib)),
            procs: readings(
              fakes.map((f) => f.pid),
              fakes,
            ),
            targetPidNs: CT129_NS,
          };
          const ctProcs = fakes
            .filter((f) => f.ns === CT129_NS)
            .map((f) => ({ ...f, pid: f.nsPids[1] ?? 0, nsPids: [f.nsPids[1] ?? 0] }));
          const d = diagnose({
            target: 'ct129',
            host: 'kpro5',
            containerGpus: host.gpus,
            hostGpus: host.gpus,
            holders: buildHolders(host, {
              holders: [],
              procs: readings([...new Set(ctProcs.map((c) => c.pid))], ctProcs),
            }),
            errors: [],
            containerExecUid: execUid,
          });
          const plan = planUnstick(d, opts);
          for (const s of plan.steps) {
            for (const c of s.commands)
              for (const w of c.argv) expect(CONSTANT_WORDS.has(w) || /^\d+$/.test(w) || GPU_UUID.test(w)).toBe(true);
            for (const t of s.targets) expect(t.pidNs).toBe(CT129_NS);
            const outsidePids = ps.filter((p) => p.ns !== CT129_NS).map((p) => String(p.hostPid));
            // The signal template's targets are (pid, start, ctpid) triples from argv[7] on.
            for (const c of s.commands.filter((c) => c.role === 'kill' || c.role === 'term')) {
              const pids = c.argv.slice(7).filter((_, i) => i % 3 === 0);
              if (s.kind === 'host_kill') for (const pid of pids) expect(outsidePids).not.toContain(pid);
            }
            // A container's init is never a kill target (killing it stops the container).
            for (const t of s.targets) expect(t.containerPid).not.toBe(1);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
