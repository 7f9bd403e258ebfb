import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseCommandText } from '../../commands/parse-text.ts';
import { refusalText } from '../../commands/approval-actions.ts';
import type { Approval } from '../../src/approval/approval-store.ts';
import type { ErrorCode } from '../../src/errors.ts';
import type { Diagnosis } from '../../src/gpu/diagnose.ts';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import type { Verdict } from '../../src/gpu/verdict.ts';
import type { IncidentMeta, LoggedEvent } from '../../src/incident/events.ts';
import type { UnstickLoggedEvent } from '../../src/incident/unstick-events.ts';
import type { Step } from '../../src/plan/unstick-plan.ts';
import { explainMachineError } from '../../src/render/explain.ts';
import { clipChars, richData } from '../../src/render/escape.ts';
import { renderIncident, type MessageView } from '../../src/render/status.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { renderDoctor } from '../../src/render/doctor.ts';
import { renderHome } from '../../src/render/home.ts';
import { renderAlert } from '../../src/render/alert.ts';
import type { AlertEvent } from '../../src/watchdog/alert-events.ts';
import type { Alert } from '../../src/watchdog/judge.ts';
import type { Finding } from '../../src/doctor/judge.ts';
import { GIB } from '../../src/gpu/snapshot.ts';
import { summarizeIncident } from '../../src/incident/incident-summary.ts';
import { renderHistory } from '../../src/render/history.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';

/**
 * Every renderer, fed machine and user text built from the pieces an attacker (a container user
 * naming a process, a broken driver, a crafted reason) would use. The only `<…>` tokens allowed in
 * the output are gpu-medic's own mentions of the requester and the approver.
 */
const REQUESTER = 'U0REQUEST';
const APPROVER = 'U0APPROV1';
const OWN_MENTIONS = [`<@${REQUESTER}>`, `<@${APPROVER}>`];

const PIECES = [
  '<!channel>',
  '<!here>',
  '<!everyone>',
  '<@U0EVIL>',
  '<#C0EVIL>',
  '<!subteam^S0EVIL>',
  '<https://evil.example/approve|Approve here>',
  '<mailto:a@evil.example|mail>',
  '\n• host PID *FORGED* · container PID *1*',
  '\r\nFORGED',
  '\u2028FORGED',
  '\n> FORGED',
  '*LIVE*',
  '_LIVE_',
  '~LIVE~',
  '`',
  '``` ',
  '`*LIVE*`',
  '&',
  '&lt;!channel&gt;',
  '<',
  '>',
  '|',
  '\t',
  '\u0000',
  '\u202e',
  'python3',
  ' ',
  'a',
];
/** Never starts with FORGED: a line that does was forged by a newline in the data. */
const hostile = fc
  .array(fc.constantFrom(...PIECES), { minLength: 1, maxLength: 6 })
  .map((parts) => `x${parts.join('')}`);

interface Hostile {
  name: string;
  user: string;
  cmdline: string;
  error: string;
  reason: string;
  detail: string;
}
const hostiles: fc.Arbitrary<Hostile> = fc.record({
  name: hostile,
  user: hostile,
  cmdline: hostile,
  error: hostile,
  reason: hostile,
  detail: hostile,
});

const AT = '2026-11-30T09:20:00.000Z';
const INC = 'inc_20261130_092000_k3x9q2';
const APR = 'apr_Qm9vYmFyYmF6cXV4MTIzNA';

function meta(kind: IncidentMeta['kind'], h: Hostile, targets: string[]): IncidentMeta {
  return {
    id: INC,
    kind,
    requester: REQUESTER,
    channel: 'C0GPUOPS',
    targets,
    text: h.reason,
    reason: kind === 'unstick' ? h.reason : null,
    createdAt: AT,
  };
}

