/**
 * One incident as a post-mortem-ready Markdown document (`gpu-medic incident <id> --markdown`): a
 * title, a summary table (target, requester, approver, when, duration, verdict, memory freed, what
 * ran), the timeline with UTC times, the GPU tables before and after (and per GPU what changed),
 * the literal commands in code blocks, and what to follow up from the verdict's next step. Pure.
 * Every piece of machine or user text goes through src/render/markdown-escape.ts once.
 */
import { flagsOf, type MachineSnapshot } from '../gpu/snapshot.ts';
import { holderItems, PROCESSES_HEADER } from './status-flags.ts';
import type { AnyLoggedEvent } from '../incident/all-events.ts';
import type { CommandRecord, IncidentMeta } from '../incident/events.ts';
import { endOf, summarizeIncident, type IncidentSummary } from '../incident/incident-summary.ts';
import { describeEvent } from '../incident/timeline.ts';
import { stepsWords } from './history.ts';
import { mdCellCode, mdCode, mdFence, mdRich, mdText } from './markdown-escape.ts';
import { count, duration } from '../text/units.ts';
import { sentenceParts } from './rich-text.ts';
import { ALERT_TITLES } from './alert.ts';
import type { AlertKind } from '../watchdog/judge.ts';

/** `2026-11-30T03:12:45.123Z` → `2026-11-30 03:12:45 UTC`. */
const utc = (iso: string): string =>
  /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/.test(iso) ? `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC` : mdText(iso);
/** `03:12:45.123` (the summary carries the date). */
const clock = (iso: string): string => /T(\d\d:\d\d:\d\d(?:\.\d+)?)/.exec(iso)?.[1] ?? mdText(iso);

function table(head: string[], rows: string[][]): string[] {
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ];
}

/**
 * The people of an incident as the post-mortem names them, so a reader sees who rather than ids: `@name`
 * where the log recorded the Slack user name the payload carried (the request, a decision, a refused click),
 * each with a footnote giving the Slack user id; a person whose name was never recorded (older logs) is shown
 * by the id. Footnotes are numbered in the order people first appear.
 */
class People {
  private readonly names = new Map<string, string>();
  private readonly order: string[] = [];

  constructor(meta: IncidentMeta, events: readonly AnyLoggedEvent[]) {
    for (const e of events) {
      if (e.type === 'requested' && e.name) this.names.set(meta.requester, e.name);
      if ((e.type === 'approval_decided' || e.type === 'approval_refused') && e.name) this.names.set(e.by, e.name);
    }
  }

  /** A person as Markdown (safe in a table cell): `@name`[^n], or the id as code. */
  md = (id: string): string => {
    const name = this.names.get(id);
    if (name === undefined) return mdCellCode(id);
    if (!this.order.includes(id)) this.order.push(id);
    return `${mdCellCode(`@${name}`)}[^${this.order.indexOf(id) + 1}]`;
  };

  /** The footnotes of the people shown so far: which Slack user each `@name` is. */
  footnotes(): string[] {
    return this.order.map(
      (id, i) => `[^${i + 1}]: ${mdCode(`@${this.names.get(id) ?? ''}`)} is Slack user ${mdCode(id)}.`,
    );
  }
}

function title(s: IncidentSummary): string {
  const m = s.meta;
  const what =
    m.kind === 'status_all'
      ? `status of all ${m.targets.length} machines`
      : `${m.kind} of ${m.targets.map(mdText).join(', ') || 'no machine'}`;
  const end = s.verdict ? s.verdict.title : s.alert ? (s.alert.clearedAt ? 'cleared' : 'open') : s.state;
  return `# Incident ${mdText(m.id)}: ${what}, ${mdText(end)}`;
}

