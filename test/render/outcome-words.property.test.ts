/**
 * Every sentence agrees with what happened, wherever it is read. Random unstick logs, generated from the
 * event schema (src/incident/unstick-events.ts: steps and their `signalled` events with every
 * result and refusal cause, the same process refused first and killed later), two incidents on
 * one host interleaved in time, an approved host step whose commands ran or never reached the
 * host, and the verdict the worker computes from that log (verdictOf with verdictContextOf). For
 * each incident's own log, the thread's summary, the history line, the verdict and the Markdown
 * export never contradict the events:
 * - a process under "Not signalled" has no `sent` event; every process with no `sent` event is there;
 * - each outcome is said in the same words everywhere (re-check refusal ≠ not permitted ≠ gone),
 *   the Markdown's timeline and "What ran" included;
 * - the verdict says a step "ran" only when a command of it is logged, and "was not run" when none is;
 *   the thread's verdict message and the Markdown say the same verdict and next step.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { summarizeIncident } from '../../src/incident/incident-summary.ts';
import { OUTCOME_WORDS, signalOutcome } from '../../src/incident/signal-outcome.ts';
import type { UnstickEvent } from '../../src/incident/unstick-events.ts';
import { stepsWords } from '../../src/render/history.ts';
import { richPlain } from '../../src/text/rich.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { renderIncidentMarkdown } from '../../src/render/incident-markdown.ts';
import { mdRich, mdText } from '../../src/render/markdown-escape.ts';
import { rich } from '../../src/render/escape.ts';
import { verdictOf } from '../../src/gpu/verdict.ts';
import { verdictContextOf } from '../../src/incident/verdict-context.ts';
import { planUnstick } from '../../src/plan/unstick-plan.ts';
import { s3HostKill } from '../unstick/scenarios.ts';

type Signalled = Extract<UnstickEvent, { type: 'signalled' }>;

/** A process: host PID and start time (a reused PID has another); its container PID follows from both, so a line names one process. */
const proc = fc
  .record({ hostPid: fc.integer({ min: 1000, max: 1006 }), startTimeTicks: fc.integer({ min: 1, max: 2 }) })
  .map((p) => ({ ...p, containerPid: (p.hostPid - 1000) * 2 + p.startTimeTicks + 1 }));

const signal = fc.record({
  p: proc,
  signal: fc.constantFrom<'TERM' | 'KILL'>('TERM', 'KILL'),
  result: fc.constantFrom<Signalled['result']>('sent', 'gone', 'skipped'),
  refusedBy: fc.constantFrom<Signalled['refusedBy'] | 'legacy'>('recheck', 'not_permitted', 'failed', 'legacy'),
  host: fc.boolean(),
});

/** Steps (the first in the container, the rest host-level and approved), and whether the host steps' commands reached the host. */
const incidentPlan = fc.record({
  steps: fc.array(fc.array(signal, { maxLength: 5 }), { minLength: 1, maxLength: 3 }),
  hostRan: fc.boolean(),
});

/** The S3 diagnosis (a holder only the host can stop) and its host-level kill, before and after alike: still stuck. */
const STUCK = s3HostKill();
const HOST_KILL = planUnstick(STUCK, { incidentId: 'inc_plan', vmid: 129 }).steps.find((x) => x.kind === 'host_kill');

type PlanSpec = typeof incidentPlan extends fc.Arbitrary<infer T> ? T : never;
/** An event before the log gives it its id and time. */
type Bare = AnyLoggedEvent extends infer E ? (E extends AnyLoggedEvent ? Omit<E, 'id' | 'at'> : never) : never;

