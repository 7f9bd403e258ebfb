/**
 * Render side of safe sentences: the mentions and commands gpu-medic writes into its
 * advice and diagnoses render once, as mentions and code spans, while machine text inside the same
 * sentences (step messages, cmdlines) stays inert and cannot close its span.
 */
import { describe, expect, it } from 'vitest';
import type { Diagnosis } from '../../src/gpu/diagnose.ts';
import { verdictOf, type StepHistory } from '../../src/gpu/verdict.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import type { UnstickLoggedEvent } from '../../src/incident/unstick-events.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { CT129_NS, CT131_JOB, TP2, app, gpus, readings } from '../unstick/seed-fleet.ts';
import { diagnoseWith, s3 } from '../unstick/scenarios.ts';

const AT = '2026-11-30T09:20:00.000Z';
const meta: IncidentMeta = {
  id: 'inc_20261130_092000_k3x9q2',
  kind: 'unstick',
  requester: 'U0ALICE',
  channel: 'C0GPUOPS',
  targets: ['ct129'],
  text: '',
  reason: null,
  createdAt: AT,
};

/** S3 after tier 1 failed to stop TP2 (a non-init process): only a host-level kill can free GPU 2. */
function tp2Left(): Diagnosis {
  const tp2 = s3().gpus[2]?.holders[0]?.process;
  if (!tp2) throw new Error('fixture');
  return diagnoseWith(
    {
      gpus: gpus({ 2: 96_417 }),
      apps: [app(TP2, 2, 96_417)],
      procs: readings([TP2.pid], [TP2]),
      targetPidNs: CT129_NS,
    },
    { holders: [], procs: [] },
    { containerFailed: [{ process: tp2, reason: 'kill: (63): Operation not permitted' }] },
  );
}

function verdictView(steps: StepHistory[]) {
  const verdict = verdictOf(s3(), tp2Left(), { steps, approvers: ['U0BOB', 'U0CAROL'], requester: 'U0ALICE' });
  const events: UnstickLoggedEvent[] = [
    { type: 'requested', at: AT, id: '1-0' },
    { type: 'verdict', at: AT, verdict, id: '1-1' },
  ];
  const v = renderUnstick(meta, events).find((x) => x.key === 'ev:1-1');
  if (!v) throw new Error('no verdict view');
  return { text: v.text, blocks: JSON.stringify(v.blocks) };
}

describe('the verdict advice renders gpu-medic’s mentions and commands once', () => {
  it('after a denial: <@U0BOB> and <@U0CAROL> are mentions (not &lt;@…&gt;), /gpu unstick is a code span', () => {
    const shown = verdictView([
      { kind: 'host_kill', outcome: 'denied', by: 'U0BOB', hostPids: [TP2.pid], gpuHostIndexes: [], message: null },
    ]);
    for (const s of [shown.text, shown.blocks]) {
      expect(s).toContain('that kill was denied by <@U0BOB>');
      expect(s).toContain('ask another approver (<@U0CAROL>) to approve a new `/gpu unstick ct129`');
      expect(s).not.toContain('&lt;@');
      expect(s).not.toContain('&amp;lt;');
    }
  });

  it('machine text inside the advice (a step message) stays inert: no mention, no link, no formatting', () => {
    const shown = verdictView([
      {
        kind: 'host_kill',
        outcome: 'failed',
        by: null,
        hostPids: [TP2.pid],
        gpuHostIndexes: [],
        message: 'skipped <!channel> <@U0EVIL> *x* `y`',
      },
    ]);
    for (const s of [shown.text, shown.blocks]) {
      expect(s).not.toContain('<!channel>');
      expect(s).not.toContain('<@U0EVIL>');
      expect(s).toContain('skipped &lt;!channel&gt; &lt;@U0EVIL&gt; ∗x∗ ˋyˋ');
    }
  });
});

describe('diagnosis lines show cmdlines as code spans the data cannot close', () => {
  const diagnosisView = (d: Diagnosis) => {
    const v = renderUnstick(meta, [
      { type: 'requested', at: AT, id: '1-0' },
      { type: 'diagnosis', at: AT, label: 'before', diagnosis: d, id: '1-1' },
    ]).find((x) => x.key === 'ev:1-1');
    if (!v) throw new Error('no diagnosis view');
    return { text: v.text, blocks: JSON.stringify(v.blocks) };
  };

  it('a plain cmdline is a real code span, not look-alike quotes', () => {
    const shown = diagnosisView(s3());
    expect(shown.text).toContain('PID 1 (host PID 811900) `/sbin/init`: only the host can stop it');
    expect(shown.text).toContain('PID 63 (host PID 812351) `sglang::scheduler_TP2`');
  });

  it('a hostile cmdline stays inside its span: no mention, no forged line, no live formatting', () => {
    const evil = { ...CT131_JOB, cmdline: ['x`*FORGED*`', '\n• host PID *1*', '<!channel>'] };
    const d = diagnoseWith(
      {
        gpus: gpus({ 0: 40_000 }),
        apps: [app(evil, 0, 40_000)],
        procs: readings([evil.pid], [evil]),
        targetPidNs: CT129_NS,
      },
      { holders: [], procs: [] },
    );
    const shown = diagnosisView(d);
    for (const s of [shown.text, shown.blocks]) {
      expect(s).toContain('`xˋ*FORGED*ˋ ␤• host PID *1* &lt;!channel&gt;`');
      expect(s).not.toContain('<!channel>');
    }
    expect(shown.text.split('\n').some((l) => l.startsWith('• host PID'))).toBe(false);
  });
});
