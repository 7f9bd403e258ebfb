import type { ParsedOutput } from '../types.ts';
import { isCsvHeader } from './csv-table.ts';
import { detectNvidiaError, detectResetSuccess, errorFromExitCode } from './detect-nvidia-error.ts';
import { emptyOutput } from './empty-output.ts';
import { COMPUTE_APPS_FIELDS, parseComputeAppsCsv } from './parse-compute-apps-csv.ts';
import { fail, ok, type ParseResult } from './parse-failure.ts';
import { looksLikeFuser, parseFuser } from './parse-fuser.ts';
import { parseQueryGpuCsv, QUERY_GPU_FIELDS } from './parse-query-gpu-csv.ts';
import { looksLikeTable, parseTable } from './parse-table.ts';
import { looksLikeXml, parseXml } from './parse-xml.ts';

/** Largest input read at all: real outputs of a 16-GPU host are well under 1 MiB. */
export const MAX_INPUT_CHARS = 8 * 1024 * 1024;

export interface ParseOptions {
  /** nvidia-smi's exit code when known: 14 with a table = infoROM corrupted; non-zero with no known text = a typed error. */
  exitCode?: number | null;
  /** Field list of a `noheader` CSV query. */
  csvFields?: readonly string[] | null;
}

function detectAndParse(text: string, fields: readonly string[] | null): ParseResult<ParsedOutput> | null {
  if (looksLikeXml(text)) return parseXml(text);
  if (looksLikeTable(text)) return parseTable(text);
  const error = detectNvidiaError(text);
  if (error !== null) return ok({ ...emptyOutput('error'), error });
  const reset = detectResetSuccess(text);
  if (reset !== null) {
    const out = emptyOutput('error');
    out.gpus = reset.map((busId) => ({
      index: null,
      name: null,
      busId,
      uuid: null,
      memoryUsedMiB: null,
      memoryTotalMiB: null,
      utilizationPct: null,
    }));
    return ok(out);
  }
  if (looksLikeFuser(text)) return parseFuser(text);
  const first = text.split('\n', 1)[0] ?? '';
  const isComputeApps = (names: readonly string[]): boolean =>
    names.some((f) => f.replace(/ \[.*$/, '').trim() === 'pid');
  if (fields !== null)
    return isComputeApps(fields) ? parseComputeAppsCsv(text, fields) : parseQueryGpuCsv(text, fields);
  if (isCsvHeader(first, QUERY_GPU_FIELDS) || isCsvHeader(first, COMPUTE_APPS_FIELDS)) {
    return isComputeApps(first.split(',')) ? parseComputeAppsCsv(text, null) : parseQueryGpuCsv(text, null);
  }
  return null;
}

/**
 * Detect which nvidia-smi (or `fuser -v`) output `text` is and read it into one snapshot. Never
 * guesses a number: input that is none of the known formats, or is cut short, is an error.
 */
export function parseNvidiaOutput(text: string, opts: ParseOptions = {}): ParseResult<ParsedOutput> {
  if (text.length > MAX_INPUT_CHARS)
    return fail(`input is larger than ${MAX_INPUT_CHARS / 1024 / 1024} MiB; nvidia-smi output never is`);
  if (text.includes('\u0000') || text.includes('\uFFFD'))
    return fail('input is binary (NUL bytes or invalid UTF-8), not command output');
  const exitCode = opts.exitCode ?? null;
  if (text.trim() === '') {
    return exitCode !== null && exitCode !== 0
      ? ok({ ...emptyOutput('error'), error: errorFromExitCode(exitCode, text) })
      : fail('empty input');
  }
  const parsed = detectAndParse(text, opts.csvFields ?? null);
  if (parsed === null) {
    if (exitCode !== null && exitCode !== 0)
      return ok({ ...emptyOutput('error'), error: errorFromExitCode(exitCode, text) });
    return fail('not nvidia-smi output (table, CSV, XML or a known error) nor fuser -v output');
  }
  if (!parsed.ok || exitCode === null || exitCode === 0 || parsed.value.error !== null) return parsed;
  if (parsed.value.source === 'fuser') return parsed; // fuser exits 1 when nothing matches: not an nvidia-smi error.
  // Data and a non-zero exit together (infoROM corrupted prints the full table, then exits 14).
  return ok({ ...parsed.value, error: errorFromExitCode(exitCode, exitCode === 14 ? 'infoROM is corrupted' : '') });
}