function summaryTable(s: IncidentSummary, people: People): string[] {
  const m = s.meta;
  const end = endOf(s);
  const rows: string[][] = [
    ['Incident', mdCellCode(m.id)],
    ['Kind', mdText(m.kind)],
    ['Target', m.targets.map(mdCellCode).join(', ') || 'none'],
    ['Requester', m.requester === 'watchdog' ? 'the watchdog' : people.md(m.requester)],
    [
      'Approver',
      s.approvers.length > 0
        ? s.approvers.map(people.md).join(', ')
        : s.steps.some((x) => x.tier === 2)
          ? 'nobody approved a host-level step'
          : 'none needed (no host-level step)',
    ],
    ['Channel', mdCellCode(m.channel)],
    ['When', `${utc(m.createdAt)}${end ? ` to ${utc(end)}` : ' (not ended)'}`],
    [
      'Duration',
      s.durationMs !== null
        ? duration(s.durationMs)
        : end
          ? duration(Date.parse(end) - Date.parse(m.createdAt))
          : 'not ended',
    ],
    ['Verdict', s.verdict ? mdText(s.verdict.title) : mdText(s.state)],
    [
      'Memory freed',
      s.verdict
        ? `${count(s.verdict.totalFreedMiB)} MiB`
        : m.kind === 'unstick'
          ? 'unknown (no verdict)'
          : 'none (read only)',
    ],
  ];
  if (m.reason) rows.splice(4, 0, ['Reason', mdText(m.reason)]);
  if (m.kind === 'unstick') rows.push(['What ran', mdRich(stepsWords(s.steps), { cell: true, user: people.md })]);
  if (s.alert)
    rows.push([
      'Alert',
      `${mdText(s.alert.kind)} on ${mdCellCode(s.alert.machineId)}${s.alert.gpu === null ? '' : ` GPU ${s.alert.gpu}`}: ${mdText(s.alert.sentence)}`,
    ]);
  return table(['', ''], rows);
}

/**
 * Where a step's command ran, in words (plain, escaped by the caller): on the host, in the
 * container by its own login, or in the container through `pct exec` on its host (the command's
 * SSH machine is then the host, though it runs inside the container).
 */
function whereRan(
  on: 'container' | 'host',
  sshMachine: string,
  target: string | null,
  m: (id: string) => string,
): string {
  if (on === 'host') return `on host ${m(sshMachine)}`;
  if (target === null || target === sshMachine) return `in container ${m(sshMachine)}`;
  return `in container ${m(target)} (through \`pct exec\` on ${m(sshMachine)})`;
}

interface NumberedCommand {
  n: number;
  at: string;
  /** What and where, already Markdown. */
  what: string;
  record: CommandRecord;
}

/** Every command the incident ran, in log order, numbered: those of steps and those of reads. */
function commandsOf(
  events: readonly AnyLoggedEvent[],
  target: string | null,
): { list: NumberedCommand[]; byEvent: Map<string, number[]> } {
  const list: NumberedCommand[] = [];
  const byEvent = new Map<string, number[]>();
  const add = (e: AnyLoggedEvent, what: string, record: CommandRecord) => {
    const n = list.length + 1;
    list.push({ n, at: e.at, what, record });
    byEvent.set(e.id, [...(byEvent.get(e.id) ?? []), n]);
  };
  for (const e of events) {
    if (e.type === 'command')
      add(e, `${mdText(e.role)} ${whereRan(e.on, e.record.machineId, target, mdCode)}`, e.record);
    else if (e.type === 'snapshot')
      for (const c of e.commands) add(e, `read (${e.label}) on ${mdCode(c.machineId)}`, c);
    else if (e.type === 'machine_error')
      for (const c of e.commands) add(e, `read (failed) on ${mdCode(c.machineId)}`, c);
  }
  return { list, byEvent };
}

function ended(r: CommandRecord): string {
  return r.timedOut ? 'timed out' : r.code !== null ? `exit ${r.code}` : `signal ${r.signal ?? '?'}`;
}

/** The timeline's words for an event a person did, naming them as `people` does; null for the rest. */
function personWords(meta: IncidentMeta, e: AnyLoggedEvent, people: People): string | null {
  switch (e.type) {
    case 'requested':
      return `requested by ${people.md(meta.requester)} in ${mdText(`${meta.channel}: "${meta.text}"${meta.reason ? ` (reason: ${meta.reason})` : ''}`)}`;
    case 'approval_decided':
      return `${mdText(`approval ${e.approvalId} ${e.decision} by `)}${people.md(e.by)}`;
    case 'approval_refused':
      return `${mdText(`a click on approval ${e.approvalId} by `)}${people.md(e.by)}${mdText(` was refused: ${e.reason}`)}`;
    default:
      return null;
  }
}

