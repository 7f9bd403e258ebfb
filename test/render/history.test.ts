import { describe, expect, it } from 'vitest';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { summarizeIncident } from '../../src/incident/incident-summary.ts';
import type { Step } from '../../src/plan/unstick-plan.ts';
import type { Verdict } from '../../src/gpu/verdict.ts';
import type { Alert } from '../../src/watchdog/judge.ts';
import { renderHistory, type HistoryEntry, type HistoryView } from '../../src/render/history.ts';

const ALICE = 'U0ALICE001';
const BOB = 'U0BOB00001';
const AT = '2026-11-30T03:12:45.123Z';

type NoId<T> = T extends unknown ? Omit<T, 'id'> : never;
const logged = (list: Array<NoId<AnyLoggedEvent>>): AnyLoggedEvent[] =>
  list.map((e, i) => ({ ...e, id: `1764472365123-${i}` }) as AnyLoggedEvent);

function meta(
  id: string,
  kind: IncidentMeta['kind'],
  targets: string[],
  requester = ALICE,
  createdAt = AT,
): IncidentMeta {
  return { id, kind, requester, channel: 'C0ONCALL01', targets, text: '', reason: null, createdAt };
}

function hostStep(id: string, kind: Step['kind'] = 'host_kill'): Step {
  return {
    id,
    tier: 2,
    kind,
    machineId: 'kpro5',
    targets: [],
    gpus: [],
    commands: [],
    explanation: '',
    graceMs: 0,
    releaseTimeoutMs: 0,
    pollIntervalMs: 0,
  };
}

const verdict = (title: string, freed: number): Verdict => ({
  kind: 'recovered',
  title,
  gpus: [],
  totalFreedMiB: freed,
  outside: [],
  nextStep: null,
});

function sig(stepId: string, signal: 'TERM' | 'KILL', result: 'sent' | 'gone' | 'skipped' = 'sent') {
  return {
    type: 'signalled' as const,
    at: AT,
    stepId,
    hostPid: 4242,
    containerPid: 42,
    signal,
    cmdline: 'python3 x',
    result,
    reason: null,
  };
}

/** The S3 shape: TERM 2 + KILL 1 from the container, then a host kill approved by Bob, Recovered. */
function unstickS3(): AnyLoggedEvent[] {
  return logged([
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
    sig('s1', 'TERM'),
    sig('s1', 'TERM'),
    sig('s1', 'KILL'),
    { type: 'step_finished', at: AT, stepId: 's1', outcome: 'done', durationMs: 10, message: '' },
    {
      type: 'approval_requested',
      at: AT,
      approvalId: 'apr_1',
      stepId: 's2',
      expiresAt: AT,
      planHash: 'h',
      step: hostStep('s2'),
      host: 'kpro5',
      vmid: 129,
    },
    { type: 'approval_decided', at: AT, approvalId: 'apr_1', stepId: 's2', decision: 'approved', by: BOB },
    { type: 'step_started', at: AT, stepId: 's2', kind: 'host_kill', tier: 2, machineId: 'kpro5', explanation: '' },
    sig('s2', 'KILL'),
    { type: 'step_finished', at: AT, stepId: 's2', outcome: 'done', durationMs: 10, message: '' },
    { type: 'verdict', at: AT, verdict: verdict('Recovered', 40_000) },
    { type: 'finished', at: AT, outcome: 'ok', durationMs: 35_000 },
  ]);
}

function entry(m: IncidentMeta, events: AnyLoggedEvent[], via: string | null = null): HistoryEntry {
  return { id: m.id, at: m.createdAt, via, summary: summarizeIncident(m, events) };
}

function view(entries: HistoryEntry[], o: Partial<HistoryView> = {}): HistoryView {
  return {
    target: { id: 'ct129', kind: 'container' },
    containers: [],
    limit: 5,
    cappedFrom: null,
    max: 25,
    entries,
    more: false,
    scan: null,
    ...o,
  };
}

