import type { types } from '@slack/bolt';
import { GIB, flagsOf, usedPct, type MachineSnapshot } from '../gpu/snapshot.ts';
import { errorAdvice } from '../gpu/error-advice.ts';
import { gpuTroubleOf } from '../gpu/gpu-trouble.ts';
import { buildTableBlock, monospaceTable } from './table-block.ts';
import type { IncidentMeta, LoggedEvent } from '../incident/events.ts';
import { explainMachineError } from './explain.ts';
import { code, codeLine, mention, text as esc, rich } from './escape.ts';
import { actionLines, detailLines, type ErrorFlag, holderItems, PROCESSES_HEADER } from './status-flags.ts';
import { BLOCKS_PER_MESSAGE, contextsOf, fallbackText, limitBlocks, sectionsOf } from './blocks.ts';
import { count } from '../text/units.ts';

type KnownBlock = types.KnownBlock;

/** One Slack message the thread should contain. `key` is stable: the outbox maps it to a `ts`. */
export interface MessageView {
  key: string;
  placement: 'parent' | 'reply';
  text: string;
  blocks: KnownBlock[];
}

/** A thread's parent message: its line, and a context line under it (both already escaped text). */
export function parentView(parentText: string, context: string): MessageView {
  return {
    key: 'parent',
    placement: 'parent',
    text: parentText,
    blocks: [
      { type: 'section', text: { type: 'mrkdwn', text: parentText } },
      { type: 'context', elements: [{ type: 'mrkdwn', text: context }] },
    ],
  };
}

function mibCell(used: number | null, total: number | null): string {
  if (used === null && total === null) return 'N/A';
  const pct = usedPct(used, total);
  return `${used === null ? '?' : count(used)} / ${total === null ? '?' : count(total)} MiB${pct === null ? '' : ` (${pct}%)`}`;
}

function stamp(iso: string): string {
  return `${iso.slice(0, 19).replace('T', ' ')} UTC`;
}

function ramLine(s: MachineSnapshot): string {
  if (!s.ram) return 'RAM: not read';
  const pct = s.ram.totalBytes > 0 ? Math.round((s.ram.usedBytes / s.ram.totalBytes) * 100) : 0;
  return `RAM: ${count(Math.round(s.ram.usedBytes / GIB))} / ${count(Math.round(s.ram.totalBytes / GIB))} GiB (${pct}%)`;
}

/**
 * "Why:" lines: the root causes the holders' command lines show (src/gpu/root-cause.ts), each a
 * composed sentence whose flag names are code; or why they could not be read. None when the read
 * did not look or found no known program (no guess).
 */
export function whyLines(
  s: Pick<MachineSnapshot, 'rootCauses' | 'rootCausesNote'>,
  said: ReadonlySet<string> = new Set(),
): string[] {
  return [
    ...(s.rootCauses ?? []).filter((c) => !said.has(c.sentence)).map((c) => `:bulb: Why: ${rich(c.parts)}`),
    ...(s.rootCausesNote ? [`Why: not known, ${esc(s.rootCausesNote)}`] : []),
  ];
}

/** The flags status-flags.ts leaves to this file: a GPU error with its next step, an unreadable GPU. */
function flagText(f: ErrorFlag, s: MachineSnapshot): string {
  if (f.kind === 'gpu_unreadable') return `GPU ${f.gpuIndex ?? '?'}: memory could not be read`;
  return `nvidia-smi reported an error: ${esc(f.error.message)}${f.error.busId ? ` (GPU ${esc(f.error.busId)})` : ''}. Next step: ${rich(errorAdvice(f.error.kind, s.machineId, s.machineId))}`;
}

/**
 * As many items as fit in `max` characters, then "+N more" for the rest; when not even one fits
 * beside the count, only the count ("12 processes"). Never an item cut in half, never a silent cut.
 */
