/**
 * The post-mortem Markdown export, fed machine and user text made of what breaks Markdown (pipes,
 * backticks and fences, newlines, HTML, links, autolinks, headings, emphasis, backslashes). Checked
 * with a reader of the document's structure as CommonMark + GitHub tables split it: fences, table
 * rows and their cells, headings, and what is live outside code.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import type { Verdict } from '../../src/gpu/verdict.ts';
import type { Step } from '../../src/plan/unstick-plan.ts';
import { renderIncidentMarkdown } from '../../src/render/incident-markdown.ts';
import { mdCellCode, mdCode, mdFence, mdText } from '../../src/render/markdown-escape.ts';

const AT = '2026-11-30T03:12:45.123Z';
const LATER = '2026-11-30T03:13:20.456Z';
const ALICE = 'U0ALICE001';
const BOB = 'U0BOB00001';

type NoId<T> = T extends unknown ? Omit<T, 'id'> : never;
const logged = (list: Array<NoId<AnyLoggedEvent>>): AnyLoggedEvent[] =>
  list.map((e, i) => ({ ...e, id: `1764472365123-${i}` }) as AnyLoggedEvent);

interface Hostile {
  name: string;
  cmdline: string;
  reason: string;
  detail: string;
  command: string;
}

function snapshot(machineId: string, view: 'host' | 'container', h: Hostile, used: number): MachineSnapshot {
  return {
    machineId,
    view,
    takenAt: AT,
    gpus: [
      {
        index: 0,
        name: h.name,
        busId: null,
        uuid: `GPU-${h.name}`,
        memoryUsedMiB: used,
        memoryTotalMiB: 81_559,
        utilizationPct: 0,
      },
    ],
    processes: used > 0 ? [{ gpuIndex: 0, gpuUuid: null, pid: 4242, type: 'C', name: h.cmdline, usedMiB: used }] : [],
    holders: [{ device: '/dev/nvidia0', pid: 42, user: h.name, access: 'F...m', command: h.cmdline }],
    kernelMounts: [],
    ram: { totalBytes: 449 * 2 ** 30, usedBytes: 440 * 2 ** 30, availableBytes: null },
    gpuError: null,
  };
}

function hostStep(): Step {
  return {
    id: 's2',
    tier: 2,
    kind: 'host_kill',
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

function verdict(h: Hostile): Verdict {
  return {
    kind: 'recovered',
    title: 'Recovered',
    gpus: [
      {
        index: 0,
        uuid: 'GPU-0',
        beforeMiB: 40_000,
        afterMiB: 0,
        heldMiB: 40_000,
        leftMiB: 0,
        freedMiB: 40_000,
        othersFreedMiB: 0,
        before: 'held_host_only',
        after: 'idle',
        afterState: 'read',
        recovered: true,
      },
    ],
    totalFreedMiB: 40_000,
    outside: [`GPU 1: ${h.detail}`],
    nextStep: `check ${h.detail}`,
    advice: ['check ', { code: h.cmdline }, ' with ', { user: BOB }, ` (${h.detail})`],
  };
}

/** The Slack user names the payloads carried (people, not ids): absent in logs from before they were recorded. */
interface Names {
  requester?: string;
  approver?: string;
}

