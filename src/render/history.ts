/**
 * `/gpu history <machine> [N]`'s answer (ephemeral mrkdwn text): one line per incident that
 * touched the machine, newest first: when (UTC), who, what kind, what ran (steps and signals in
 * short), how it ended (verdict, MiB freed) and the incident id. Pure. Every piece of machine or
 * user text goes through src/render/escape.ts once; nothing is dropped: what does not fit is
 * counted ("+N more") with the command that lists it whole.
 */
import type { IncidentSummary, StepSummary } from '../incident/incident-summary.ts';
import { OUTCOME_WORDS } from '../incident/signal-outcome.ts';
import { clipChars, code, codeLine, mention, rich, text } from './escape.ts';
import { joinRich, user, type Part, type Rich } from '../text/rich.ts';
import { count, plural } from '../text/units.ts';

/** How far the scan of incidents from before the per-machine index went (src/incident/history.ts). */
export interface HistoryScan {
  scanned: number;
  bound: number;
  complete: boolean;
  before: string | null;
}

export interface HistoryEntry {
  id: string;
  at: string;
  /** For a host: the container it was about; null: the machine itself. */
  via: string | null;
  /** Null when its record is gone from the log. */
  summary: IncidentSummary | null;
}

export interface HistoryView {
  target: { id: string; kind: 'host' | 'container' };
  /** The host's containers (for the header's "its containers'" note). */
  containers: readonly string[];
  limit: number;
  /** The count asked for, when it was over the most history shows. */
  cappedFrom: number | null;
  max: number;
  entries: readonly HistoryEntry[];
  /** More incidents touched it than `limit`. */
  more: boolean;
  scan: HistoryScan | null;
}

const HISTORY_TEXT_MAX = 3_000;

/** `2026-11-30T03:12:45.123Z` → `2026-11-30 03:12 UTC`. */
const when = (iso: string): string =>
  /^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(iso) ? `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC` : text(clipChars(iso, 30));

/** The CLI that lists a machine's whole history (the escape hatch for what does not fit). */
function historyCliCommand(target: string, limit: number): string {
  return `gpu-medic history ${codeLine(target)} --limit ${limit}`;
}

function who(requester: string): string {
  return requester === 'watchdog' ? 'the watchdog' : mention(requester);
}

const STEP_NAME: Record<StepSummary['kind'], string> = {
  container_signal: 'container signals',
  host_kill: 'host kill',
  host_reset: 'GPU reset',
};

/**
 * One step in short, as words (Rich: the approver is a mention part), for the history answer and the
 * Markdown post-mortem alike: "SIGTERM 2, SIGKILL 1 (container)", "SIGKILL 1 (host, approved by @bob)",
 * "host kill denied by @bob".
 */
function stepWords(s: StepSummary): Rich {
  const a = s.approval;
  const by = (id: string | null): Part[] => (id ? [user(id)] : ['an approver']);
  if (a && a.state === 'denied') return [`${STEP_NAME[s.kind]} denied by `, ...by(a.by)];
  if (a && a.state === 'expired') return [`${STEP_NAME[s.kind]}: approval expired, not run`];
  if (a && a.state === 'pending') return [`${STEP_NAME[s.kind]} waiting for approval`];
  const where: Part[] = [
    s.kind === 'container_signal' ? 'container' : 'host',
    ...(a?.by ? [', approved by ', user(a.by)] : []),
  ];
  const extra = [
    ...(s.gone > 0 ? [`${count(s.gone)} ${OUTCOME_WORDS.gone}`] : []),
    ...(s.notPermitted > 0 ? [`${count(s.notPermitted)} ${OUTCOME_WORDS.not_permitted}`] : []),
    ...(s.failed > 0 ? [`${count(s.failed)} ${OUTCOME_WORDS.failed}`] : []),
    ...(s.skipped > 0 ? [`${count(s.skipped)} ${OUTCOME_WORDS.refused}`] : []),
  ];
  const tail = extra.length > 0 ? `; ${extra.join(', ')}` : '';
  if (s.kind === 'host_reset') {
    const state = s.outcome === null ? ' running' : s.outcome === 'done' ? '' : ` ${s.outcome}`;
    return [`GPU reset${state} (`, ...where, ')'];
  }
  const sigs = [
    ...(s.sent.TERM > 0 ? [`SIGTERM ${count(s.sent.TERM)}`] : []),
    ...(s.sent.KILL > 0 ? [`SIGKILL ${count(s.sent.KILL)}`] : []),
  ];
  const running = s.outcome === null ? ', running' : s.outcome === 'interrupted' ? ', interrupted' : '';
  return [`${sigs.length > 0 ? sigs.join(', ') : 'no signal sent'} (`, ...where, `${running}${tail})`];
}

/** The steps of an unstick in short, joined ("nothing ran" when it planned none). */
export function stepsWords(steps: readonly StepSummary[]): Rich {
  return steps.length === 0 ? ['nothing ran'] : joinRich(steps.map(stepWords), '; ');
}

function kindOf(s: IncidentSummary, via: string | null, hostId: string): string {
  const m = s.meta;
  const on =
    via !== null
      ? `${code(via)} (a container on ${code(hostId)})`
      : m.targets.length === 1
        ? code(m.targets[0] ?? '')
        : null;
  switch (m.kind) {
    case 'status_all':
      return `status of all ${plural(m.targets.length, 'machine')}`;
    case 'alert':
      return `:rotating_light: alert${on && via !== null ? ` on ${on}` : ''}`;
    default:
      return `${m.kind}${on ? ` of ${on}` : ` of ${plural(m.targets.length, 'machine')}`}`;
  }
}