function listCell(items: readonly string[], max: number, noun: [string, string] = ['process', 'processes']): string {
  if (items.length === 0) return '-';
  const all = items.join(', ');
  if (all.length <= max) return all;
  for (let shown = items.length - 1; shown >= 1; shown--) {
    const cell = `${items.slice(0, shown).join(', ')} +${items.length - shown} more`;
    if (cell.length <= max) return cell;
  }
  return `${items.length} ${items.length === 1 ? noun[0] : noun[1]}`;
}

/** Characters a process cell may take: the table block's cell clip and the monospace fallback's. */
const BLOCK_CELL_MAX = 500;
const TEXT_CELL_MAX = 64;

/**
 * The GPU table of one snapshot: native table block plus a monospace fallback in `text`, whose
 * Processes column names each GPU's holders (src/render/status-flags.ts); then the RAM line, the
 * flags that need action (each once, with its next step) and the Why lines (but those of
 * `opts.saidWhy`, which an earlier message of the thread said). That first message
 * is what fits a phone screen. When a cell cannot show every process of its GPU it says "+N more"
 * and a second message (key `<key>:processes`, more if one is not enough) lists every process in
 * full; fuser's raw device rows go to a details message (key `<key>:details`).
 */
export function snapshotViews(
  key: string,
  s: MachineSnapshot,
  title: string,
  opts: { details: 'message' | 'inline'; saidWhy?: ReadonlySet<string> } = { details: 'message' },
): MessageView[] {
  const header = ['GPU', 'Name', 'Memory used / total', 'Util', PROCESSES_HEADER];
  const rowWith = (g: MachineSnapshot['gpus'][number], max: number): string[] => [
    String(g.index ?? '?'),
    g.name ?? '?',
    mibCell(g.memoryUsedMiB, g.memoryTotalMiB),
    g.utilizationPct === null ? 'N/A' : `${g.utilizationPct}%`,
    listCell(holderItems(s, g), max),
  ];
  const rows = s.gpus.map((g) => rowWith(g, BLOCK_CELL_MAX));
  const textRows = s.gpus.map((g) => rowWith(g, TEXT_CELL_MAX));
  const cut = s.gpus.some((g) => holderItems(s, g).join(', ').length > BLOCK_CELL_MAX);
  const flags = actionLines(s, (f) => flagText(f, s));
  const details = detailLines(s);
  const heading = `*${title}* · ${s.view} view · snapshot ${stamp(s.takenAt)}`;
  const more = cut ? ['Every process of every GPU is listed in the next message.'] : [];
  const ramPressed = flagsOf(s).some((f) => f.kind === 'ram_pressure');
  const extra = [
    ...(ramPressed ? [] : [ramLine(s)]),
    ...(s.holdersError ? [`:warning: fuser could not list the device holders: ${esc(s.holdersError)}`] : []),
    ...(s.holderRowsNote ? [`:warning: Some holders are on no GPU of the table: ${esc(s.holderRowsNote)}`] : []),
    ...flags,
    ...whyLines(s, opts.saidWhy),
    ...more,
    ...(details.length === 0
      ? []
      : opts.details === 'inline'
        ? details
        : ["fuser's device rows are in the details message below."]),
  ];
  const noGpus = s.gpuError ? 'No GPU numbers: see the error below.' : 'No GPUs found.';
  const blocks: KnownBlock[] = [{ type: 'section', text: { type: 'mrkdwn', text: heading } }];
  if (rows.length > 0) blocks.push(buildTableBlock(header, rows).block);
  else blocks.push({ type: 'section', text: { type: 'mrkdwn', text: noGpus } });
  blocks.push(...contextsOf(extra));
  const text = fallbackText([
    heading,
    rows.length > 0 ? monospaceTable(header, textRows, { maxCellChars: TEXT_CELL_MAX }) : noGpus,
    ...extra,
  ]);
  const views: MessageView[] = [{ key, placement: 'reply', text, blocks: limitBlocks(blocks) }];
  if (cut) views.push(...processListViews(key, s, title));
  if (details.length > 0 && opts.details === 'message') {
    const dHeading = `*${title}* · details · snapshot ${stamp(s.takenAt)}`;
    views.push({
      key: `${key}:details`,
      placement: 'reply',
      text: fallbackText([dHeading, ...details]),
      blocks: limitBlocks([{ type: 'section', text: { type: 'mrkdwn', text: dHeading } }, ...contextsOf(details)]),
    });
  }
  return views;
}