function snapshot(machineId: string, view: 'host' | 'container', h: Hostile): MachineSnapshot {
  return {
    machineId,
    view,
    takenAt: AT,
    gpus: [0, 1].map((index) => ({
      index,
      name: h.name,
      busId: null,
      uuid: `GPU-${index}`,
      memoryUsedMiB: 40_000,
      memoryTotalMiB: 81_559,
      utilizationPct: 0,
    })),
    // Enough processes on GPU 0 that its cell says "+N more" and the full list follows in its own message.
    processes: Array.from({ length: 40 }, (_, i) => ({
      gpuIndex: 0,
      gpuUuid: 'GPU-0',
      pid: 4242 + i,
      type: 'C',
      name: `${h.name} ${h.cmdline}`,
      usedMiB: 1_000,
    })),
    holders: [{ device: '/dev/nvidia0', pid: 63, user: h.user, access: 'F...m', command: h.name }],
    kernelMounts: [],
    ram: { totalBytes: 449 * GIB, usedBytes: 440 * GIB, availableBytes: null },
    gpuError: { kind: 'gpu_lost', message: h.error, busId: null },
    holdersError: h.detail,
  };
}

function step(h: Hostile): Step {
  const cmd = {
    role: 'kill' as const,
    on: 'host' as const,
    argv: ['kill', '-s', 'KILL', '811900'],
    display: `kill -s KILL 811900 ${h.cmdline}`,
    when: 'still_matching' as const,
    timeoutMs: 15_000,
  };
  return {
    id: 'host_kill-3f9a0c1b2d4e',
    tier: 2,
    kind: 'host_kill',
    machineId: 'kpro5',
    targets: [
      {
        hostPid: 811_900,
        containerPid: 1,
        startTimeTicks: 40_000_001,
        cmdline: h.cmdline,
        pidNs: 'pid:[4026532845]',
        gpus: [{ index: 0, hostIndex: 0, uuid: 'GPU-0', usedMiB: 96_413 }],
        hostOnlyWhy: h.detail,
      },
    ],
    gpus: [{ index: 1, hostIndex: 1, uuid: h.name, usedMiB: 8_192 }],
    commands: [cmd],
    explanation: h.detail,
    graceMs: 10_000,
    releaseTimeoutMs: 90_000,
    pollIntervalMs: 3_000,
  };
}

function diagnosis(h: Hostile): Diagnosis {
  const base = {
    hostIndex: 0,
    uuid: 'GPU-0',
    name: h.name,
    usedMiB: 40_000,
    totalMiB: 81_559,
    unaccountedMiB: null,
    holders: [],
    outside: [],
    unresolved: [],
    error: null,
  };
  return {
    target: 'ct129',
    host: 'kpro5',
    gpus: [
      { ...base, index: 0, kind: 'held_host_only', sentence: `GPU 0: held by PID 1 \`${h.cmdline}\`: ${h.detail}` },
      {
        ...base,
        index: 1,
        kind: 'gpu_error',
        error: { kind: 'gpu_lost', message: h.error, busId: null },
        sentence: `GPU 1 is in error: ${h.error}`,
      },
    ],
    deviceOnly: [{ containerPid: 77, devices: ['/dev/nvidia0', h.name], user: h.user, command: h.name }],
    error: { kind: 'driver_unreachable', message: h.error, busId: null },
  };
}

function verdict(h: Hostile): Verdict {
  return {
    kind: 'still_stuck',
    title: 'Still stuck',
    gpus: [
      {
        index: 0,
        uuid: 'GPU-0',
        beforeMiB: 96_413,
        afterMiB: 96_413,
        heldMiB: 96_413,
        leftMiB: 96_413,
        freedMiB: 0,
        othersFreedMiB: 0,
        before: 'held_host_only',
        after: 'held_host_only',
        afterState: 'read',
        recovered: false,
      },
    ],
    totalFreedMiB: 0,
    outside: [`GPU 0: ${h.detail}`],
    nextStep: `GPU 0: ${h.detail}`,
  };
}

type NoId<T> = T extends unknown ? Omit<T, 'id'> : never;