function timeline(
  meta: IncidentMeta,
  events: readonly AnyLoggedEvent[],
  byEvent: Map<string, number[]>,
  people: People,
): string[] {
  const rows = events.map((e) => {
    const refs = byEvent.get(e.id);
    const person = personWords(meta, e, people);
    const words =
      person !== null
        ? person
        : e.type === 'command'
          ? `${mdText(e.role)} ${whereRan(e.on, e.record.machineId, meta.kind === 'unstick' ? (meta.targets[0] ?? null) : null, mdCellCode)}: ${mdText(ended(e.record))}, ${e.record.durationMs} ms (command ${refs?.[0] ?? '?'} below)`
          : `${mdText(describeEvent(meta, e))}${refs && refs.length > 0 ? ` (command${refs.length === 1 ? '' : 's'} ${refs.join(', ')} below)` : ''}`;
    return [clock(e.at), words];
  });
  return table(['Time (UTC)', 'What happened'], rows);
}

function gpuTables(label: string, snaps: ReadonlyArray<{ at: string; snapshot: MachineSnapshot }>): string[] {
  if (snaps.length === 0) return [];
  const out: string[] = [`## GPUs ${label}`, ''];
  for (const { snapshot: s } of snaps) {
    out.push(`### ${mdCode(s.machineId)}, ${s.view} view, read ${utc(s.takenAt)}`, '');
    if (s.gpuError)
      out.push(`nvidia-smi reported an error: ${mdCode(s.gpuError.kind)}: ${mdText(s.gpuError.message)}`, '');
    if (s.gpus.length > 0) {
      out.push(
        ...table(
          ['GPU', 'Name', 'Memory used (MiB)', 'Memory total (MiB)', 'Util', 'UUID', PROCESSES_HEADER],
          s.gpus.map((g) => {
            // The thread's Processes column (status-flags.ts), in the same words.
            const holders = holderItems(s, g);
            return [
              g.index === null ? '?' : String(g.index),
              g.name ? mdText(g.name) : '?',
              count(g.memoryUsedMiB),
              count(g.memoryTotalMiB),
              g.utilizationPct === null ? '?' : `${g.utilizationPct} %`,
              g.uuid ? mdCellCode(g.uuid) : '?',
              holders.length > 0 ? mdText(holders.join(', ')) : '-',
            ];
          }),
        ),
        '',
      );
    } else if (!s.gpuError) out.push('No GPU was listed.', '');
    if (s.processes.length > 0) {
      out.push(
        ...table(
          ['PID', 'GPU', 'Process', 'MiB'],
          s.processes.map((p) => [
            String(p.pid),
            p.gpuIndex === null ? (p.gpuUuid ? mdCellCode(p.gpuUuid) : '?') : String(p.gpuIndex),
            p.name ? mdCellCode(p.name) : '?',
            count(p.usedMiB),
          ]),
        ),
        '',
      );
    }
    if (s.holders.length > 0) {
      out.push(
        ...table(
          ['PID (in its namespace)', 'User', 'Command', 'Device'],
          s.holders.map((h) => [
            String(h.pid),
            h.user ? mdCellCode(h.user) : '?',
            h.command ? mdCellCode(h.command) : '?',
            mdCellCode(h.device),
          ]),
        ),
        '',
      );
    }
    if (s.ram)
      out.push(
        `RAM: ${count(Math.round(s.ram.usedBytes / 2 ** 30))} of ${count(Math.round(s.ram.totalBytes / 2 ** 30))} GiB used.`,
        '',
      );
  }
  return out;
}

function perGpu(s: IncidentSummary): string[] {
  const v = s.verdict;
  if (!v || v.gpus.length === 0) return [];
  return [
    '## Per GPU',
    '',
    ...table(
      ['GPU', 'Before', 'After', 'In use before (MiB)', 'In use after (MiB)', 'Freed by this incident (MiB)'],
      v.gpus.map((g) => [
        g.index === null ? '?' : String(g.index),
        mdText(g.before.replace(/_/g, ' ')),
        g.after === null ? mdText(g.afterState) : mdText(g.after.replace(/_/g, ' ')),
        count(g.beforeMiB),
        count(g.afterMiB),
        count(g.freedMiB),
      ]),
    ),
    '',
  ];
}