/** Every process of every GPU, in full, over as many messages as it takes. */
function processListViews(key: string, s: MachineSnapshot, title: string): MessageView[] {
  const lines = s.gpus.flatMap((g) => {
    const ps = holderItems(s, g);
    return [
      `GPU ${g.index ?? '?'} · ${ps.length} ${ps.length === 1 ? 'process' : 'processes'}:`,
      ...ps.map((p) => `    ${codeLine(p)}`),
    ];
  });
  const sections = sectionsOf(lines, { code: true });
  const per = BLOCKS_PER_MESSAGE - 1;
  const views: MessageView[] = [];
  for (let i = 0; i < sections.length; i += per) {
    const part = sections.length > per ? ` (part ${i / per + 1} of ${Math.ceil(sections.length / per)})` : '';
    const heading = `*${title}* · every GPU process${part} · snapshot ${stamp(s.takenAt)}`;
    const chunk = sections.slice(i, i + per);
    const body = chunk.map((b) => (b.type === 'section' && b.text ? b.text.text : ''));
    views.push({
      key: i === 0 ? `${key}:processes` : `${key}:processes:${i / per + 1}`,
      placement: 'reply',
      text: fallbackText([heading, ...body]),
      blocks: [{ type: 'section', text: { type: 'mrkdwn', text: heading } }, ...chunk],
    });
  }
  return views;
}

interface MachineResult {
  machineId: string;
  snapshot: MachineSnapshot | null;
  error: { code: string; message: string } | null;
}

function resultsOf(events: LoggedEvent[]): Map<string, MachineResult> {
  const out = new Map<string, MachineResult>();
  for (const e of events) {
    if (e.type === 'snapshot' && e.label === 'status')
      out.set(e.snapshot.machineId, { machineId: e.snapshot.machineId, snapshot: e.snapshot, error: null });
    if (e.type === 'machine_error')
      out.set(e.machineId, { machineId: e.machineId, snapshot: null, error: { code: e.code, message: e.message } });
  }
  return out;
}

function summaryRow(r: MachineResult): string[] {
  const s = r.snapshot;
  if (!s) return [r.machineId, 'unreachable', '-', '-', r.error?.code ?? '?'];
  const trouble = gpuTroubleOf(s);
  const flagText = (): string[] =>
    flagsOf(s).map((f) =>
      f.kind === 'memory_without_process'
        ? `no-process GPU ${f.gpuIndex}`
        : f.kind === 'ram_pressure'
          ? `RAM ${f.usedPct}%`
          : f.kind.replace('_', ' '),
    );
  // Read, but no GPU numbers: say what is wrong rather than "0 busy / 0 idle · 0 / 0 MiB".
  if (trouble && s.gpus.length === 0)
    return [
      r.machineId,
      `GPU error: ${trouble.label}`,
      '-',
      ramLine(s).replace('RAM: ', ''),
      flagText().join(', ') || '-',
    ];
  const busy = s.gpus.filter((g) => (g.memoryUsedMiB ?? 0) > 64).length;
  const held = s.gpus.reduce((a, g) => a + (g.memoryUsedMiB ?? 0), 0);
  const total = s.gpus.reduce((a, g) => a + (g.memoryTotalMiB ?? 0), 0);
  const flags = flagText();
  return [
    r.machineId,
    `${busy} busy / ${s.gpus.length - busy} idle${trouble ? ` · ${trouble.label}` : ''}`,
    mibCell(held, total),
    ramLine(s).replace('RAM: ', ''),
    flags.length ? flags.join(', ') : '-',
  ];
}

/**
 * The status-all summary: one table per message (Slack allows one), so past one table's rows the
 * summary goes on in `summary:2`, `summary:3`, … until every machine has its row; the error lines
 * follow the last table, over as many sections as they need.
 */