function logOf(id: string, plan: PlanSpec): Bare[] {
  if (!HOST_KILL) throw new Error('the S3 plan has a host kill');
  const out: Bare[] = [{ type: 'requested' }];
  plan.steps.forEach((planned, i) => {
    const stepId = `${id}-s${i}`;
    const host = i > 0;
    out.push({
      type: 'step_started',
      stepId,
      kind: host ? 'host_kill' : 'container_signal',
      tier: host ? 2 : 1,
      machineId: host ? 'kpro5' : 'ct129',
      explanation: 'x',
    });
    if (host) {
      out.push({
        type: 'approval_requested',
        approvalId: `apr_${stepId}`,
        stepId,
        expiresAt: '2026-12-01T12:30:00.000Z',
        planHash: 'h',
        step: HOST_KILL,
        host: 'kpro5',
        vmid: 129,
      });
      out.push({ type: 'approval_decided', approvalId: `apr_${stepId}`, stepId, decision: 'approved', by: 'U0BOB' });
    }
    // A host step whose host never answered ran no command and sent no signal.
    const sigs = host && !plan.hostRan ? [] : planned;
    // A host step that reached the host ran its re-check at least; a container step, its signals.
    if (host ? plan.hostRan : sigs.length > 0)
      out.push({
        type: 'command',
        stepId,
        role: host ? 'kill' : 'term',
        on: host ? 'host' : 'container',
        record: {
          machineId: host ? 'kpro5' : 'ct129',
          command: 'kill',
          code: 0,
          signal: null,
          durationMs: 1,
          timedOut: false,
        },
      });
    for (const s of sigs)
      out.push({
        type: 'signalled',
        stepId,
        ...s.p,
        signal: s.signal,
        cmdline: `python3 rank${s.p.containerPid}.py`,
        result: s.result,
        reason:
          s.result === 'skipped' && s.refusedBy === 'legacy'
            ? 'the container may not signal it: EPERM: Operation not permitted'
            : s.result === 'skipped'
              ? 'its PID now belongs to a different process'
              : null,
        ...(s.result === 'skipped' && s.refusedBy !== 'legacy' ? { refusedBy: s.refusedBy } : {}),
      });
    out.push(
      host && !plan.hostRan
        ? { type: 'step_finished', stepId, outcome: 'failed', durationMs: 1, message: 'kpro5 did not answer' }
        : { type: 'step_finished', stepId, outcome: 'done', durationMs: 1, message: '' },
    );
  });
  return out;
}

const meta = (id: string): IncidentMeta => ({
  id,
  kind: 'unstick',
  requester: 'U0ALICE',
  channel: 'C0ONCALL01',
  targets: ['ct129'],
  text: 'unstick ct129',
  reason: null,
  createdAt: '2026-12-01T12:00:00.000Z',
});

const same = (a: Signalled, b: Signalled): boolean => a.hostPid === b.hostPid && a.startTimeTicks === b.startTimeTicks;