function commandBlocks(list: readonly NumberedCommand[]): string[] {
  if (list.length === 0) return [];
  const out = ['## Commands', '', 'Each command exactly as it was sent over SSH, in the order it ran.', ''];
  for (const c of list) {
    out.push(
      `${c.n}. ${c.what} at ${clock(c.at)} UTC: ${mdText(ended(c.record))}, ${c.record.durationMs} ms`,
      '',
      mdFence(c.record.command, 'sh'),
      '',
    );
  }
  return out;
}

/** The root causes the thread said (status reads' Why lines, the unstick's diagnoses), each once. */
function rootCauseLines(events: readonly AnyLoggedEvent[]): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const e of events) {
    const causes =
      e.type === 'snapshot' ? (e.snapshot.rootCauses ?? []) : e.type === 'diagnosis' ? (e.diagnosis.causes ?? []) : [];
    for (const c of causes) {
      if (seen.has(c.sentence)) continue;
      seen.add(c.sentence);
      out.push(`- ${mdRich(c.parts)}`);
    }
  }
  return out.length > 0 ? ['## Root causes', '', ...out, ''] : [];
}

/** What the last reading of each machine still showed when the incident ended: RAM pressure. */
function openAtClose(events: readonly AnyLoggedEvent[]): string[] {
  const last = new Map<string, MachineSnapshot>();
  for (const e of events) if (e.type === 'snapshot') last.set(e.snapshot.machineId, e.snapshot);
  // A container reads its host's RAM: the same figures on both are said once, naming both.
  const byFigures = new Map<string, { machines: string[]; at: string }>();
  for (const snap of last.values())
    for (const f of flagsOf(snap))
      if (f.kind === 'ram_pressure') {
        const k = `${f.usedPct} % used (${count(f.usedGiB)} of ${count(f.totalGiB)} GiB)`;
        const have = byFigures.get(k) ?? { machines: [], at: snap.takenAt };
        have.machines.push(snap.machineId);
        if (snap.takenAt > have.at) have.at = snap.takenAt;
        byFigures.set(k, have);
      }
  return [...byFigures].map(
    ([k, v]) =>
      `RAM pressure on ${v.machines.map(mdCode).join(', ')} was still open at the last reading (${utc(v.at)}): ${k}.`,
  );
}

/**
 * A watchdog (or Alertmanager) alert still open when the post-mortem is written, as the watch
 * store keeps it (src/watch-store/open-alerts.ts reads it; the CLI passes it in).
 */
export interface OpenAlertNote {
  incidentId: string;
  kind: string;
  machineId: string;
  gpu: number | null;
  sentence: string;
  /** When it was raised (ISO). */
  raisedAt: string;
}

/** Every machine the incident is about or read: its targets, and the machine of each reading and command (a container's host). */
function machinesOf(meta: IncidentMeta, events: readonly AnyLoggedEvent[]): Set<string> {
  const out = new Set(meta.targets);
  for (const e of events) {
    if (e.type === 'snapshot') {
      out.add(e.snapshot.machineId);
      for (const c of e.commands) out.add(c.machineId);
    } else if (e.type === 'machine_error') {
      out.add(e.machineId);
      for (const c of e.commands) out.add(c.machineId);
    } else if (e.type === 'command') out.add(e.record.machineId);
  }
  return out;
}

/**
 * The alerts on the incident's machines that were raised before it ended (or while it runs) and
 * are still open: they were open when it closed, whatever its verdict says about its own target.
 */
function openAlertLines(
  meta: IncidentMeta,
  events: readonly AnyLoggedEvent[],
  s: IncidentSummary,
  alerts: readonly OpenAlertNote[],
): string[] {
  const machines = machinesOf(meta, events);
  const end = endOf(s);
  return alerts
    .filter((a) => machines.has(a.machineId) && a.incidentId !== meta.id && (end === null || a.raisedAt <= end))
    .map(
      (a) =>
        `${mdText(ALERT_TITLES[a.kind as AlertKind] ?? a.kind)} on ${mdCode(a.machineId)}${a.gpu === null ? '' : ` (GPU ${a.gpu})`} is still open (raised ${utc(a.raisedAt)}, alert ${mdCode(a.incidentId)}): ${mdRich(sentenceParts(a.sentence))}`,
    );
}