function summaryViews(machines: number, header: string[], rows: string[][], errors: string[]): MessageView[] {
  const pages: Array<{ block: KnownBlock; rows: string[][] }> = [];
  let rest = rows;
  do {
    const built = buildTableBlock(header, rest);
    // A table that had to fold rows is rebuilt from the rows it showed, so it has no "… more" row.
    const shown = built.omittedRows > 0 ? Math.max(1, built.shownRows) : rest.length;
    const pageRows = rest.slice(0, shown);
    pages.push({ block: shown < rest.length ? buildTableBlock(header, pageRows).block : built.block, rows: pageRows });
    rest = rest.slice(shown);
  } while (rest.length > 0);
  return pages.map((page, i) => {
    const last = i === pages.length - 1;
    const part = pages.length > 1 ? ` (part ${i + 1} of ${pages.length}: ${page.rows.length} machines)` : '';
    const heading = `*Summary of ${machines} machines*${part}`;
    const tail = last ? errors : [];
    const blocks: KnownBlock[] = [
      { type: 'section', text: { type: 'mrkdwn', text: heading } },
      page.block,
      ...sectionsOf(tail),
    ];
    return {
      key: i === 0 ? 'summary' : `summary:${i + 1}`,
      placement: 'reply' as const,
      text: fallbackText([heading, monospaceTable(header, page.rows), ...tail]),
      blocks: limitBlocks(blocks),
    };
  });
}

/** The whole thread as it should look given the log so far. Pure and deterministic. */
export function renderIncident(meta: IncidentMeta, events: LoggedEvent[]): MessageView[] {
  const results = resultsOf(events);
  const done = meta.targets.every((t) => results.has(t));
  const failed = [...results.values()].filter((r) => r.error).length;
  // Machines read whose GPUs were not (nvidia-smi in error, memory unreadable): never green.
  const troubled = meta.targets.flatMap((t) => {
    const s = results.get(t)?.snapshot;
    const trouble = s ? gpuTroubleOf(s) : null;
    return trouble ? [`GPU error on ${code(t)}: ${esc(trouble.label)}`] : [];
  });
  const what = meta.kind === 'status_all' ? `all machines (${meta.targets.length})` : meta.targets.map(code).join(', ');
  const state = !done
    ? `:hourglass_flowing_right: reading… (${results.size}/${meta.targets.length})`
    : failed === 0 && troubled.length === 0
      ? ':white_check_mark: done'
      : `:warning: done; ${[...(failed > 0 ? [`${failed} of ${meta.targets.length} could not be read`] : []), ...troubled].join('; ')}`;
  const parentText = `:mag: GPU status of ${what}, requested by ${mention(meta.requester)} · ${state}`;
  const views: MessageView[] = [parentView(parentText, `incident ${code(meta.id)} · ${stamp(meta.createdAt)}`)];
  if (meta.kind === 'status') {
    for (const e of events) {
      if (e.type === 'snapshot') views.push(...snapshotViews(`ev:${e.id}`, e.snapshot, code(e.snapshot.machineId)));
      if (e.type === 'machine_error') {
        const text = explainMachineError(e.machineId, e.code, e.message);
        views.push({
          key: `ev:${e.id}`,
          placement: 'reply',
          text,
          blocks: [{ type: 'section', text: { type: 'mrkdwn', text: text.slice(0, 3000) } }],
        });
      }
    }
  } else if (meta.kind === 'status_all' && done) {
    const ordered = meta.targets.map((t) => results.get(t)).filter((r): r is MachineResult => r !== undefined);
    const header = ['Machine', 'GPUs', 'Memory held', 'RAM', 'Flags'];
    const rows = ordered.map(summaryRow);
    const errors = ordered
      .filter((r) => r.error)
      .map((r) => explainMachineError(r.machineId, r.error?.code ?? '', r.error?.message ?? '').split('\n')[0] ?? '');
    views.push(...summaryViews(ordered.length, header, rows, errors));
  }
  return views;
}