function unstickEvents(h: Hostile, decision: 'approved' | 'denied' | 'pending'): UnstickLoggedEvent[] {
  const s = step(h);
  const rec = {
    machineId: 'kpro5',
    command: `kill -s KILL 811900 ${h.cmdline}`,
    code: 1,
    signal: null,
    durationMs: 120,
    timedOut: false,
  };
  const list: Array<NoId<UnstickLoggedEvent>> = [
    { type: 'requested', at: AT },
    { type: 'snapshot', at: AT, label: 'before', snapshot: snapshot('ct129', 'container', h), commands: [] },
    { type: 'diagnosis', at: AT, label: 'before', diagnosis: diagnosis(h) },
    {
      type: 'approval_requested',
      at: AT,
      approvalId: APR,
      stepId: s.id,
      expiresAt: AT,
      planHash: 'h',
      step: s,
      host: 'kpro5',
      vmid: 129,
    },
    { type: 'approval_refused', at: AT, approvalId: APR, by: h.user, reason: 'not_approver' },
    ...(decision === 'pending'
      ? []
      : [{ type: 'approval_decided' as const, at: AT, approvalId: APR, stepId: s.id, decision, by: APPROVER }]),
    {
      type: 'step_started',
      at: AT,
      stepId: s.id,
      kind: s.kind,
      tier: s.tier,
      machineId: 'kpro5',
      explanation: h.detail,
    },
    { type: 'command', at: AT, stepId: s.id, role: 'kill', on: 'host', record: rec },
    {
      type: 'signalled',
      at: AT,
      stepId: s.id,
      hostPid: 811_900,
      containerPid: 1,
      signal: 'KILL',
      cmdline: h.cmdline,
      result: 'sent',
      reason: null,
    },
    {
      type: 'signalled',
      at: AT,
      stepId: s.id,
      hostPid: 811_901,
      containerPid: 2,
      signal: 'KILL',
      cmdline: h.cmdline,
      result: 'skipped',
      reason: h.detail,
    },
    { type: 'step_finished', at: AT, stepId: s.id, outcome: 'failed', durationMs: 1_000, message: h.detail },
    { type: 'snapshot', at: AT, label: 'after', snapshot: snapshot('kpro5', 'host', h), commands: [] },
    { type: 'machine_error', at: AT, machineId: 'kpro5', code: 'connect_failed', message: h.detail, commands: [] },
    { type: 'error', at: AT, code: 'internal', message: h.error },
    { type: 'verdict', at: AT, verdict: verdict(h) },
    { type: 'finished', at: AT, outcome: 'partial', durationMs: 2_000 },
  ];
  return list.map((e, i): UnstickLoggedEvent => ({ ...e, id: `1764494400000-${i}` }));
}

function statusEvents(h: Hostile, machines: string[]): LoggedEvent[] {
  const list: LoggedEvent[] = [{ type: 'requested', at: AT, id: '1-0' }];
  machines.forEach((m, i) => {
    if (i % 2 === 0)
      list.push({
        type: 'snapshot',
        at: AT,
        label: 'status',
        snapshot: snapshot(m, i === 0 ? 'container' : 'host', h),
        commands: [],
        id: `2-${i}`,
      });
    else
      list.push({
        type: 'machine_error',
        at: AT,
        machineId: m,
        // 'weird_code' is outside the list, as a log read back from Redis may hold: it is shown as text too.
        code: i === 1 ? 'connect_failed' : ('weird_code' as ErrorCode),
        message: h.detail,
        commands: [],
        id: `2-${i}`,
      });
  });
  return list;
}

/**
 * Every string Slack will read: message `text`, mrkdwn/plain text objects, table cells, and the
 * `text` elements of rich_text blocks (`rich`: Slack parses nothing in those, so `<…>` there is
 * letters; a mention is a `user` element, which `richElementProblems` checks).
 */
function slackStrings(v: MessageView): Array<{ where: string; mrkdwn: boolean; rich: boolean; s: string }> {
  const out: Array<{ where: string; mrkdwn: boolean; rich: boolean; s: string }> = [
    { where: `${v.key}.text`, mrkdwn: true, rich: false, s: v.text },
  ];
  const walk = (node: unknown, path: string): void => {
    if (Array.isArray(node)) node.forEach((n, i) => walk(n, `${path}[${i}]`));
    else if (node !== null && typeof node === 'object') {
      const o = node as Record<string, unknown>;
      if (typeof o.text === 'string' && typeof o.type === 'string')
        out.push({ where: path, mrkdwn: o.type === 'mrkdwn', rich: o.type === 'text', s: o.text });
      for (const [k, val] of Object.entries(o)) walk(val, `${path}.${k}`);
    }
  };
  walk(v.blocks, `${v.key}.blocks`);
  return out;
}