describe('summary, history, verdict and Markdown export agree with the events', () => {
  it('random logs of two interleaved incidents: Not signalled = never sent; outcomes in the same words; the verdict and the Markdown export agree with the log', () => {
    fc.assert(
      fc.property(incidentPlan, incidentPlan, fc.array(fc.boolean(), { maxLength: 80 }), (a, b, order) => {
        // Interleave the two incidents' appends in time, as two workers on one host would.
        const la = logOf('inc_a', a);
        const lb = logOf('inc_b', b);
        const byIncident: Record<string, AnyLoggedEvent[]> = { inc_a: [], inc_b: [] };
        let t = 0;
        let i = 0;
        let j = 0;
        const push = (inc: string, e: Bare): void => {
          t++;
          byIncident[inc]?.push({
            ...e,
            id: `${1000 + t}-0`,
            at: new Date(Date.UTC(2026, 11, 1, 12, 0, t)).toISOString(),
          } as AnyLoggedEvent);
        };
        for (const pickA of order) {
          if (pickA && i < la.length) push('inc_a', la[i++] as Bare);
          else if (j < lb.length) push('inc_b', lb[j++] as Bare);
        }
        while (i < la.length) push('inc_a', la[i++] as Bare);
        while (j < lb.length) push('inc_b', lb[j++] as Bare);
        // Each worker closes its incident with the verdict it computes from its own log.
        for (const id of ['inc_a', 'inc_b']) {
          const own = byIncident[id] ?? [];
          push(id, { type: 'verdict', verdict: verdictOf(STUCK, STUCK, verdictContextOf(own, ['U0BOB'], 'U0ALICE')) });
          push(id, { type: 'finished', outcome: 'ok', durationMs: 5 });
        }

        for (const id of ['inc_a', 'inc_b']) {
          const events = byIncident[id] ?? [];
          const sig = events.filter((e): e is Signalled & { id: string } => e.type === 'signalled');
          const views = renderUnstick(meta(id), events as Parameters<typeof renderUnstick>[1]);
          const summary = views.find((v) => v.key === 'summary')?.text ?? '';
          const notPart = summary.split('Not signalled:')[1] ?? '';
          const sent = sig.filter((e) => e.result === 'sent');
          for (const e of sig) {
            const line = `PID ${e.containerPid} (host PID ${e.hostPid})`;
            const everSent = sent.some((s) => same(s, e));
            if (everSent) continue;
            // Never sent: listed under Not signalled, with its outcome's words.
            expect(notPart).toContain(line);
          }
          // Each line under Not signalled names a process no `sent` event names.
          for (const m of notPart.matchAll(/• PID (\d+) \(host PID (\d+)\)/g)) {
            const [c, h] = [Number(m[1]), Number(m[2])];
            expect(sent.some((s) => s.containerPid === c && s.hostPid === h)).toBe(false);
          }
          // The thread's own signal lines: each not-sent outcome in the same words as the summary and history.
          const thread = views.map((v) => v.text).join('\n');
          for (const e of sig)
            if (e.result !== 'sent')
              expect(thread).toContain(
                `(host PID ${e.hostPid}) \`python3 rank${e.containerPid}.py\`: ${OUTCOME_WORDS[signalOutcome(e)]}`,
              );
          // History: the counts of each outcome, in the shared words.
          const history = richPlain(stepsWords(summarizeIncident(meta(id), events).steps));
          const steps = [...new Set(sig.map((e) => e.stepId))];
          for (const stepId of steps) {
            const mine = sig.filter((e) => e.stepId === stepId);
            for (const o of ['gone', 'not_permitted', 'failed', 'refused'] as const) {
              const n = mine.filter((e) => signalOutcome(e) === o).length;
              if (n > 0) expect(history).toContain(`${n} ${OUTCOME_WORDS[o]}`);
            }
          }
          if (!sig.some((e) => signalOutcome(e) === 'refused')) expect(history).not.toContain(OUTCOME_WORDS.refused);
          if (!sig.some((e) => signalOutcome(e) === 'not_permitted'))
            expect(history).not.toContain(OUTCOME_WORDS.not_permitted);

          // The verdict: "ran" only when a command of a host step is logged, "was not run" when none is.
          const verdict = events.find((e): e is Extract<AnyLoggedEvent, { type: 'verdict' }> => e.type === 'verdict');
          if (!verdict) throw new Error('no verdict');
          const advice = verdict.verdict.advice ?? [];
          const said = richPlain(advice);
          const hostSteps = events.flatMap((e) =>
            e.type === 'step_started' && e.kind === 'host_kill' ? [e.stepId] : [],
          );
          const hostCommands = events.some((e) => e.type === 'command' && hostSteps.includes(e.stepId));
          if (/\bran\b/.test(said)) expect(hostCommands).toBe(true);
          if (hostSteps.length > 0) expect(said.includes('was not run')).toBe(!hostCommands);
          // The thread's verdict message says that verdict and next step.
          const shown = views.find((v) => v.key === `ev:${verdict.id}`)?.text ?? '';
          expect(shown).toContain(verdict.verdict.title);
          expect(shown).toContain(rich(advice));

          // The Markdown export: the same verdict and next step, the same outcome words in "What ran"
          // (the history's) and in its timeline, one row per logged signal.
          const md = renderIncidentMarkdown(meta(id), events);
          const lines = md.split('\n');
          expect(lines).toContain(`| Verdict | ${mdText(verdict.verdict.title)} |`);
          expect(md.slice(md.indexOf('## What to follow up'))).toContain(mdRich(advice));
          const whatRan = lines.find((l) => l.startsWith('| What ran |')) ?? '';
          for (const stepId of steps) {
            const mine = sig.filter((e) => e.stepId === stepId);
            for (const o of ['gone', 'not_permitted', 'failed', 'refused'] as const) {
              const n = mine.filter((e) => signalOutcome(e) === o).length;
              if (n > 0) expect(whatRan).toContain(`${n} ${mdText(OUTCOME_WORDS[o])}`);
            }
          }
          for (const e of sig)
            if (e.result !== 'sent')
              expect(md).toContain(
                `(container PID ${e.containerPid}, "python3 rank${e.containerPid}.py"): ${mdText(OUTCOME_WORDS[signalOutcome(e)])}`,
              );
          for (const o of ['refused', 'not_permitted'] as const)
            if (!sig.some((e) => signalOutcome(e) === o)) expect(md).not.toContain(mdText(OUTCOME_WORDS[o]));
        }
      }),
      { numRuns: 200 },
    );
  });
});