const ACTION_NAME = { status: 'Status', unstick: 'Unstick', snooze: 'Snooze' } as const;

function whatRan(s: IncidentSummary): string | null {
  if (s.meta.kind === 'unstick') return rich(stepsWords(s.steps));
  if (s.meta.kind === 'alert') {
    const a = s.alert;
    if (!a) return null;
    const acts = a.actions.map(
      (x) =>
        `${ACTION_NAME[x.action]}${x.target ? ` of ${code(x.target)}` : ''} by ${mention(x.by)}${x.incidentId ? ` → ${code(x.incidentId)}` : ''}${x.refused ? ` (refused: ${code(clipChars(x.refused, 80))})` : ''}`,
    );
    const snz = a.snoozes.map((x) => `snoozed ${code(x.scope)} by ${mention(x.by)} until ${when(x.until)}`);
    return [...acts, ...snz].join('; ') || null;
  }
  return 'read only';
}

function ending(s: IncidentSummary): string {
  if (s.meta.kind === 'alert') {
    const a = s.alert;
    if (!a) return 'no alert event logged';
    const gpu = a.gpu === null ? '' : ` GPU ${a.gpu}`;
    return `${text(a.kind.replace(/_/g, ' '))}${gpu}: ${text(clipChars(a.sentence, 160))} · ${a.clearedAt ? `cleared ${when(a.clearedAt)}` : 'still open'}`;
  }
  if (s.verdict) return `*${text(s.verdict.title)}*, ${count(s.verdict.totalFreedMiB)} MiB freed`;
  const errs = s.machineErrors.map((e) => `${code(e.machineId)} could not be read (${code(clipChars(e.code, 40))})`);
  const err = s.error ? [`error ${code(clipChars(s.error.code, 40))}: ${text(clipChars(s.error.message, 120))}`] : [];
  const doc = s.doctor ? [`${plural(s.doctor.failed, 'check')} failed, ${plural(s.doctor.warned, 'warning')}`] : [];
  const parts = [...doc, ...errs, ...err];
  if (parts.length > 0) return parts.join('; ');
  if (s.finishedOutcome !== null) return `finished (${s.finishedOutcome})`;
  if (s.steps.some((x) => x.approval?.state === 'pending')) return 'waiting for approval';
  return text(clipChars(s.state, 120));
}

/** One incident as one line. */
function historyLine(e: HistoryEntry, hostId: string): string {
  const s = e.summary;
  if (s === null)
    return `• ${when(e.at)} · ${code(e.id)}: its record is gone from the incident log (only its index entry is left)`;
  const ran = whatRan(s);
  return `• ${when(s.meta.createdAt)} · ${who(s.meta.requester)} · ${kindOf(s, e.via, hostId)}${ran ? ` · ${ran}` : ''} · ${ending(s)} · ${code(e.id)}`;
}

export function renderHistory(v: HistoryView, o: { maxChars?: number } = {}): string {
  const max = o.maxChars ?? HISTORY_TEXT_MAX;
  const t = code(v.target.id);
  const withContainers = v.target.kind === 'host' && v.containers.length > 0;
  const head: string[] = [];
  if (v.entries.length === 0) {
    head.push(
      `:scroll: No incident has touched ${t}${withContainers ? ' or its containers' : ''} in the incident log yet.`,
    );
  } else {
    head.push(
      `:scroll: *History of ${t}*: the last ${plural(v.entries.length, 'incident')} that touched it, newest first${withContainers ? `, with its containers' (they ran on it), each saying which` : ''}.`,
    );
  }
  if (v.cappedFrom !== null)
    head.push(`You asked for ${count(v.cappedFrom)}; history shows at most ${v.max} here (the CLI below lists more).`);
  const foot: string[] = [];
  if (v.scan) {
    const since = v.scan.before ? ` (it began ${when(v.scan.before)})` : '';
    foot.push(
      v.scan.complete
        ? `_Also searched the ${plural(v.scan.scanned, 'incident')} logged before the per-machine index${since}._`
        : `_Also searched the newest ${plural(v.scan.scanned, 'incident')} logged before the per-machine index${since}; older ones were not searched: \`gpu-medic incidents --limit 1000\` lists them._`,
    );
  }
  const lines = v.entries.map((e) => historyLine(e, v.target.id));
  const older = v.more
    ? `Older incidents exist: ${v.limit < v.max ? `\`/gpu history ${codeLine(v.target.id)} ${v.max}\` or ` : ''}\`${historyCliCommand(v.target.id, 100)}\`.`
    : null;
  const join = (body: string[], tail: string[]) => [...head, ...body, ...tail].join('\n');
  const all = join(lines, [...(older ? [older] : []), ...foot]);
  if (all.length <= max) return all;
  // Not all of it fits one message: keep the newest lines that do, and say how many are left and where to see them.
  const tailFor = (rest: number): string[] => [
    ...(rest > 0
      ? [
          `+${count(rest)} more${v.more ? ' (and older ones)' : ''}: \`${historyCliCommand(v.target.id, Math.max(v.limit, 100))}\` lists them; \`${codeLine('gpu-medic incident <id>')}\` shows one.`,
        ]
      : older
        ? [older]
        : []),
    ...foot,
  ];
  let n = 0;
  while (n < lines.length && join(lines.slice(0, n + 1), tailFor(lines.length - n - 1)).length <= max) n++;
  return join(lines.slice(0, n), tailFor(lines.length - n));
}
