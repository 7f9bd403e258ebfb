import { abort, toInt } from './parse-failure.ts';

/** One `--format=csv` output: field names (units stripped), their header unit, and the value rows. */
export interface CsvTable {
  fields: string[];
  units: Array<string | null>;
  rows: string[][];
}

const HEADER_CELL = /^([A-Za-z_][\w.]*)(?: \[([^\]]+)\])?$/;

/** Fields whose value is free text that may itself contain `, ` (nvidia-smi does not quote). */
const FREE_TEXT = new Set(['process_name', 'name', 'gpu_name']);

function splitHeaderCell(cell: string): { field: string; unit: string | null } | null {
  const m = HEADER_CELL.exec(cell.trim());
  return m === null ? null : { field: m[1] ?? '', unit: m[2] ?? null };
}

/** True when the line is a plausible CSV header made of nvidia-smi field names. */
export function isCsvHeader(line: string, known: ReadonlySet<string>): boolean {
  const parsed = line.split(',').map(splitHeaderCell);
  return parsed.every((p) => p !== null) && parsed.some((p) => p !== null && known.has(p.field));
}

function splitRow(line: string, fields: readonly string[], lineNo: number): string[] {
  const parts = line.split(',').map((c) => c.trim());
  if (parts.length === fields.length) return parts;
  const free = fields.findIndex((f) => FREE_TEXT.has(f));
  if (parts.length > fields.length && free >= 0) {
    // Put the surplus back into the one free-text field it came from.
    const extra = parts.length - fields.length;
    return [...parts.slice(0, free), parts.slice(free, free + extra + 1).join(', '), ...parts.slice(free + extra + 1)];
  }
  return abort(`CSV line ${lineNo + 1} has ${parts.length} values for ${fields.length} fields`);
}

/**
 * Read a CSV output. With `fields` (noheader) every line is data; without, the first line must be
 * the header. Units from the header apply to values that carry them (`32362 MiB`).
 */
export function readCsv(text: string, fields: readonly string[] | null, known: ReadonlySet<string>): CsvTable {
  const lines = text.replace(/\r\n/g, '\n').split('\n');
  while (lines.length > 0 && lines.at(-1)?.trim() === '') lines.pop();
  let names: string[];
  let units: Array<string | null>;
  let start = 0;
  if (fields === null) {
    const header = lines[0];
    if (header === undefined) abort('empty CSV output (no header)');
    if (!isCsvHeader(header, known)) abort('the first CSV line is not a header of nvidia-smi field names');
    const cellsOfHeader = header.split(',').map((c) => splitHeaderCell(c) ?? { field: '', unit: null });
    names = cellsOfHeader.map((c) => c.field);
    units = cellsOfHeader.map((c) => c.unit);
    start = 1;
  } else {
    const cellsOfFields = fields.map((f) => splitHeaderCell(f));
    if (cellsOfFields.some((c) => c === null) || fields.length === 0) abort('invalid CSV field list');
    names = cellsOfFields.map((c) => c?.field ?? '');
    units = cellsOfFields.map((c) => c?.unit ?? null);
    // Tolerate a header line even when told the fields (csv without noheader).
    if (
      lines[0] !== undefined &&
      isCsvHeader(lines[0], known) &&
      lines[0]
        .split(',')
        .map((c) => splitHeaderCell(c)?.field)
        .join() === names.join()
    ) {
      units = lines[0].split(',').map((c) => splitHeaderCell(c)?.unit ?? null);
      start = 1;
    }
  }
  const rows: string[][] = [];
  for (let i = start; i < lines.length; i++) {
    const line = lines[i] ?? '';
    if (line.trim() === '') abort(`blank line ${i + 1} inside CSV output`);
    rows.push(splitRow(line, names, i));
  }
  return { fields: names, units, rows };
}

/** nvidia-smi's spellings of "no value". */
function isMissing(value: string): boolean {
  return value === '' || value === 'N/A' || /^\[.*\]$/.test(value);
}

/** Integer value, with or without its unit; null when missing; aborts when it is something else. */
export function intValue(value: string, unit: string | null, what: string): number | null {
  if (isMissing(value)) return null;
  const bare = unit !== null && value.endsWith(` ${unit}`) ? value.slice(0, -unit.length - 1) : value;
  const n = toInt(bare);
  if (n === null) abort(`unreadable ${what} "${value.slice(0, 40)}"`);
  return n;
}

export function textValue(value: string): string | null {
  return isMissing(value) ? null : value;
}
