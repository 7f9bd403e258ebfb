/**
 * A stolen worker key cannot signal: a step acts only with the envelopes the host's agent checks. Without
 * them, or with the wrong kind for its tier, the runner sends nothing at all; with them, each destructive
 * command carries them on stdin and every read goes without. The exec here records what would be sent.
 */
import { describe, expect, it } from 'vitest';
import type { UnstickEvent } from '../../src/incident/unstick-events.ts';
import type { StepEnvelopes } from '../../src/agent-grammar/envelopes.ts';
import { stepCommands, type Step } from '../../src/plan/unstick-plan.ts';
import { runStep, type StepContext, type StepRunnerDeps } from '../../src/unstick-runner/unstick-runner.ts';
import type { CommandSpec } from '../../src/agent-grammar/command-spec.ts';
import type { ExecResult, Route, SshEndpoint } from '../../src/ssh/types.ts';

const U = 'GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0';
const gpu = { index: 0, hostIndex: 2, uuid: U, usedMiB: 96_413 };
const target = {
  hostPid: 41234,
  containerPid: 812,
  startTimeTicks: 99_000,
  cmdline: 'sglang::scheduler_TP0',
  pidNs: 'pid:[4026532845]',
  gpus: [gpu],
  hostOnlyWhy: null,
};
const stepOf = (tier: 1 | 2, kind: Step['kind']): Step => ({
  id: `${kind}-000000000000`,
  tier,
  kind,
  machineId: tier === 1 ? 'ct129' : 'kpro5',
  targets: kind === 'host_reset' ? [] : [target],
  gpus: kind === 'host_reset' ? [gpu] : [],
  commands: stepCommands(kind, kind === 'host_reset' ? [] : [target], kind === 'host_reset' ? [gpu] : [], {
    timeoutMs: 15_000,
  }),
  explanation: 'x',
  graceMs: 1,
  releaseTimeoutMs: 1,
  pollIntervalMs: 1,
});

const endpoint: SshEndpoint = {
  machineId: 'kpro5',
  host: '192.0.2.5',
  port: 22,
  username: 'gpu-medic',
  privateKeyPath: '/nonexistent',
  hostKeyFingerprints: [],
};
const env = { body: 'gpu-medic request v1\n', sig: `${'A'.repeat(86)}==` };
const plan = { body: 'gpu-medic plan v1\n{}', sig: `${'B'.repeat(86)}==` };

function rig(authority: StepContext['authority']) {
  const sent: CommandSpec[] = [];
  const events: UnstickEvent[] = [];
  let clock = 1_764_000_000_000;
  const deps: StepRunnerDeps = {
    exec: async (_route: Route, spec: CommandSpec): Promise<ExecResult> => {
      sent.push(spec);
      // Every read answers "nothing there": the step ends after its first reads or its reset.
      return {
        command: spec.argv[0] ?? '',
        machineId: 'kpro5',
        code: 0,
        signal: null,
        stdout: spec.agent?.verb === 'gpu' ? `0, ${U}, H100, 0000:01:00.0, 0, 81559, 0\n` : '',
        stderr: '',
        durationMs: 1,
        timedOut: false,
        truncated: false,
      };
    },
    append: async (e) => {
      events.push(e);
    },
    steps: { claimStep: async () => true, finishStep: async () => true },
    // Each look at the clock is a second later, so the release wait ends on its own.
    now: () => {
      clock += 1000;
      return new Date(clock);
    },
    sleep: async () => {},
    workerId: 'w1',
    commandTimeoutMs: 15_000,
  };
  const ctx: StepContext = {
    incidentId: 'inc_20261130_092000_k3x9q2',
    containerRoute: { kind: 'pct', host: endpoint, vmid: 129 },
    hostRoute: { kind: 'direct', endpoint },
    vmid: 129,
    hostGpus: [],
    hostApps: [],
    authority,
  };
  return { sent, events, deps, ctx };
}

const request = (): StepEnvelopes => ({ request: env, decisions: [], plan });
const decision = (): StepEnvelopes => ({ request: env, decisions: [env], plan });

describe('a step without its envelopes', () => {
  for (const [tier, kind] of [
    [1, 'container_signal'],
    [2, 'host_kill'],
    [2, 'host_reset'],
  ] as const)
    it(`(${kind}, tier ${tier}) is refused before any command is sent`, async () => {
      const r = rig({ approvalId: tier === 1 ? 'none' : 'apr_AAAAAAAAAAAAAAAAAAAAAA', envelopes: null });
      const res = await runStep(stepOf(tier, kind), r.ctx, r.deps);
      expect(res.outcome).toBe('failed');
      expect(res.message).toContain('nothing was sent');
      expect(r.sent).toEqual([]);
    });

  it('is refused, nothing sent, when its envelope is the other tier’s (a request for a tier-2 reset)', async () => {
    const r = rig({ approvalId: 'apr_AAAAAAAAAAAAAAAAAAAAAA', envelopes: request() });
    const res = await runStep(stepOf(2, 'host_reset'), r.ctx, r.deps);
    expect(res.outcome).toBe('failed');
    expect(r.sent).toEqual([]);
  });
});

describe('a step with its envelopes', () => {
  it("sends each destructive command with the request, decision and plan on stdin and the step's ids; reads carry none", async () => {
    const apr = 'apr_AAAAAAAAAAAAAAAAAAAAAA';
    const r = rig({ approvalId: apr, envelopes: decision() });
    await runStep(stepOf(2, 'host_reset'), r.ctx, r.deps);
    const reset = r.sent.find((s) => s.agent?.verb === 'reset');
    expect(reset?.agent?.args).toEqual([U, 'inc_20261130_092000_k3x9q2', apr]);
    expect(reset?.stdin).toMatch(/^request \S+ \S+\ndecision \S+ \S+\nplan \S+ \S+\n$/);
    for (const s of r.sent)
      expect(s.stdin === undefined, s.agent?.verb).toBe(!['reset', 'persistence'].includes(s.agent?.verb ?? ''));
    expect(r.sent.every((s) => s.agent !== undefined)).toBe(true);
  });
});