/** rich_text elements that Slack would make live: a broadcast, link, channel or group, or a user that is not gpu-medic's own mention. */
function richElementProblems(v: MessageView): string[] {
  const found: string[] = [];
  const walk = (node: unknown, path: string): void => {
    if (Array.isArray(node)) node.forEach((n, i) => walk(n, `${path}[${i}]`));
    else if (node !== null && typeof node === 'object') {
      const o = node as Record<string, unknown>;
      if (['broadcast', 'link', 'channel', 'usergroup', 'team'].includes(String(o.type)))
        found.push(`${path}: a live ${String(o.type)} element`);
      if (o.type === 'user' && !OWN_MENTIONS.includes(`<@${String(o.user_id)}>`))
        found.push(`${path}: a mention of ${String(o.user_id)}`);
      for (const [k, val] of Object.entries(o)) walk(val, `${path}.${k}`);
    }
  };
  walk(v.blocks, `${v.key}.blocks`);
  return found;
}

/** Removes code blocks and code spans the way Slack pairs them, left to right. */
function outsideCode(s: string): string {
  return s.replace(/```[\s\S]*?```/g, ' ').replace(/`[^`\n]*`/g, ' ');
}

function problems(where: string, mrkdwn: boolean, rich: boolean, s: string): string[] {
  const found: string[] = [];
  let rest = s;
  for (const m of OWN_MENTIONS) rest = rest.split(m).join('');
  if (!rich && rest.includes('<'))
    found.push(
      `${where}: a <…> token survives: ${JSON.stringify(s.slice(Math.max(0, rest.indexOf('<') - 20), rest.indexOf('<') + 40))}`,
    );
  for (const line of s.split(/\r\n|\r|\n|\u2028|\u2029/)) {
    if (/^[\s•*_~>`]*FORGED/.test(line)) found.push(`${where}: forged line ${JSON.stringify(line)}`);
  }
  if (!mrkdwn) {
    if (/[\r\n]/.test(s) && where.includes('rows')) found.push(`${where}: a table cell spans lines`);
    return found;
  }
  const live = outsideCode(s);
  for (const mark of ['*LIVE', '_LIVE', '~LIVE'])
    if (live.includes(mark)) found.push(`${where}: live formatting ${mark} outside code`);
  return found;
}

function check(views: readonly MessageView[]): string[] {
  return views.flatMap((v) => [
    ...slackStrings(v).flatMap(({ where, mrkdwn, rich, s }) => problems(where, mrkdwn, rich, s)),
    ...richElementProblems(v),
  ]);
}

const RUNS = { numRuns: 150, seed: 20261201 };

