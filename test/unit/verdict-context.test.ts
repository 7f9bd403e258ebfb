import { describe, expect, it } from 'vitest';
import type { AnyEvent, AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { verdictContextOf } from '../../src/incident/verdict-context.ts';
import { verdictOf } from '../../src/gpu/verdict.ts';
import { diagnoseWith } from '../unstick/scenarios.ts';
import { readings, seedS2, TP0 } from '../unstick/seed-fleet.ts';
import type { Step } from '../../src/plan/unstick-plan.ts';

let n = 0;
const ev = (e: AnyEvent): AnyLoggedEvent => ({ ...e, id: `${++n}-0` });
const AT = '2026-11-30T03:12:45.000Z';
const target = {
  hostPid: 811_900,
  containerPid: 1,
  startTimeTicks: 4,
  cmdline: '/sbin/init',
  pidNs: 'pid:[1]',
  gpus: [],
  hostOnlyWhy: null,
};
const step = (id: string, kind: Step['kind']): Step => ({
  id,
  tier: 2,
  kind,
  machineId: 'kpro5',
  targets: kind === 'host_kill' ? [target] : [],
  gpus: kind === 'host_reset' ? [{ index: 0, hostIndex: 4, uuid: null, usedMiB: 1 }] : [],
  commands: [],
  explanation: '',
  graceMs: 0,
  releaseTimeoutMs: 0,
  pollIntervalMs: 0,
});
const asked = (approvalId: string, s: Step) =>
  ev({
    type: 'approval_requested',
    at: AT,
    approvalId,
    stepId: s.id,
    expiresAt: AT,
    planHash: 'h',
    step: s,
    host: 'kpro5',
    vmid: 129,
  });

describe('verdictContextOf (what the log says happened to the steps)', () => {
  it('a denial the log holds, or only the store knows; an expiry; an approved step that failed; a card still open says nothing', () => {
    const kill = step('host_kill-1', 'host_kill');
    const reset = step('host_reset-1', 'host_reset');
    const events = [
      ev({
        type: 'step_started',
        at: AT,
        stepId: 'c1',
        kind: 'container_signal',
        tier: 1,
        machineId: 'ct129',
        explanation: '',
      }),
      ev({
        type: 'signalled',
        at: AT,
        stepId: 'c1',
        hostPid: 811_900,
        containerPid: 1,
        signal: 'TERM',
        cmdline: '/sbin/init',
        result: 'skipped',
        reason: 'Operation not permitted',
      }),
      ev({ type: 'step_finished', at: AT, stepId: 'c1', outcome: 'failed', durationMs: 1, message: 'not permitted' }),
      asked('apr_1', kill),
      asked('apr_2', reset),
      ev({ type: 'approval_expired', at: AT, approvalId: 'apr_2', stepId: reset.id }),
      asked('apr_3', reset),
      ev({
        type: 'approval_decided',
        at: AT,
        approvalId: 'apr_3',
        stepId: reset.id,
        decision: 'approved',
        by: 'U0CAROL',
      }),
      ev({
        type: 'step_finished',
        at: AT,
        stepId: reset.id,
        outcome: 'failed',
        durationMs: 1,
        message: 'GPU 0: skipped, host PID 5 now holds it',
      }),
      asked('apr_4', kill),
    ];
    const c = verdictContextOf(events, ['U0BOB', 'U0CAROL'], 'U0ALICE', [
      { approvalId: 'apr_1', decision: 'denied', by: 'U0BOB' },
    ]);
    expect(c.steps.map((s) => [s.kind, s.outcome, s.by, s.hostPids, s.gpuHostIndexes])).toEqual([
      ['container_signal', 'failed', null, [811_900], []],
      ['host_kill', 'denied', 'U0BOB', [811_900], []],
      ['host_reset', 'expired', null, [], [4]],
      ['host_reset', 'failed', null, [], [4]],
    ]);
    expect(c.steps[3]?.message).toBe('GPU 0: skipped, host PID 5 now holds it');
    expect(c).toMatchObject({ approvers: ['U0BOB', 'U0CAROL'], requester: 'U0ALICE' });
  });

  it('an approved host kill that ended before any command ran is not said to have run', () => {
    // ct129's rank on GPU 0 runs as uid 1001 and container commands as uid 1000: host-only.
    const { host, container } = seedS2();
    const ctUser = { ...container, procs: readings([57], [{ ...TP0, pid: 57, nsPids: [57], uid: 1001 }]) };
    const before = diagnoseWith(host, ctUser, { containerExecUid: 1000 });
    const kill = { ...step('host_kill-9', 'host_kill'), targets: [{ ...target, hostPid: TP0.pid, containerPid: 57 }] };
    const ended = (withCommand: boolean) => [
      asked('apr_9', kill),
      ev({ type: 'approval_decided', at: AT, approvalId: 'apr_9', stepId: kill.id, decision: 'approved', by: 'U0BOB' }),
      ev({
        type: 'step_started',
        at: AT,
        stepId: kill.id,
        kind: 'host_kill',
        tier: 2,
        machineId: 'kpro5',
        explanation: '',
      }),
      ...(withCommand
        ? [
            ev({
              type: 'command',
              at: AT,
              stepId: kill.id,
              role: 'read_init',
              on: 'host',
              record: {
                machineId: 'kpro5',
                command: 'lxc-info -n 129 -p',
                code: 0,
                signal: null,
                durationMs: 1,
                timedOut: false,
              },
            }),
          ]
        : []),
      ev({
        type: 'step_finished',
        at: AT,
        stepId: kill.id,
        outcome: 'failed',
        durationMs: 1,
        message: 'could not reach kpro5 (connection refused)',
      }),
    ];
    const c = verdictContextOf(ended(false), ['U0BOB'], 'U0ALICE');
    expect(c.steps.at(-1)).toMatchObject({ kind: 'host_kill', outcome: 'failed', ran: false });
    const v = verdictOf(before, before, c);
    expect(v.nextStep).not.toMatch(/kill ran/);
    expect(v.nextStep).toMatch(/the approved kill was not run: it ended before any command reached kpro5/);
    // With a command in the log it did run, and is said so.
    const ran = verdictOf(before, before, verdictContextOf(ended(true), ['U0BOB'], 'U0ALICE'));
    expect(ran.nextStep).toMatch(/the host-level kill ran/);
  });
});