function unstick(h: Hostile, names: Names = {}): { meta: IncidentMeta; events: AnyLoggedEvent[] } {
  const meta: IncidentMeta = {
    id: 'inc_20261130_031245_k3x9q2',
    kind: 'unstick',
    requester: ALICE,
    channel: 'C0ONCALL01',
    targets: ['ct129'],
    text: `unstick ct129 ${h.reason}`,
    reason: h.reason,
    createdAt: AT,
  };
  const rec = (command: string) => ({
    machineId: 'kpro5',
    command,
    code: 0,
    signal: null,
    durationMs: 120,
    timedOut: false,
  });
  const events = logged([
    { type: 'requested', at: AT, ...(names.requester !== undefined ? { name: names.requester } : {}) },
    { type: 'started', at: AT, worker: 'w1' },
    {
      type: 'snapshot',
      at: AT,
      label: 'before',
      snapshot: snapshot('ct129', 'container', h, 40_000),
      commands: [rec(`nvidia-smi -q -x # ${h.command}`)],
    },
    {
      type: 'approval_requested',
      at: AT,
      approvalId: 'apr_1',
      stepId: 's2',
      expiresAt: LATER,
      planHash: 'h',
      step: hostStep(),
      host: 'kpro5',
      vmid: 129,
    },
    {
      type: 'approval_decided',
      at: AT,
      approvalId: 'apr_1',
      stepId: 's2',
      decision: 'approved',
      by: BOB,
      ...(names.approver !== undefined ? { name: names.approver } : {}),
    },
    {
      type: 'step_started',
      at: AT,
      stepId: 's2',
      kind: 'host_kill',
      tier: 2,
      machineId: 'kpro5',
      explanation: h.detail,
    },
    { type: 'command', at: AT, stepId: 's2', role: 'kill', on: 'host', record: rec(h.command) },
    {
      type: 'signalled',
      at: AT,
      stepId: 's2',
      hostPid: 4242,
      containerPid: 42,
      signal: 'KILL',
      cmdline: h.cmdline,
      result: 'sent',
      reason: null,
    },
    { type: 'step_finished', at: AT, stepId: 's2', outcome: 'done', durationMs: 500, message: h.detail },
    { type: 'snapshot', at: LATER, label: 'after', snapshot: snapshot('kpro5', 'host', h, 0), commands: [] },
    { type: 'machine_error', at: LATER, machineId: 'ct129', code: 'connect_failed', message: h.detail, commands: [] },
    { type: 'verdict', at: LATER, verdict: verdict(h) },
    { type: 'finished', at: LATER, outcome: 'ok', durationMs: 35_333 },
  ]);
  return { meta, events };
}

/** The document as CommonMark + GitHub tables read it: fences with their bodies, and the lines outside them. */
function structure(md: string): { fences: string[]; outside: string[]; unclosed: boolean } {
  const fences: string[] = [];
  const outside: string[] = [];
  let open: { ticks: number; body: string[] } | null = null;
  for (const line of md.split('\n')) {
    const f = /^(`{3,})(.*)$/.exec(line);
    if (open) {
      if (f && (f[1]?.length ?? 0) >= open.ticks && (f[2] ?? '').trim() === '') {
        fences.push(open.body.join('\n'));
        open = null;
      } else open.body.push(line);
    } else if (f && !(f[2] ?? '').includes('`')) open = { ticks: f[1]?.length ?? 3, body: [] };
    else outside.push(line);
  }
  return { fences, outside, unclosed: open !== null };
}

/** Cells of a table row as cmark-gfm splits them: a backslash escapes the next character, an unescaped `|` splits. */
function cells(row: string): number {
  let n = 0;
  for (let i = 0; i < row.length; i++) {
    if (row[i] === '\\') i++;
    else if (row[i] === '|') n++;
  }
  return n - 1;
}

/** Removes code spans as CommonMark pairs them (a run of N backticks closes only with a run of N). */
function outsideSpans(line: string): string {
  let out = '';
  let i = 0;
  while (i < line.length) {
    if (line[i] === '\\') {
      out += line.slice(i, i + 2);
      i += 2;
      continue;
    }
    if (line[i] === '`') {
      let j = i;
      while (line[j] === '`') j++;
      const run = line.slice(i, j);
      const close = new RegExp(`(?<!\`)${run}(?!\`)`, 'g');
      close.lastIndex = j;
      const m = close.exec(line);
      if (m) {
        out += ' ';
        i = m.index + run.length;
        continue;
      }
      out += run;
      i = j;
      continue;
    }
    out += line[i];
    i++;
  }
  return out;
}

/**
 * What would be live markup outside code: an unescaped special character. gpu-medic's own footnote
 * marks (`[^1]`, and `[^1]:` opening a footnote) are the one markup it writes with brackets.
 */
function liveMarkup(line: string): string[] {
  const rest = outsideSpans(line);
  const found: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const c = rest[i] ?? '';
    if (c === '\\') {
      i++;
      continue;
    }
    const footnote = /^\[\^\d+\]/.exec(rest.slice(i));
    if (footnote) {
      i += footnote[0].length - 1;
      continue;
    }
    if ('<>[]!&'.includes(c)) found.push(`${c} in ${JSON.stringify(line.slice(0, 120))}`);
  }
  if (/www\.|https?:/.test(rest.replace(/\\./g, ''))) found.push(`autolink in ${JSON.stringify(line.slice(0, 120))}`);
  return found;
}

