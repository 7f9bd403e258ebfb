/**
 * Tables for Slack, pure: a Block Kit `table` block for clients that render it, and a fixed-width
 * text table for the message `text` fallback (notifications, screen readers, old clients).
 *
 * Slack's table block (docs.slack.dev/reference/block-kit/blocks/table-block): at most 100 rows
 * (the header row is one of them), at most 20 cells per row, at most 20 column_settings
 * (`align` left|center|right, `is_wrapped`), cells `raw_text` or `rich_text`; messages only, and
 * ONE table per message (a second one is refused with `invalid_attachments`/only_one_table_allowed).
 * Reported by integrators but not documented, so handled defensively here: an empty `raw_text`
 * cell is refused, and very large tables (~10,000 characters of cells) are refused.
 */

import { cell as plainCell, codeLayout, entities } from './escape.ts';

export const TABLE_MAX_ROWS = 100;
export const TABLE_MAX_COLUMNS = 20;
/** Not a documented limit; integrators report rejections past ~10k characters of cell text. */
export const TABLE_SAFE_TOTAL_CHARS = 10_000;
/** A section block's text limit; the default budget for `monospaceTable` so it fits one section. */
const SECTION_TEXT_MAX = 3_000;

export type ColumnAlign = 'left' | 'center' | 'right';

export interface RawTextCell {
  type: 'raw_text';
  text: string;
}

export interface TableColumnSetting {
  align?: ColumnAlign;
  is_wrapped?: boolean;
}

/** Structurally a `TableBlock` of @slack/types, so it drops into `blocks` as is. */
export interface SlackTableBlock {
  type: 'table';
  block_id?: string;
  rows: RawTextCell[][];
  column_settings?: TableColumnSetting[];
}

export interface TableBlockOptions {
  /** Per-column alignment. Default: right for numeric columns (every non-empty body cell a number), else left. */
  align?: ReadonlyArray<ColumnAlign | undefined>;
  /** Columns whose long content should wrap (e.g. a command line). Default: none. */
  wrap?: ReadonlyArray<boolean | undefined>;
  /** Total rows including the header, at most 100 (Slack's limit). Default 100. */
  maxRows?: number;
  /** Characters a cell may hold before it is cut with "…". Default 500. */
  maxCellChars?: number;
  /** Budget for all cell text; rows past it are folded into the "… N more" row. Default 10,000. */
  maxTotalChars?: number;
  /** Shown for an empty cell (Slack refuses empty raw_text). Default "-". */
  emptyCell?: string;
  blockId?: string;
}

export interface BuiltTable {
  block: SlackTableBlock;
  /** Body rows shown (excluding the header and the "… N more" row). */
  shownRows: number;
  /** Body rows left out; when > 0 the last row of the block says "… N more rows". */
  omittedRows: number;
  /** Columns beyond Slack's 20 that were left out. */
  omittedColumns: number;
}

const NUMERIC = /^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?\s?(%|[KMGT]i?B|W|°?C|MHz|s|ms)?$/;

/** True when the text reads as a number, with an optional unit ("1234", "81 %", "24576 MiB", "250W"). */
export function isNumericCell(text: string): boolean {
  return NUMERIC.test(text.trim());
}

/** Newlines and tabs would break a row; a table cell is one line. */
function oneLine(text: string): string {
  return text.replace(/[\r\n\t]+/g, ' ').trim();
}

function clip(text: string, max: number): string {
  const chars = Array.from(text);
  return chars.length <= max ? text : `${chars.slice(0, Math.max(1, max - 1)).join('')}…`;
}

function numericColumns(header: readonly string[], rows: readonly (readonly string[])[]): boolean[] {
  return header.map((_, c) => {
    let seen = false;
    for (const row of rows) {
      const cell = oneLine(row[c] ?? '');
      if (cell === '' || cell === '-' || cell === '—') continue;
      if (!isNumericCell(cell)) return false;
      seen = true;
    }
    return seen;
  });
}

/** A column with a cell longer than this wraps by default (Slack cuts an unwrapped cell at the column's width). */
const WRAP_OVER_CHARS = 40;

function moreRowsLabel(n: number): string {
  return `… ${n} more ${n === 1 ? 'row' : 'rows'}`;
}