describe('renderHistory', () => {
  it('an unstick line: when (UTC), who, kind, the signals per step with the approver, verdict, MiB freed, id', () => {
    const m = meta('inc_20261130_031245_aaaa1111', 'unstick', ['ct129']);
    const out = renderHistory(view([entry(m, unstickS3())]));
    const line = out.split('\n').find((l) => l.startsWith('•')) ?? '';
    expect(line).toBe(
      `• 2026-11-30 03:12 UTC · <@${ALICE}> · unstick of \`ct129\` · SIGTERM 2, SIGKILL 1 (container); SIGKILL 1 (host, approved by <@${BOB}>) · *Recovered*, 40,000 MiB freed · \`inc_20261130_031245_aaaa1111\``,
    );
  });

  it('a denied, an expired and a waiting host step say so and name who denied', () => {
    const ev = (decided: NoId<AnyLoggedEvent> | null): AnyLoggedEvent[] =>
      logged([
        {
          type: 'approval_requested',
          at: AT,
          approvalId: 'apr_1',
          stepId: 's2',
          expiresAt: AT,
          planHash: 'h',
          step: hostStep('s2', 'host_reset'),
          host: 'kpro5',
          vmid: 129,
        },
        ...(decided ? [decided] : []),
      ]);
    const m = meta('inc_20261130_031245_bbbb2222', 'unstick', ['ct129']);
    const denied = renderHistory(
      view([
        entry(
          m,
          ev({ type: 'approval_decided', at: AT, approvalId: 'apr_1', stepId: 's2', decision: 'denied', by: BOB }),
        ),
      ]),
    );
    expect(denied).toContain(`GPU reset denied by <@${BOB}>`);
    expect(
      renderHistory(view([entry(m, ev({ type: 'approval_expired', at: AT, approvalId: 'apr_1', stepId: 's2' }))])),
    ).toContain('GPU reset: approval expired, not run');
    expect(renderHistory(view([entry(m, ev(null))]))).toContain(
      'GPU reset waiting for approval · waiting for approval · `inc_',
    );
  });

  it("a host's history says which container an incident was about", () => {
    const m = meta('inc_20261130_031245_cccc3333', 'unstick', ['ct129']);
    const out = renderHistory(
      view([entry(m, unstickS3(), 'ct129')], { target: { id: 'kpro5', kind: 'host' }, containers: ['ct129', 'ct130'] }),
    );
    expect(out).toContain("with its containers' (they ran on it), each saying which");
    expect(out).toContain('unstick of `ct129` (a container on `kpro5`) ·');
  });

  it('status, status all, a machine that could not be read, and doctor each end in their own words', () => {
    const st = meta('inc_20261130_031245_dddd4444', 'status', ['kpro5']);
    const all = meta('inc_20261130_031245_eeee5555', 'status_all', ['kpro5', 'ct129', 'ct130']);
    const doc = meta('inc_20261130_031245_ffff6666', 'doctor', ['kpro5']);
    const out = renderHistory(
      view(
        [
          entry(
            st,
            logged([
              { type: 'requested', at: AT },
              {
                type: 'machine_error',
                at: AT,
                machineId: 'kpro5',
                code: 'connect_failed',
                message: 'refused',
                commands: [],
              },
              { type: 'finished', at: AT, outcome: 'failed', durationMs: 5 },
            ]),
          ),
          entry(
            all,
            logged([
              { type: 'requested', at: AT },
              { type: 'finished', at: AT, outcome: 'ok', durationMs: 5 },
            ]),
          ),
          entry(
            doc,
            logged([{ type: 'doctor_report', at: AT, machines: ['kpro5'], findings: [], failed: 1, warned: 2 }]),
          ),
        ],
        { target: { id: 'kpro5', kind: 'host' } },
      ),
    );
    expect(out).toContain(
      'status of `kpro5` · read only · `kpro5` could not be read (`connect_failed`) · `inc_20261130_031245_dddd4444`',
    );
    expect(out).toContain('status of all 3 machines · read only · finished (ok) ·');
    expect(out).toContain('doctor of `kpro5` · read only · 1 check failed, 2 warnings ·');
  });

  it('a watchdog alert shows as an alert: what it said, its clicks and snoozes, whether it cleared', () => {
    const alert: Alert = {
      key: 'ghost_memory:kpro5:3',
      kind: 'ghost_memory',
      machineId: 'kpro5',
      gpu: 3,
      since: 0,
      raisedAt: 0,
      sentence: 'GPU 3: 80,000 MiB held with no process for 12 min',
      lastSeenAt: 0,
    };
    const m = meta('inc_alert_0123456789abcdef0123', 'alert', ['kpro5'], 'watchdog');
    const events = logged([
      { type: 'alert_raised', at: AT, alert },
      {
        type: 'alert_action',
        at: AT,
        by: ALICE,
        action: 'unstick',
        incidentId: 'inc_20261130_031300_gggg7777',
        refused: null,
      },
      { type: 'alert_snoozed', at: AT, by: BOB, scope: 'kpro5/3', until: '2026-11-30T04:12:45.000Z' },
      { type: 'alert_cleared', at: '2026-11-30T03:40:00.000Z', alert },
    ]);
    const out = renderHistory(view([entry(m, events)], { target: { id: 'kpro5', kind: 'host' } }));
    expect(out).toContain(
      `• 2026-11-30 03:12 UTC · the watchdog · :rotating_light: alert · Unstick by <@${ALICE}> → \`inc_20261130_031300_gggg7777\`; snoozed \`kpro5/3\` by <@${BOB}> until 2026-11-30 04:12 UTC · ghost memory GPU 3: GPU 3: 80,000 MiB held with no process for 12 min · cleared 2026-11-30 03:40 UTC · \`inc_alert_0123456789abcdef0123\``,
    );
  });

  it('a gone record, no incidents, a capped count, more than N, and the scan of incidents from before the index are all said', () => {
    expect(renderHistory(view([{ id: 'inc_20261130_000000_gone0000', at: AT, via: null, summary: null }]))).toContain(
      '`inc_20261130_000000_gone0000`: its record is gone from the incident log',
    );
    expect(renderHistory(view([]))).toContain('No incident has touched `ct129`');
    expect(renderHistory(view([], { cappedFrom: 100, limit: 25 }))).toContain(
      'You asked for 100; history shows at most 25 here',
    );
    const m = meta('inc_20261130_031245_hhhh8888', 'status', ['ct129']);
    expect(renderHistory(view([entry(m, [])], { more: true, limit: 1 }))).toContain(
      'Older incidents exist: `/gpu history ct129 25` or `gpu-medic history ct129 --limit 100`',
    );
    expect(renderHistory(view([], { scan: { scanned: 37, bound: 500, complete: true, before: AT } }))).toContain(
      'Also searched the 37 incidents logged before the per-machine index (it began 2026-11-30 03:12 UTC)',
    );
    expect(renderHistory(view([], { scan: { scanned: 500, bound: 500, complete: false, before: null } }))).toContain(
      'Also searched the newest 500 incidents logged before the per-machine index; older ones were not searched',
    );
  });

  it('when not every line fits one message, the newest that fit are shown and the rest counted with the CLI that lists them', () => {
    const entries = Array.from({ length: 25 }, (_, i) =>
      entry(meta(`inc_20261130_031245_m${String(i).padStart(7, '0')}`, 'unstick', ['ct129']), unstickS3()),
    );
    const out = renderHistory(view(entries, { limit: 25 }));
    expect(out.length).toBeLessThanOrEqual(3000);
    const shown = out.split('\n').filter((l) => l.startsWith('•'));
    expect(shown.length).toBeGreaterThan(0);
    expect(shown.length).toBeLessThan(25);
    expect(shown[0]).toContain('m0000000');
    expect(out).toContain(`+${25 - shown.length} more: \`gpu-medic history ct129 --limit 100\` lists them`);
  });
});
