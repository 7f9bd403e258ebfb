import type { types } from '@slack/bolt';
import { describe, expect, it } from 'vitest';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import { verdictOf } from '../../src/gpu/verdict.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { APPROVE_ACTION_ID, DENY_ACTION_ID, renderUnstick } from '../../src/render/unstick.ts';
import type { UnstickLoggedEvent } from '../../src/incident/unstick-events.ts';
import { planUnstick, stepHash } from '../../src/plan/unstick-plan.ts';
import { GIB } from '../../src/gpu/snapshot.ts';
import { gpus } from '../unstick/seed-fleet.ts';
import { allClean, s3HostKill } from '../unstick/scenarios.ts';
import { slackRefusal } from '../harness/slack/fake-slack-api.ts';

const INC = 'inc_20261130_092000_k3x9q2';
const APR = 'apr_Qm9vYmFyYmF6cXV4MTIzNA';
const meta: IncidentMeta = {
  id: INC,
  kind: 'unstick',
  requester: 'U0REQUEST',
  channel: 'C0GPUOPS',
  targets: ['ct129'],
  text: 'ct129 hicache OOM, TP ranks hung',
  reason: 'hicache OOM, TP ranks hung',
  createdAt: '2026-11-30T09:20:00.000Z',
};

function snap(label: 'before' | 'after', used: Record<number, number>, at: string): MachineSnapshot {
  return {
    machineId: 'ct129',
    view: 'container',
    takenAt: at,
    gpus: gpus(used),
    processes: [],
    holders: [],
    kernelMounts: ['/dev/nvidia0', '/dev/nvidiactl'],
    ram: { totalBytes: 449 * GIB, usedBytes: (label === 'before' ? 439 : 31) * GIB, availableBytes: null },
    gpuError: null,
  };
}

type NoId<T> = T extends unknown ? Omit<T, 'id'> : never;

/** S3 end to end, as the worker and bot would append it. */
function s3Events(): UnstickLoggedEvent[] {
  const before = s3HostKill();
  const plan = planUnstick(before, { incidentId: INC, vmid: 129 });
  const [tier1, hostKill] = plan.steps;
  if (!tier1 || !hostKill) throw new Error('fixture');
  const rec = (command: string, code: number, durationMs: number) => ({
    machineId: 'ct129',
    command,
    code,
    signal: null,
    durationMs,
    timedOut: false,
  });
  const list: Array<NoId<UnstickLoggedEvent>> = [
    { type: 'requested', at: '2026-11-30T09:20:00.000Z' },
    { type: 'started', at: '2026-11-30T09:20:01.000Z', worker: 'worker-kpro' },
    {
      type: 'snapshot',
      at: '2026-11-30T09:20:02.000Z',
      label: 'before',
      snapshot: snap('before', { 0: 96_413, 2: 96_417, 5: 40_211 }, '2026-11-30T09:20:02.000Z'),
      commands: [],
    },
    { type: 'diagnosis', at: '2026-11-30T09:20:03.000Z', label: 'before', diagnosis: before },
    {
      type: 'step_started',
      at: '2026-11-30T09:20:03.100Z',
      stepId: tier1.id,
      kind: tier1.kind,
      tier: tier1.tier,
      machineId: tier1.machineId,
      explanation: tier1.explanation,
    },
    {
      type: 'command',
      at: '2026-11-30T09:20:03.400Z',
      stepId: tier1.id,
      role: 'term',
      on: 'container',
      record: rec('exec timeout -k 5 15 pct exec 129 -- timeout -k 5 15 kill -s TERM 63', 0, 310),
    },
    {
      type: 'signalled',
      at: '2026-11-30T09:20:03.400Z',
      stepId: tier1.id,
      hostPid: 812_351,
      containerPid: 63,
      signal: 'TERM',
      cmdline: 'sglang::scheduler_TP2',
      result: 'sent',
      reason: null,
    },
    {
      type: 'step_finished',
      at: '2026-11-30T09:20:19.000Z',
      stepId: tier1.id,
      outcome: 'done',
      durationMs: 15_900,
      message: 'GPU 2 freed 96,417 MiB.',
    },
    {
      type: 'approval_requested',
      at: '2026-11-30T09:20:20.000Z',
      approvalId: APR,
      stepId: hostKill.id,
      expiresAt: '2026-11-30T09:35:20.000Z',
      planHash: stepHash(hostKill),
      step: hostKill,
      host: 'kpro5',
      vmid: 129,
    },
    {
      type: 'approval_refused',
      at: '2026-11-30T09:21:00.000Z',
      approvalId: APR,
      by: 'U0REQUEST',
      reason: 'self_approval',
    },
    {
      type: 'approval_decided',
      at: '2026-11-30T09:24:10.000Z',
      approvalId: APR,
      stepId: hostKill.id,
      decision: 'approved',
      by: 'U0APPROV1',
    },
    {
      type: 'step_started',
      at: '2026-11-30T09:24:11.000Z',
      stepId: hostKill.id,
      kind: hostKill.kind,
      tier: hostKill.tier,
      machineId: 'kpro5',
      explanation: hostKill.explanation,
    },
    {
      type: 'command',
      at: '2026-11-30T09:24:11.500Z',
      stepId: hostKill.id,
      role: 'kill',
      on: 'host',
      record: { ...rec(`exec timeout -k 5 15 ${hostKill.commands[2]?.display ?? ''}`, 0, 120), machineId: 'kpro5' },
    },
    {
      type: 'signalled',
      at: '2026-11-30T09:24:11.500Z',
      stepId: hostKill.id,
      hostPid: 811_900,
      containerPid: 71,
      signal: 'KILL',
      cmdline: 'python3 /opt/serve.py',
      result: 'sent',
      reason: null,
    },
    {
      type: 'step_finished',
      at: '2026-11-30T09:24:40.000Z',
      stepId: hostKill.id,
      outcome: 'done',
      durationMs: 29_000,
      message: 'GPU 0 freed 96,413 MiB.',
    },
    {
      type: 'snapshot',
      at: '2026-11-30T09:24:41.000Z',
      label: 'after',
      snapshot: snap('after', { 5: 40_211 }, '2026-11-30T09:24:41.000Z'),
      commands: [],
    },
    { type: 'diagnosis', at: '2026-11-30T09:24:41.500Z', label: 'after', diagnosis: allClean() },
    { type: 'verdict', at: '2026-11-30T09:24:42.000Z', verdict: verdictOf(before, allClean()) },
    { type: 'finished', at: '2026-11-30T09:24:42.000Z', outcome: 'ok', durationMs: 282_000 },
  ];
  return list.map((e, i): UnstickLoggedEvent => ({ ...e, id: `1764494400000-${i}` }));
}