/** A command as a fence shows it: newlines and tabs kept, other controls visible (a CR would end a line; bidi marks mislead). */
const shownInFence = (c: string): string =>
  c
    .replace(/\r/g, '␍')
    .replace(/[\u2028\u2029]/g, '␤')
    .replace(/\u0000/g, '␀')
    .replace(/\u202e/g, '\ufffd');

function problems(md: string, commands: readonly string[]): string[] {
  const found: string[] = [];
  const s = structure(md);
  if (s.unclosed) found.push('a fence is never closed');
  // The commands are the fence bodies, literally and in order.
  if (JSON.stringify(s.fences) !== JSON.stringify(commands.map(shownInFence)))
    found.push(`fence bodies changed: ${JSON.stringify(s.fences)}`);
  let tableCols: number | null = null;
  for (const line of s.outside) {
    if (line.startsWith('|')) {
      const n = cells(line);
      if (tableCols === null) tableCols = n;
      else if (n !== tableCols)
        found.push(`row with ${n} cells in a table of ${tableCols}: ${JSON.stringify(line.slice(0, 160))}`);
    } else tableCols = null;
    if (/^#/.test(line) && !/^(# Incident |## (Timeline|GPUs|Per GPU|Commands|What to follow up)|### `)/.test(line))
      found.push(`forged heading ${JSON.stringify(line)}`);
    if (/^\s*(FORGED|[-*+>] FORGED|\d+\. FORGED)/.test(line)) found.push(`forged line ${JSON.stringify(line)}`);
    if (
      !line.startsWith('|') &&
      line.trim() !== '' &&
      !/^(#|- |\d+\. |RAM:|No GPU|Each command|nvidia-smi reported|\[\^\d+\]: )/.test(line)
    )
      found.push(`stray line ${JSON.stringify(line)}`);
    found.push(...liveMarkup(line));
    for (const mark of ['*LIVE', '_LIVE', '~LIVE'])
      if (outsideSpans(line).replace(/\\./g, '').includes(mark)) found.push(`live ${mark}`);
  }
  return found;
}

const PIECES = [
  '|',
  '\\|',
  '\\',
  '`',
  '``',
  '```',
  '````',
  '~~~',
  '\n',
  '\r\n',
  '\n# FORGED',
  '\n| FORGED | row |',
  '\n- FORGED',
  '\n> FORGED',
  '\n1. FORGED',
  '<script>alert(1)</script>',
  '<b>',
  '[x](https://evil.example)',
  '![i](https://evil.example/i.png)',
  'www.evil.example',
  'https://evil.example',
  '*LIVE*',
  '_LIVE_',
  '~LIVE~',
  '&amp;',
  '&lt;',
  '\t',
  '\u0000',
  '\u202e',
  '\u2028',
  ' ',
  'a',
  'python3',
];
const hostile = fc.array(fc.constantFrom(...PIECES), { minLength: 1, maxLength: 7 }).map((p) => `x${p.join('')}`);
const hostiles: fc.Arbitrary<Hostile> = fc.record({
  name: hostile,
  cmdline: hostile,
  reason: hostile,
  detail: hostile,
  command: hostile,
});

describe('Markdown escapes', () => {
  it('mdText escapes what makes markup, keeps the rest readable, and keeps the text on one line', () => {
    expect(mdText('a|b*c_d<e>[f](g) &amp; `x` ~y~ !i\n# h')).toBe(
      'a\\|b\\*c\\_d\\<e\\>\\[f\\](g) \\&amp; \\`x\\` \\~y\\~ \\!i␤# h',
    );
    expect(mdText('see https://x.example and www.y.example, GPU 0: 1.5 MiB')).toBe(
      'see https\\://x.example and www\\.y.example, GPU 0: 1.5 MiB',
    );
    expect(['# h', '- l', '+ l', '> q', '= u', '12. n', '3) n'].map(mdText)).toEqual([
      '\\# h',
      '\\- l',
      '\\+ l',
      '\\> q',
      '\\= u',
      '12\\. n',
      '3\\) n',
    ]);
  });
  it('mdCode uses a backtick run longer than any in the data; mdCellCode shows text holding a pipe as escaped words', () => {
    expect(mdCode('a`b')).toBe('``a`b``');
    expect(mdCode('`x`')).toBe('`` `x` ``');
    expect(mdCode('')).toBe('`∅`');
    expect(mdCellCode('a\\|b')).toBe('a\\\\\\|b');
  });
  it('mdFence keeps the lines and opens with a fence longer than any backtick run inside', () => {
    expect(mdFence('echo ```\nls', 'sh')).toBe('````sh\necho ```\nls\n````');
    expect(mdFence('a\rb')).toBe('```\na␍b\n```');
  });
});

describe('renderIncidentMarkdown', () => {
  it('a recorded host-kill unstick: title, summary table, timeline, GPU tables, per GPU, commands, what to follow up', () => {
    const h: Hostile = {
      name: 'NVIDIA H200',
      cmdline: 'sglang::scheduler_TP0',
      reason: 'hung rank',
      detail: 'done',
      command: "kill -s KILL 4242 'a|b'",
    };
    const { meta, events } = unstick(h);
    const md = renderIncidentMarkdown(meta, events);
    const lines = md.split('\n');
    expect(lines[0]).toBe('# Incident inc\\_20261130\\_031245\\_k3x9q2: unstick of ct129, Recovered');
    for (const row of [
      '| Target | `ct129` |',
      `| Requester | \`${ALICE}\` |`,
      `| Approver | \`${BOB}\` |`,
      '| Reason | hung rank |',
      '| When | 2026-11-30 03:12:45 UTC to 2026-11-30 03:13:20 UTC |',
      '| Duration | 35.3 s |',
      '| Verdict | Recovered |',
      '| Memory freed | 40,000 MiB |',
      `| What ran | SIGKILL 1 (host, approved by \`${BOB}\`) |`,
    ])
      expect(lines).toContain(row);
    // One timeline row per event, in log order.
    const t = lines.indexOf('| Time (UTC) | What happened |');
    expect(lines.slice(t + 2, t + 2 + events.length).every((l) => /^\| \d\d:\d\d:\d\d\.\d{3} \| /.test(l))).toBe(true);
    expect(lines[t + 2 + events.length]).toBe('');
    expect(lines).toContain('| 03:12:45.123 | kill on host `kpro5`: exit 0, 120 ms (command 2 below) |');
    expect(md).toContain('## GPUs before\n\n### `ct129`, container view, read 2026-11-30 03:12:45 UTC');
    expect(md).toContain('| 0 | NVIDIA H200 | 40,000 | 81,559 | 0 % | `GPU-NVIDIA H200` |');
    expect(md).toContain('## Per GPU');
    expect(md).toContain('| 0 | held host only | idle | 40,000 | 0 | 40,000 |');
    expect(md).toContain(
      // The machine each command ran on, said once ("kill on host `kpro5`", not "on host on").
      "2. kill on host `kpro5` at 03:12:45.123 UTC: exit 0, 120 ms\n\n```sh\nkill -s KILL 4242 'a|b'\n```",
    );
    expect(md).toContain(
      // What was still open when it closed comes first (the follow-up is what a reader needs) (both machines
      // read the host's 98 % RAM).
      `## What to follow up\n\n- RAM pressure on \`ct129\`, \`kpro5\` was still open at the last reading (2026-11-30 03:12:45 UTC): 98 % used (440 of 449 GiB).\n- check \`sglang::scheduler_TP0\` with \`${BOB}\` (done)\n- GPU 1: done\n- \`ct129\` could not be read (\`connect_failed\`): done`,
    );
  });

  it('people are @name where the log recorded their Slack name, with their ids in footnotes; a log without names shows the ids', () => {
    const h: Hostile = {
      name: 'H200',
      cmdline: 'sglang::scheduler_TP0',
      reason: 'hung',
      detail: 'done',
      command: 'kill',
    };
    const { meta, events } = unstick(h, { requester: 'alice', approver: 'bob' });
    const md = renderIncidentMarkdown(meta, events);
    const lines = md.split('\n');
    expect(lines).toContain('| Requester | `@alice`[^1] |');
    expect(lines).toContain('| Approver | `@bob`[^2] |');
    expect(lines).toContain('| What ran | SIGKILL 1 (host, approved by `@bob`[^2]) |');
    expect(lines.some((l) => l.includes('requested by `@alice`[^1] in'))).toBe(true);
    expect(lines.some((l) => l.includes('approved by `@bob`[^2]'))).toBe(true);
    expect(md).toContain('- check `sglang::scheduler_TP0` with `@bob`[^2] (done)');
    expect(
      md.endsWith(`[^1]: \`@alice\` is Slack user \`${ALICE}\`.\n[^2]: \`@bob\` is Slack user \`${BOB}\`.\n`),
    ).toBe(true);
    // The ids are said once each, in the footnotes.
    expect(lines.filter((l) => l.includes(ALICE))).toEqual([`[^1]: \`@alice\` is Slack user \`${ALICE}\`.`]);
    expect(lines.filter((l) => l.includes(BOB))).toEqual([`[^2]: \`@bob\` is Slack user \`${BOB}\`.`]);
    // An old log (no names): the ids, and no footnotes.
    const old = renderIncidentMarkdown(unstick(h).meta, unstick(h).events);
    expect(old).toContain(`| Requester | \`${ALICE}\` |`);
    expect(old).not.toContain('[^1]');
  });

  it('nothing left to do is said as such; an incident that has not ended says so', () => {
    const meta: IncidentMeta = {
      id: 'inc_20261130_031245_aaaaaaaa',
      kind: 'status',
      requester: ALICE,
      channel: 'C0ONCALL01',
      targets: ['kpro5'],
      text: 'status kpro5',
      reason: null,
      createdAt: AT,
    };
    const h: Hostile = { name: 'H200', cmdline: 'python3', reason: '', detail: '', command: 'nvidia-smi' };
    const done = renderIncidentMarkdown(
      meta,
      logged([
        { type: 'requested', at: AT },
        {
          type: 'snapshot',
          at: AT,
          label: 'status',
          // RAM well under pressure: nothing is left open (RAM pressure at close is said apart).
          snapshot: {
            ...snapshot('kpro5', 'host', h, 0),
            ram: { totalBytes: 449 * 2 ** 30, usedBytes: 40 * 2 ** 30, availableBytes: null },
          },
          commands: [],
        },
        { type: 'finished', at: LATER, outcome: 'ok', durationMs: 900 },
      ]),
    );
    expect(done).toContain('## GPUs read');
    expect(done).toContain('| Memory freed | none (read only) |');
    expect(done).toContain('- Nothing was left open.');
    expect(renderIncidentMarkdown(meta, logged([{ type: 'requested', at: AT }]))).toContain(
      '- The incident has not ended: look again when it has.',
    );
  });

  it('machine and user text never breaks the document: fences close, rows keep their cells, no forged heading, list, link, HTML or emphasis', () => {
    fc.assert(
      fc.property(hostiles, (h) => {
        // Hostile Slack names too: they are data like the rest.
        const { meta, events } = unstick(h, { requester: h.name, approver: h.reason });
        // And an alert still open on its target, its sentence and kind hostile too.
        const openAlerts = [
          { incidentId: 'inc_alert_1', kind: h.name, machineId: 'ct129', gpu: 0, sentence: h.detail, raisedAt: AT },
        ];
        const md = renderIncidentMarkdown(meta, events, { openAlerts });
        expect(md).toContain('is still open (raised 2026-11-30 03:12:45 UTC, alert `inc_alert_1`)');
        expect(problems(md, [`nvidia-smi -q -x # ${h.command}`, h.command])).toEqual([]);
      }),
      { numRuns: 200, seed: 20261201 },
    );
  });

  it('a watchdog alert incident with hostile text (its sentence, key, snoozer, clicks) keeps the document whole too', () => {
    fc.assert(
      fc.property(hostiles, (h) => {
        const alert = {
          key: h.name,
          kind: 'xid' as const,
          machineId: 'kpro5',
          gpu: 0,
          since: 0,
          raisedAt: 0,
          sentence: h.detail,
          lastSeenAt: 0,
        };
        const meta: IncidentMeta = {
          id: 'inc_alert_0123456789abcdef0123',
          kind: 'alert',
          requester: 'watchdog',
          channel: 'C0ALERTS01',
          targets: ['kpro5'],
          text: h.name,
          reason: null,
          createdAt: AT,
        };
        const events = logged([
          { type: 'alert_raised', at: AT, alert },
          { type: 'alert_updated', at: AT, alert: { ...alert, sentence: h.cmdline } },
          { type: 'alert_snoozed', at: AT, by: h.reason, scope: h.name, until: h.detail },
          {
            type: 'alert_action',
            at: AT,
            by: ALICE,
            action: 'unstick',
            incidentId: null,
            refused: h.reason,
            target: h.cmdline,
          },
        ]);
        const md = renderIncidentMarkdown(meta, events);
        expect(problems(md, [])).toEqual([]);
        expect(md).toContain('- The alert is still open: ');
      }),
      { numRuns: 200, seed: 20261201 },
    );
  });
});