describe('machine and user text is data, never markup, in every renderer', () => {
  it('status thread (snapshot table, holders, flags, GPU errors, machine errors)', () => {
    fc.assert(
      fc.property(hostiles, (h) => {
        const m = meta('status', h, ['ct129']);
        const views = renderIncident(m, statusEvents(h, ['ct129']));
        expect(views.some((v) => v.key.endsWith(':processes'))).toBe(true);
        expect(check(views)).toEqual([]);
      }),
      RUNS,
    );
  });

  it('status all summary and its machine errors', () => {
    fc.assert(
      fc.property(hostiles, (h) => {
        const machines = ['kpro5', 'kpro6', 'ct129', 'ct130'];
        expect(check(renderIncident(meta('status_all', h, machines), statusEvents(h, machines)))).toEqual([]);
      }),
      RUNS,
    );
  });

  it('unstick thread: reason, before/after tables, diagnosis, steps, approval card (pending, approved, denied), verdict, summary, errors', () => {
    fc.assert(
      fc.property(
        hostiles,
        fc.constantFrom('approved' as const, 'denied' as const, 'pending' as const),
        (h, decision) => {
          const views = renderUnstick(meta('unstick', h, ['ct129']), unstickEvents(h, decision));
          expect(check(views)).toEqual([]);
          // The approval card's machine text is rich_text data, kept as it is (inert, no look-alikes needed):
          // the cmdline is one code-styled element holding exactly the (clipped) data, with no look-alikes.
          const card = views.find((v) => v.key === `approval:${APR}`);
          const codeTexts =
            JSON.stringify(card?.blocks ?? []).match(/"text":"(?:[^"\\]|\\.)*","style":\{"code":true\}/g) ?? [];
          const shown = codeTexts.map((t) => JSON.parse(`{${t}}`).text as string);
          expect(shown).toContain(richData(clipChars(h.cmdline, 120)));
          // gpu-medic's own mentions are written once, not escaped.
          expect(views[0]?.text).toContain(`<@${REQUESTER}>`);
          if (decision !== 'pending')
            expect(views.find((v) => v.key === `approval:${APR}`)?.text).toContain(`<@${APPROVER}>`);
        },
      ),
      RUNS,
    );
  });

  it('App Home: machine ids, reading error codes, alert sentences, incident targets and requesters', () => {
    fc.assert(
      fc.property(hostiles, (h) => {
        const now = Date.parse(AT);
        const g = {
          at: now,
          ok: false,
          code: h.error,
          gpus: 0,
          gpuMemoryUsedMiB: 0,
          gpuMemoryTotalMiB: 0,
          ramPct: null,
          openAlerts: 1,
        };
        const alert = {
          key: h.detail,
          kind: 'xid' as const,
          machineId: h.name,
          gpu: 0,
          since: now,
          raisedAt: now,
          sentence: h.detail,
          lastSeenAt: now,
        };
        const view = renderHome({
          now,
          machines: [
            { id: h.name, glance: { ...g, machineId: h.name } },
            { id: h.user, glance: null },
            { id: h.cmdline, glance: null, unreadable: true },
          ],
          alerts: [
            { incidentId: h.reason, alert, cleared: false, snoozedUntil: null },
            { incidentId: h.error, alert: null, cleared: false, snoozedUntil: null },
          ],
          incidents: [
            { id: h.reason, targets: [h.name, h.cmdline], requester: REQUESTER, state: 'running', createdAt: AT },
            { id: INC, targets: [h.user], requester: h.user, state: 'waiting for approval', createdAt: h.detail },
          ],
          ramPct: 90,
          staleAfterMs: 60_000,
        });
        expect(
          check([{ key: 'home', placement: 'parent', text: '', blocks: view.blocks as MessageView['blocks'] }]),
        ).toEqual([]);
        expect(JSON.stringify(view.blocks)).toContain(`<@${REQUESTER}>`);
      }),
      RUNS,
    );
  });

  it('doctor thread: machine details in the table and in the fixes, errors', () => {
    fc.assert(
      fc.property(hostiles, (h) => {
        const findings: Finding[] = [
          { machineId: 'kpro5', kind: 'host', check: 'fuser', status: 'fail', detail: h.detail, hint: h.error },
          { machineId: 'ct129', kind: 'container', check: 'fuser', status: 'warn', detail: h.name, hint: h.cmdline },
        ];
        const events: LoggedEvent[] = [
          { type: 'requested', at: AT, id: '1-0' },
          { type: 'doctor_report', at: AT, machines: ['kpro5', 'ct129'], findings, failed: 1, warned: 1, id: '1-1' },
          { type: 'error', at: AT, code: 'internal', message: h.error, id: '1-2' },
          { type: 'finished', at: AT, outcome: 'partial', durationMs: 10, id: '1-3' },
        ];
        expect(check(renderDoctor(meta('doctor', h, ['kpro5', 'ct129']), events))).toEqual([]);
      }),
      RUNS,
    );
  });

  it('alert message: the sentence, the machine and container ids, snoozers and refusals (raised, snoozed, clicked, cleared)', () => {
    fc.assert(
      fc.property(hostiles, (h) => {
        const alert: Alert = {
          key: 'k',
          kind: 'xid',
          machineId: h.name,
          gpu: 0,
          since: 0,
          raisedAt: 0,
          sentence: h.detail,
          lastSeenAt: 0,
        };
        const ev = (e: AlertEvent, i: number) => ({ ...e, id: `1-${i}` });
        const live = [
          ev({ type: 'alert_raised', at: AT, alert }, 0),
          ev({ type: 'alert_snoozed', at: AT, by: h.user, scope: h.name, until: AT }, 1),
          ev(
            {
              type: 'alert_action',
              at: AT,
              by: REQUESTER,
              action: 'unstick',
              incidentId: null,
              refused: h.error,
              target: h.cmdline,
            },
            2,
          ),
        ];
        const ctx = {
          machines: [
            { id: h.name, kind: 'host' as const },
            { id: h.cmdline, kind: 'container' as const, hostId: h.name },
          ],
        };
        const m = { ...meta('alert', h, [h.name]), requester: 'watchdog' };
        const rendered = [
          ...renderAlert(m, live, ctx),
          ...renderAlert(m, [...live, ev({ type: 'alert_cleared', at: AT, alert }, 3)], ctx),
        ];
        // The sentence (machine text inside) is a rich_text block, so it is checked like the rest; its text
        // elements are walked too.
        expect(rendered.every((v) => v.blocks.some((b) => b.type === 'rich_text'))).toBe(true);
        expect(check(rendered)).toEqual([]);
      }),
      RUNS,
    );
  });

  it('history answer: unstick steps, approvals, verdict, errors, a watchdog alert (its sentence, clicks, snoozes), a container seen from its host', () => {
    fc.assert(
      fc.property(
        hostiles,
        fc.constantFrom('approved' as const, 'denied' as const, 'pending' as const),
        (h, decision) => {
          const alert = {
            key: h.name,
            kind: 'ghost_memory' as const,
            machineId: 'kpro5',
            gpu: 3,
            since: 0,
            raisedAt: 0,
            sentence: h.detail,
            lastSeenAt: 0,
          };
          const alertEvents: AnyLoggedEvent[] = [
            { type: 'alert_raised', at: AT, alert, id: '1-0' },
            { type: 'alert_updated', at: AT, alert: { ...alert, sentence: h.error }, id: '1-1' },
            {
              type: 'alert_action',
              at: AT,
              by: h.user,
              action: 'unstick',
              incidentId: h.name,
              refused: h.reason,
              target: h.cmdline,
              id: '1-2',
            },
            { type: 'alert_snoozed', at: AT, by: APPROVER, scope: h.name, until: h.detail, id: '1-3' },
          ];
          const status = meta('status', h, ['kpro5']);
          const out = renderHistory({
            target: { id: 'kpro5', kind: 'host' },
            containers: ['ct129'],
            limit: 5,
            cappedFrom: null,
            max: 25,
            more: true,
            scan: { scanned: 3, bound: 500, complete: false, before: h.detail },
            entries: [
              {
                id: INC,
                at: AT,
                via: 'ct129',
                summary: summarizeIncident(meta('unstick', h, ['ct129']), unstickEvents(h, decision)),
              },
              {
                id: 'inc_alert_0123',
                at: AT,
                via: null,
                summary: summarizeIncident({ ...meta('alert', h, ['kpro5']), requester: 'watchdog' }, alertEvents),
              },
              {
                id: 'inc_x',
                at: AT,
                via: null,
                summary: summarizeIncident({ ...status, requester: h.user }, statusEvents(h, ['kpro5', 'kpro6'])),
              },
              { id: 'inc_gone', at: h.detail, via: null, summary: null },
            ],
          });
          expect(problems('history', true, false, out)).toEqual([]);
          // One line per incident between the header and the notes: data cannot add or split lines.
          expect(out.split('\n').filter((l) => l.startsWith('• '))).toHaveLength(4);
          expect(out).toContain(`<@${REQUESTER}>`);
        },
      ),
      RUNS,
    );
  });

  it('machine error explanations and ephemeral answers', () => {
    fc.assert(
      fc.property(
        hostiles,
        fc.constantFrom(
          'host_key_mismatch',
          'connect_failed',
          'connection_lost',
          'command_timeout',
          'target_unknown',
          'parse_failed',
          'other',
        ),
        (h, code) => {
          const texts = [
            explainMachineError('kpro5', code, h.detail),
            refusalText('approval_decided', { decidedBy: h.user, decidedAt: 0, state: 'approved' } as Pick<
              Approval,
              'decidedBy' | 'decidedAt' | 'state'
            > as Approval),
          ];
          for (const typed of [h.reason, `status ${h.reason}`, `unstick ${h.reason}`, `${h.name} ct129`]) {
            const c = parseCommandText(typed);
            if (c.kind === 'invalid') texts.push(c.message);
          }
          expect(texts.flatMap((s, i) => problems(`text ${i}`, true, false, s))).toEqual([]);
        },
      ),
      RUNS,
    );
  });
});