function followUp(
  s: IncidentSummary,
  events: readonly AnyLoggedEvent[],
  people: People,
  alerts: readonly OpenAlertNote[],
): string[] {
  const items: string[] = [...openAlertLines(s.meta, events, s, alerts), ...openAtClose(events)];
  const v = s.verdict;
  if (v?.advice) items.push(mdRich(v.advice, { user: people.md }));
  else if (v?.nextStep) items.push(mdText(v.nextStep));
  for (const o of v?.outside ?? []) items.push(mdText(o));
  for (const e of s.machineErrors)
    items.push(`${mdCode(e.machineId)} could not be read (${mdCode(e.code)}): ${mdText(e.message)}`);
  if (s.error) items.push(`The run stopped on an error (${mdCode(s.error.code)}): ${mdText(s.error.message)}`);
  for (const st of s.steps)
    if (st.approval?.state === 'pending')
      items.push(
        `A host-level step (${mdText(st.kind.replace(/_/g, ' '))} on ${mdCode(st.machineId)}) is still waiting for an approval.`,
      );
  if (s.alert && !s.alert.clearedAt) items.push(`The alert is still open: ${mdText(s.alert.sentence)}`);
  if (s.doctor && s.doctor.failed > 0)
    items.push(
      `${s.doctor.failed} doctor check${s.doctor.failed === 1 ? '' : 's'} failed: fix them before relying on unstick there (the timeline has each).`,
    );
  if (items.length === 0)
    items.push(
      v
        ? `Nothing left to do: the verdict is ${mdText(v.title)}.`
        : endOf(s)
          ? 'Nothing was left open.'
          : 'The incident has not ended: look again when it has.',
    );
  return ['## What to follow up', '', ...items.map((i) => `- ${i}`), ''];
}

/** `openAlerts`: the alerts open now (the watch store's); those on this incident's machines are what it left open. */
export function renderIncidentMarkdown(
  meta: IncidentMeta,
  events: readonly AnyLoggedEvent[],
  opts: { openAlerts?: readonly OpenAlertNote[] } = {},
): string {
  const s = summarizeIncident(meta, events);
  const people = new People(meta, events);
  const { list, byEvent } = commandsOf(events, meta.kind === 'unstick' ? (meta.targets[0] ?? null) : null);
  const snaps = (label: 'status' | 'before' | 'after') =>
    events.flatMap((e) => (e.type === 'snapshot' && e.label === label ? [{ at: e.at, snapshot: e.snapshot }] : []));
  // An unstick reads "after" once per step: the tables show each machine's first reading before and
  // its last after (the final state); the timeline lists every reading.
  const onePerMachine = (list: ReturnType<typeof snaps>, which: 'first' | 'last') => {
    const by = new Map<string, (typeof list)[number]>();
    for (const x of list) if (which === 'last' || !by.has(x.snapshot.machineId)) by.set(x.snapshot.machineId, x);
    return [...by.values()];
  };
  return [
    title(s),
    '',
    ...summaryTable(s, people),
    '',
    `## Timeline (UTC, ${/^\d{4}-\d\d-\d\d/.test(meta.createdAt) ? meta.createdAt.slice(0, 10) : mdText(meta.createdAt)})`,
    '',
    ...timeline(meta, events, byEvent, people),
    '',
    ...rootCauseLines(events),
    ...gpuTables('read', snaps('status')),
    ...gpuTables('before', onePerMachine(snaps('before'), 'first')),
    ...gpuTables('after', onePerMachine(snaps('after'), 'last')),
    ...perGpu(s),
    ...commandBlocks(list),
    ...followUp(s, events, people, opts.openAlerts ?? []),
    ...footnotes(people),
  ].join('\n');
}

function footnotes(people: People): string[] {
  const notes = people.footnotes();
  return notes.length > 0 ? [...notes, ''] : [];
}
