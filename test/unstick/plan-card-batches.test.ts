/**
 * Nothing approved unseen, plan side: an approval card lists every target it approves. A host-level
 * kill with more processes than one Slack card can show is planned as several steps, one card
 * each, so every card is exactly what its button runs; together they cover every process once.
 */
import { describe, expect, it } from 'vitest';
import type { Diagnosis, DiagnosedHolder } from '../../src/gpu/diagnose.ts';
import { planUnstick, type Step } from '../../src/plan/unstick-plan.ts';
import { approvalCardFits } from '../../src/render/unstick.ts';
import { s3 } from './scenarios.ts';

/** S3 with `n` host-only holders of ct129 spread over GPUs 0–7 (long cmdlines, as SGLang ranks have). */
function manyHostOnly(n: number): Diagnosis {
  const d = s3();
  const g0 = d.gpus[0];
  const proto = g0?.holders[0];
  if (!g0 || !proto) throw new Error('fixture');
  const gpus = d.gpus.map((g, gi) => {
    const holders: DiagnosedHolder[] = [];
    for (let i = gi; i < n; i += 8)
      holders.push({
        ...proto,
        gpuIndex: g.hostIndex,
        gpuUuid: g.uuid,
        usedMiB: 9_000,
        process: {
          ...proto.process,
          hostPid: 900_000 + i,
          containerPid: 2_000 + i,
          startTimeTicks: 50_000_000 + i,
          cmdline: `python3 -m sglang.launch_server --model-path /models/deepseek-v3 --tp 8 --rank ${i} --port ${30_000 + i}`,
        },
        reach: 'host',
        hostOnlyWhy: `it runs as uid ${1000 + i} and container commands run as uid 0`,
      });
    return {
      ...g,
      kind: holders.length > 0 ? ('held_host_only' as const) : g.kind,
      holders,
      outside: [],
      usedMiB: holders.length * 9_000,
    };
  });
  return { ...d, gpus };
}

const fits = (s: Step): boolean => approvalCardFits(s, 'kpro5', 129);
const hostKills = (d: Diagnosis, withFits: boolean): Step[] =>
  planUnstick(d, {
    incidentId: 'inc_20261130_092000_k3x9q2',
    vmid: 129,
    ...(withFits ? { fitsCard: fits } : {}),
  }).steps.filter((s) => s.kind === 'host_kill');

describe('a host-level kill is planned in card-sized steps', () => {
  it('600 host-only processes: several host_kill steps, each fitting one card, covering every process once', () => {
    const d = manyHostOnly(600);
    expect(fits(hostKills(d, false)[0] ?? ({} as Step))).toBe(false);
    const steps = hostKills(d, true);
    expect(steps.length).toBeGreaterThan(1);
    expect(steps.every(fits)).toBe(true);
    const pids = steps.flatMap((s) => s.targets.map((t) => t.hostPid)).sort((a, b) => a - b);
    expect(pids).toEqual(Array.from({ length: 600 }, (_, i) => 900_000 + i));
    expect(new Set(steps.map((s) => s.id)).size).toBe(steps.length);
    // Each step's kill command names exactly its own targets.
    for (const s of steps) {
      const kill = s.commands
        .filter((c) => c.role === 'kill')
        .flatMap((c) => c.argv.filter((a) => /^\d{6}$/.test(a)).map(Number));
      expect(kill.sort((a, b) => a - b)).toEqual(s.targets.map((t) => t.hostPid).sort((a, b) => a - b));
      expect(s.explanation).toMatch(/part \d+ of \d+/);
    }
  });

  it('a kill that fits one card stays one step, identical to the plan without the option', () => {
    const d = manyHostOnly(20);
    expect(hostKills(d, true)).toEqual(hostKills(d, false));
  });
});