const upTo = (events: UnstickLoggedEvent[], type: string, nth = 1): UnstickLoggedEvent[] => {
  let seen = 0;
  const i = events.findIndex((e) => e.type === type && ++seen === nth);
  return events.slice(0, i + 1);
};
const blockText = (b: types.KnownBlock): string => JSON.stringify(b);
/** The block texts Slack parses for mentions and links: mrkdwn and plain_text objects, not rich_text elements. */
const parsedTexts = (blocks: unknown): string[] => {
  const out: string[] = [];
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) n.forEach(walk);
    else if (n !== null && typeof n === 'object') {
      const o = n as Record<string, unknown>;
      if ((o.type === 'mrkdwn' || o.type === 'plain_text') && typeof o.text === 'string') out.push(o.text);
      Object.values(o).forEach(walk);
    }
  };
  walk(blocks);
  return out;
};
const actionsOf = (blocks: types.KnownBlock[]) => blocks.filter((b): b is types.ActionsBlock => b.type === 'actions');

describe('renderUnstick', () => {
  it('renders the thread in event order with stable keys, deterministically', () => {
    const events = s3Events();
    const views = renderUnstick(meta, events);
    const hk = events.find((e) => e.type === 'approval_requested');
    expect(views.map((v) => v.key)).toEqual([
      'parent',
      'ev:1764494400000-2',
      'ev:1764494400000-3',
      `step:${events[4]?.type === 'step_started' ? events[4].stepId : ''}`,
      `approval:${APR}`,
      `step:${hk?.type === 'approval_requested' ? hk.stepId : ''}`,
      'ev:1764494400000-15',
      'ev:1764494400000-16',
      'ev:1764494400000-17',
      'summary',
    ]);
    expect(views[0]?.placement).toBe('parent');
    expect(views.slice(1).every((v) => v.placement === 'reply')).toBe(true);
    expect(renderUnstick(meta, events)).toEqual(views);
  });

  it('a step started again by a worker that took over after a crash still renders as one message', () => {
    const events = s3Events();
    const start = events.find((e) => e.type === 'step_started');
    if (!start) throw new Error('no step');
    const again = [...events, { ...start, id: '1796030000999-0', at: '2026-11-30T09:30:00.000Z' }];
    const keys = renderUnstick(meta, again).map((v) => v.key);
    expect(keys.filter((k) => k === `step:${start.type === 'step_started' ? start.stepId : ''}`)).toHaveLength(1);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('never puts two table blocks in one message (Slack refuses it)', () => {
    for (const v of renderUnstick(meta, s3Events()))
      expect(v.blocks.filter((b) => b.type === 'table').length).toBeLessThanOrEqual(1);
  });

  it('a pending card shows host, vmid, each process and the literal host commands, with buttons carrying the approval id and the plan digest', () => {
    const events = upTo(s3Events(), 'approval_requested');
    const card = renderUnstick(meta, events).find((v) => v.key === `approval:${APR}`);
    if (!card) throw new Error('no card');
    expect(card.text).toContain('host `kpro5` · container vmid 129');
    expect(card.text).toContain(
      'host PID *811900* · container PID *71* · start 40000001 ticks after boot · `python3 /opt/serve.py` · GPU 0 96,413 MiB',
    );
    expect(card.text).toContain(
      '[host] sh -c &lt;check-and-signal script: pidfd, then PID + start time, PID namespace, open /dev/nvidia*; args: side signal ns (pid start ctpid)…&gt; sh host KILL 4026532845 811900 40000001 71   # only if the re-check still matches',
    );
    expect(card.text).toContain('[host] sh -c &lt;read-procs script: stat, NSpid, ns/pid, cmdline&gt; sh 811900');
    expect(card.text).not.toContain('od -An');
    expect(card.text).toContain('the container could not stop it (EPERM: Operation not permitted)');
    const [actions] = actionsOf(card.blocks);
    const buttons = (actions?.elements ?? []).filter((e): e is types.Button => e.type === 'button');
    expect(buttons.map((b) => [b.action_id, b.text.text, b.style, b.value])).toEqual([
      // Each button carries the approval id and the digest of the plan the card shows, so a click approves
      // that plan only.
      [APPROVE_ACTION_ID, 'Approve', 'primary', expect.stringMatching(new RegExp(`^${APR}\\.[0-9a-f]{64}$`))],
      [DENY_ACTION_ID, 'Deny', 'danger', expect.stringMatching(new RegExp(`^${APR}\\.[0-9a-f]{64}$`))],
    ]);
    expect([APPROVE_ACTION_ID, DENY_ACTION_ID]).toEqual(['gpu_approve', 'gpu_deny']);
    expect(renderUnstick(meta, events)[0]?.text).toContain(
      "waiting for a second person's approval (expires 2026-11-30 09:35:20 UTC)",
    );
  });

  it('after the decision the card is updated in place: no buttons, who decided and when, and the refused click', () => {
    const events = upTo(s3Events(), 'approval_decided');
    const card = renderUnstick(meta, events).find((v) => v.key === `approval:${APR}`);
    expect(actionsOf(card?.blocks ?? [])).toEqual([]);
    expect(card?.text).toContain(':white_check_mark: *Approved* by <@U0APPROV1> at 2026-11-30 09:24:10 UTC');
    expect(card?.blocks.map(blockText).join('')).toContain(
      'Refused: <@U0REQUEST>, the requester cannot approve their own request',
    );
  });

  it('a refusal for a spent blast-radius budget is said in words on the card, not as its code', () => {
    const events = upTo(s3Events(), 'approval_refused');
    events.push({
      type: 'approval_refused',
      at: '2026-11-30T09:22:00.000Z',
      approvalId: APR,
      by: 'U0APPROV1',
      reason: 'budget_exhausted',
      id: '1764494400000-98',
    });
    const card = renderUnstick(meta, events).find((v) => v.key === `approval:${APR}`);
    const text = card?.blocks.map(blockText).join('') ?? '';
    expect(text).toContain(
      "Refused: <@U0APPROV1>, the host's blast-radius budget of host-level steps was spent for this hour",
    );
    expect(text).not.toContain('budget_exhausted');
  });

  it('an expired card says so, has no buttons, and says nothing ran', () => {
    const events = upTo(s3Events(), 'approval_refused');
    const stepId = events.find((e) => e.type === 'approval_requested');
    events.push({
      type: 'approval_expired',
      at: '2026-11-30T09:35:20.000Z',
      approvalId: APR,
      stepId: stepId?.type === 'approval_requested' ? stepId.stepId : '',
      id: '1764494400000-99',
    });
    const card = renderUnstick(meta, events).find((v) => v.key === `approval:${APR}`);
    expect(actionsOf(card?.blocks ?? [])).toEqual([]);
    expect(card?.text).toContain(
      '*Expired* at 2026-11-30 09:35:20 UTC without a decision. Nothing from this card was run.',
    );
  });

  it("a step's explanation shows its code as code in the step message's blocks and the card's fallback, never as look-alike backticks", () => {
    const views = renderUnstick(meta, s3Events());
    const host = views.find((v) => v.key.startsWith('step:host_kill-'));
    const card = views.find((v) => v.key === `approval:${APR}`);
    expect(card?.text).toContain('(not through `pct exec`: that enters');
    expect(card?.text).not.toContain('ˋ');
    expect(JSON.stringify(host?.blocks)).toContain('(not through `pct exec`: that enters');
    expect(JSON.stringify(host?.blocks)).not.toContain('ˋ');
  });

  it('each step shows its literal commands with exit codes and durations, and what was signalled', () => {
    const views = renderUnstick(meta, s3Events());
    const host = views.find((v) => v.key.startsWith('step:host_kill-'));
    expect(host?.text).toContain('*Host-level kill* (tier 2, on `kpro5`) · :white_check_mark: done in 29.0 s');
    expect(host?.text).toContain('sh host KILL 4026532845 811900 40000001 71\n    → exit 0 · 0.1 s');
    expect(host?.text).toContain('• SIGKILL PID 71 (host PID 811900) `python3 /opt/serve.py`: sent');
  });

  it('the verdict shows before → after per GPU in its own table, and the summary closes', () => {
    const views = renderUnstick(meta, s3Events());
    const verdict = views.find((v) => v.key === 'ev:1764494400000-17');
    const table = verdict?.blocks.find((b) => b.type === 'table') as
      | { rows: Array<Array<{ text: string }>> }
      | undefined;
    const rows = table?.rows.map((r) => r.map((c) => c.text)) ?? [];
    expect(rows[0]).toEqual(['GPU', 'Held by ct129', 'Left', 'Freed', 'GPU in use before → after', 'Now']);
    expect(rows[1]).toEqual(['0', '96,413 MiB', '0 MiB', '96,413 MiB', '96,413 → 0 MiB', 'idle']);
    expect(rows[3]).toEqual(['2', '96,417 MiB', '0 MiB', '96,417 MiB', '96,417 → 0 MiB', 'idle']);
    expect(rows[6]).toEqual(['5', '0 MiB', '0 MiB', '0 MiB', '40,211 → 40,211 MiB', 'held outside']);
    expect(verdict?.text).toContain(':white_check_mark: *Recovered* · 192,830 MiB freed');
    const summary = views.find((v) => v.key === 'summary')?.text ?? '';
    expect(summary).toContain('*Summary* · Recovered · took 282.0 s');
    expect(summary).toContain('Asked by <@U0REQUEST> (reason: hicache OOM, TP ranks hung)');
    expect(summary).toContain('Approved by <@U0APPROV1> at 2026-11-30 09:24:10 UTC');
    expect(summary).toContain('• SIGTERM → PID 63 (host PID 812351) `sglang::scheduler_TP2`');
    expect(summary).toContain('• SIGKILL → PID 71 (host PID 811900) `python3 /opt/serve.py`');
    expect(views[0]?.text).toMatch(/· Recovered$/);
  });

  it('before and after tables reuse the status snapshot view', () => {
    const views = renderUnstick(meta, s3Events());
    expect(views[1]?.text).toMatch(/^\*Before · `ct129`\* · container view · snapshot 2026-11-30 09:20:02 UTC/);
    // Under RAM pressure the warning carries the figures; the plain RAM line would say them twice.
    expect(views[1]?.text).toContain('RAM pressure: 98% used (439 of 449 GiB)');
    expect(views.find((v) => v.key === 'ev:1764494400000-15')?.text).toMatch(/^\*After · `ct129`\*/);
  });

  it('an approval card built from hostile machine text shows it as literal data in rich_text, with no look-alike characters, and Slack accepts it', () => {
    const evil = 'x`<!here>` *bold* &lt; _i_ ~s~ ```';
    const events = upTo(s3Events(), 'approval_requested').map((e): UnstickLoggedEvent => {
      if (e.type !== 'approval_requested') return e;
      return {
        ...e,
        step: {
          ...e.step,
          explanation: `Kill ${evil} on the host.`,
          targets: e.step.targets.map((t) => ({ ...t, cmdline: evil, hostOnlyWhy: evil })),
          commands: e.step.commands.map((c) => ({ ...c, display: `kill -s KILL 811900 # ${evil}` })),
        },
      };
    });
    const card = renderUnstick(meta, events).find((v) => v.key === `approval:${APR}`);
    if (!card) throw new Error('no card');
    expect(slackRefusal(card)).toBeNull();
    // Every string of the card's blocks, by what Slack does with it.
    const mrkdwn: string[] = [];
    const richText: Array<{ text: string; style?: Record<string, boolean>; pre: boolean }> = [];
    const inlineTypes = new Set<string>();
    const walk = (n: unknown, pre: boolean): void => {
      if (Array.isArray(n)) n.forEach((x) => walk(x, pre));
      else if (n !== null && typeof n === 'object') {
        const o = n as Record<string, unknown>;
        const inPre = pre || o.type === 'rich_text_preformatted';
        if (o.type === 'mrkdwn' && typeof o.text === 'string') mrkdwn.push(o.text);
        if (o.type === 'text' && typeof o.text === 'string')
          richText.push({
            text: o.text,
            pre: inPre,
            ...(o.style ? { style: o.style as Record<string, boolean> } : {}),
          });
        if (typeof o.type === 'string') inlineTypes.add(o.type);
        for (const v of Object.values(o)) walk(v, inPre);
      }
    };
    walk(card.blocks, false);
    // The cmdline is one code-styled element holding the data exactly; the host-only reason is plain text.
    expect(richText.filter((t) => t.style?.code && t.text === evil)).toHaveLength(1);
    expect(richText.some((t) => !t.style?.code && t.text.includes(evil))).toBe(true);
    // The commands are a preformatted element: verbatim, one per line.
    const pre = richText
      .filter((t) => t.pre)
      .map((t) => t.text)
      .join('');
    expect(pre.split('\n').filter((l) => l.includes(`kill -s KILL 811900 # ${evil}`))).toHaveLength(
      events.flatMap((e) => (e.type === 'approval_requested' ? e.step.commands : [])).length,
    );
    // No mrkdwn on the card carries any of it, so nothing needed look-alikes.
    for (const t of mrkdwn)
      for (const bit of ['<!here>', '*bold*', '&lt;', 'ˋ', '∗', 'ˍ', '∼']) expect(t).not.toContain(bit);
    expect(JSON.stringify(card.blocks)).not.toMatch(/[ˋ∗ˍ∼‹›]/);
    // rich_text has no broadcast, link or channel element here: `<!here>` is letters, not a mention.
    expect([...inlineTypes].filter((t) => ['broadcast', 'link', 'channel', 'usergroup'].includes(t))).toEqual([]);
    // The fallback text (notifications) is mrkdwn: there the data stays escaped.
    expect(card.text).not.toContain('<!here>');
    expect(card.text).toContain('&lt;!here&gt;');
  });

  it('the reason and machine text cannot mention @channel or break code spans', () => {
    const evil = '<!channel> `*rm -rf*` & co';
    const events = s3Events().map((e): UnstickLoggedEvent => {
      if (e.type === 'signalled') return { ...e, cmdline: evil, reason: evil };
      if (e.type === 'step_finished') return { ...e, message: evil };
      if (e.type === 'approval_requested')
        return {
          ...e,
          step: {
            ...e.step,
            // As the plan words it: machine text inside a code span of its own sentence.
            explanation: `Kill PID 71 \`${evil}\` on the host.`,
            targets: e.step.targets.map((t) => ({ ...t, cmdline: evil, hostOnlyWhy: evil })),
          },
        };
      return e;
    });
    const views = renderUnstick({ ...meta, reason: evil }, events);
    expect(views[0]?.text).toContain('reason: &lt;!channel&gt; ˋ∗rm -rf∗ˋ &amp; co');
    // Inside a code span the data keeps `*` but cannot close the span: its backticks are look-alikes.
    expect(views.find((v) => v.key === 'summary')?.text).toContain('`&lt;!channel&gt; ˋ*rm -rf*ˋ &amp; co`');
    expect(views.find((v) => v.key === `approval:${APR}`)?.text).toContain('`&lt;!channel&gt; ˋ*rm -rf*ˋ &amp; co`');
    for (const v of views) {
      expect(v.text).not.toContain('<!channel>');
      // Slack parses mrkdwn and plain_text; a rich_text text element it shows as it is (the card's data).
      expect(parsedTexts(v.blocks).join('\n')).not.toContain('<!channel>');
      expect(v.text).not.toContain('`*rm');
    }
  });
});