export function buildTableBlock(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  opts: TableBlockOptions = {},
): BuiltTable {
  if (header.length === 0) throw new RangeError('a table needs at least one column');
  const maxRows = Math.min(TABLE_MAX_ROWS, Math.max(2, opts.maxRows ?? TABLE_MAX_ROWS));
  const maxCellChars = Math.max(2, opts.maxCellChars ?? 500);
  const maxTotalChars = opts.maxTotalChars ?? TABLE_SAFE_TOTAL_CHARS;
  const emptyCell = opts.emptyCell !== undefined && opts.emptyCell.length > 0 ? opts.emptyCell : '-';
  const columns = Math.min(header.length, TABLE_MAX_COLUMNS);
  const omittedColumns = header.length - columns;

  const cellText = (raw: string | undefined): string => {
    // raw_text is plain text for Slack (no mrkdwn, no entities): `cell` only keeps it one line and mention-free.
    const text = plainCell(clip(oneLine(raw ?? ''), maxCellChars));
    return text.length > 0 ? text : emptyCell;
  };
  const toRow = (values: readonly string[]): RawTextCell[] =>
    Array.from({ length: columns }, (_, c) => ({ type: 'raw_text', text: cellText(values[c]) }));

  const headerRow = toRow(header);
  const rowChars = (r: RawTextCell[]) => r.reduce((n, cell) => n + cell.text.length, 0);
  // Reserve room for the "… N more" row so truncation never pushes the block over a limit.
  const moreRowChars = moreRowsLabel(rows.length).length + (columns - 1);
  let budget = maxTotalChars - rowChars(headerRow);

  const body: RawTextCell[][] = [];
  const fitsAll = rows.length <= maxRows - 1;
  const rowCap = fitsAll ? rows.length : maxRows - 2;
  for (const values of rows) {
    if (body.length >= rowCap) break;
    const row = toRow(values);
    const cost = rowChars(row);
    const isLast = body.length === rows.length - 1;
    if (cost > budget - (isLast ? 0 : moreRowChars)) break;
    body.push(row);
    budget -= cost;
  }

  const omittedRows = rows.length - body.length;
  const tableRows = [headerRow, ...body];
  if (omittedRows > 0) {
    // Slack rejects empty cells; a single space leaves the rest of the row blank.
    tableRows.push(
      Array.from({ length: columns }, (_, c) => ({
        type: 'raw_text',
        text: c === 0 ? moreRowsLabel(omittedRows) : ' ',
      })),
    );
  }

  const numeric = numericColumns(header.slice(0, columns), rows);
  const settings: TableColumnSetting[] = Array.from({ length: columns }, (_, c) => {
    const align = opts.align?.[c] ?? (numeric[c] ? 'right' : 'left');
    // A long cell wraps rather than being cut off on screen (nothing lost silently), unless told otherwise.
    const long = rows.some((r) => Array.from(r[c] ?? '').length > WRAP_OVER_CHARS);
    const wrap = opts.wrap?.[c] ?? long;
    return { align, ...(wrap ? { is_wrapped: true } : {}) };
  });
  // Trailing default columns need no setting (fewer settings than columns is allowed).
  while (settings.length > 0) {
    const last = settings[settings.length - 1];
    if (last?.align === 'left' && last.is_wrapped === undefined) settings.pop();
    else break;
  }

  const block: SlackTableBlock = {
    type: 'table',
    ...(opts.blockId !== undefined ? { block_id: opts.blockId } : {}),
    rows: tableRows,
    ...(settings.length > 0 ? { column_settings: settings } : {}),
  };
  return { block, shownRows: body.length, omittedRows, omittedColumns };
}

export interface MonospaceOptions {
  /** Per-column alignment; default right for numeric columns. */
  align?: ReadonlyArray<ColumnAlign | undefined>;
  /** Characters per cell before "…". Default 40. */
  maxCellChars?: number;
  /** Budget for the whole result, fences included. Default 3000 (one section block's text). */
  maxChars?: number;
  /** Shown for an empty cell. Default "-". */
  emptyCell?: string;
}

function pad(text: string, width: number, align: ColumnAlign): string {
  const gap = width - Array.from(text).length;
  if (gap <= 0) return text;
  if (align === 'right') return ' '.repeat(gap) + text;
  if (align === 'center') return ' '.repeat(Math.floor(gap / 2)) + text + ' '.repeat(Math.ceil(gap / 2));
  return text + ' '.repeat(gap);
}

/**
 * A fixed-width table inside ``` fences, numeric columns right-aligned, escaped for mrkdwn.
 * Rows past the budget become a final "… N more rows" line.
 */
export function monospaceTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  opts: MonospaceOptions = {},
): string {
  if (header.length === 0) throw new RangeError('a table needs at least one column');
  const maxCellChars = Math.max(2, opts.maxCellChars ?? 40);
  const maxChars = opts.maxChars ?? SECTION_TEXT_MAX;
  const emptyCell = opts.emptyCell ?? '-';
  // Backticks would close the code fence early; `entities` runs once on the laid-out table.
  // A cell too long for its column is cut with a numbered mark, and its whole text follows the
  // table as a note: nothing ends in "…" without the full text beside it.
  const notes: string[] = [];
  const cell = (raw: string | undefined): string => {
    const whole = codeLayout(oneLine(raw ?? ''));
    if (Array.from(whole).length <= maxCellChars) return whole.length > 0 ? whole : emptyCell;
    notes.push(whole);
    const mark = `…[${notes.length}]`;
    return `${Array.from(whole)
      .slice(0, Math.max(1, maxCellChars - mark.length))
      .join('')}${mark}`;
  };
  const head = header.map((h) => cell(h));
  const body = rows.map((r) => header.map((_, c) => cell(r[c])));
  const numeric = numericColumns(header, rows);
  const aligns: ColumnAlign[] = header.map((_, c) => opts.align?.[c] ?? (numeric[c] ? 'right' : 'left'));

  const render = (shown: number): string => {
    const visible = body.slice(0, shown);
    const widths = head.map((h, c) =>
      Math.max(Array.from(h).length, ...visible.map((r) => Array.from(r[c] ?? '').length)),
    );
    const line = (r: string[]) =>
      r
        .map((text, c) => pad(text, widths[c] ?? 0, aligns[c] ?? 'left'))
        .join('  ')
        .trimEnd();
    const lines = [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...visible.map(line)];
    if (shown < body.length) lines.push(moreRowsLabel(body.length - shown));
    const marks = new Set(
      visible.flatMap((r) => r.flatMap((t) => [...t.matchAll(/…\[(\d+)\]$/g)].map((m) => Number(m[1])))),
    );
    const shownNotes = [...marks].sort((a, b) => a - b).map((n) => `[${n}] ${notes[n - 1] ?? ''}`);
    if (shownNotes.length > 0) lines.push('', ...shownNotes);
    return `\`\`\`\n${entities(lines.join('\n'))}\n\`\`\``;
  };

  const full = render(body.length);
  if (full.length <= maxChars) return full;
  // Largest row count that fits; binary search keeps big tables from re-rendering row by row.
  let lo = 0;
  let hi = body.length - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (render(mid).length <= maxChars) lo = mid;
    else hi = mid - 1;
  }
  return render(lo);
}
