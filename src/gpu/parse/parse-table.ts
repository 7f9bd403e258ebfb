import type { Gpu, GpuProcess, MigDevice, ParsedOutput } from '../types.ts';
import { detectNvidiaError } from './detect-nvidia-error.ts';
import { emptyOutput } from './empty-output.ts';
import { normaliseBusId } from './normalise-bus-id.ts';
import { abort, guard, type ParseResult, toInt } from './parse-failure.ts';

const BORDER = /^[+|]-[-+]*[+|]$/;
const DOUBLE_RULE = /^\|=[=+|]*\|$/;
const BANNER = /^\|\s*NVIDIA-SMI\s+\S+/;

/** Looks like the default `nvidia-smi` table (a banner line inside the box). */
export function looksLikeTable(text: string): boolean {
  return text.split('\n', 40).some((l) => BANNER.test(l.trimEnd()));
}

function cells(row: string, lineNo: number): string[] {
  if (!row.startsWith('|') || !row.endsWith('|')) abort(`table line ${lineNo + 1} is cut short`);
  return row.slice(1, -1).split('|');
}

function version(banner: string, labels: readonly string[]): string | null {
  for (const label of labels) {
    const m = new RegExp(`${label}\\s*(\\S+)`).exec(banner);
    if (m?.[1] !== undefined) return m[1] === 'N/A' ? null : m[1];
  }
  return null;
}

function memory(cell: string, where: string): [number | null, number | null] {
  const t = cell.trim();
  if (t === 'N/A') return [null, null];
  const m = /^(\d+)MiB\s*\/\s*(\d+)MiB$/.exec(t);
  const used = toInt(m?.[1] ?? '');
  const total = toInt(m?.[2] ?? '');
  if (used === null || total === null) abort(`unreadable memory "${t.slice(0, 40)}" in ${where}`);
  return [used, total];
}

/** Rows grouped between `+---+` borders, starting after a `|===|` rule, up to the first line outside the box. */
interface Section {
  blocks: Array<Array<{ line: string; no: number }>>;
  end: number;
}

function readBlocks(lines: readonly string[], start: number, what: string): Section {
  const blocks: Section['blocks'] = [];
  let current: Array<{ line: string; no: number }> = [];
  let i = start;
  for (; i < lines.length; i++) {
    const line = lines[i] ?? '';
    if (BORDER.test(line)) {
      if (current.length > 0) blocks.push(current);
      current = [];
      continue;
    }
    if (!line.startsWith('|')) break;
    current.push({ line, no: i });
  }
  if (current.length > 0) abort(`the ${what} section ends without its closing border (truncated output?)`);
  return { blocks, end: i };
}

function findRule(lines: readonly string[], from: number, what: string): number {
  for (let i = from; i < lines.length && i < from + 8; i++) {
    if (DOUBLE_RULE.test(lines[i] ?? '')) return i;
  }
  return abort(`the ${what} header is incomplete (truncated output?)`);
}

function parseGpuBlock(block: ReadonlyArray<{ line: string; no: number }>): Gpu {
  const [first, second] = block;
  if (first === undefined || second === undefined) abort('a GPU block has fewer than two rows (truncated output?)');
  const row1 = cells(first.line, first.no);
  const row2 = cells(second.line, second.no);
  if (row1.length < 3 || row2.length < 3) abort(`GPU row at line ${first.no + 1} lacks its columns`);
  const head = /^(\d+)\s+(.*\S)\s+(\S+)$/.exec((row1[0] ?? '').trim());
  const index = toInt(head?.[1] ?? '');
  if (head === null || index === null) abort(`unreadable GPU index/name at line ${first.no + 1}`);
  const busToken = (row1[1] ?? '').trim().split(/\s+/)[0] ?? '';
  const busId = normaliseBusId(busToken);
  if (busId === null) abort(`unreadable bus id "${busToken.slice(0, 30)}" at line ${first.no + 1}`);
  const [memoryUsedMiB, memoryTotalMiB] = memory(row2[1] ?? '', `GPU ${index}`);
  const utilToken = (row2[2] ?? '').trim().split(/\s+/)[0] ?? '';
  const util = /^(\d+)%$/.exec(utilToken);
  if (util === null && utilToken !== 'N/A' && utilToken !== 'ERR!')
    abort(`unreadable GPU-Util "${utilToken.slice(0, 20)}" for GPU ${index}`);
  return {
    index,
    name: head[2] ?? null,
    busId,
    uuid: null,
    memoryUsedMiB,
    memoryTotalMiB,
    utilizationPct: util === null ? null : toInt(util[1] ?? ''),
  };
}

function parseMigBlock(block: ReadonlyArray<{ line: string; no: number }>): MigDevice {
  const first = block[0];
  if (first === undefined) abort('empty MIG device block');
  const row = cells(first.line, first.no);
  const ids = (row[0] ?? '').trim().split(/\s+/).map(toInt);
  const [gpuIndex, gi, ci, migDevice] = ids;
  if (ids.length !== 4 || gpuIndex == null || gi == null || ci == null || migDevice == null) {
    abort(`unreadable MIG device ids at line ${first.no + 1}`);
  }
  const [memoryUsedMiB, memoryTotalMiB] = memory(row[1] ?? '', `MIG device at line ${first.no + 1}`);
  return { gpuIndex, gi, ci, migDevice, memoryUsedMiB, memoryTotalMiB };
}

const ID = '(\\d+|N/A)';
const PROCESS_WITH_MIG = new RegExp(
  `^\\s*${ID}\\s+${ID}\\s+${ID}\\s+(\\d+)\\s+([A-Z][A-Z+]*)\\s+(.*?)\\s+(\\d+MiB|N/A)\\s*$`,
);
const PROCESS_OLD = new RegExp(`^\\s*${ID}\\s+(\\d+)\\s+([A-Z][A-Z+]*)\\s+(.*?)\\s+(\\d+MiB|N/A)\\s*$`);

function processRow(inner: string, withMig: boolean, lineNo: number): GpuProcess {
  const m = (withMig ? PROCESS_WITH_MIG : PROCESS_OLD).exec(inner);
  if (m === null) abort(`unreadable process row at line ${lineNo + 1}`);
  const g = withMig ? [m[1], m[4], m[5], m[6], m[7]] : [m[1], m[2], m[3], m[4], m[5]];
  const [gpu = '', pidText = '', type = '', name = '', mem = ''] = g;
  const pid = toInt(pidText);
  if (pid === null || pid === 0) abort(`unreadable PID at line ${lineNo + 1}`);
  return {
    gpuIndex: toInt(gpu),
    gpuUuid: null,
    pid,
    type,
    name: name === '' ? null : name,
    usedMiB: mem === 'N/A' ? null : toInt(mem.slice(0, -3)),
  };
}

function parseProcesses(lines: readonly string[], at: number): { processes: GpuProcess[]; end: number } {
  const rule = findRule(lines, at + 1, 'Processes');
  const header = lines.slice(at + 1, rule).join(' ');
  const withMig = /\bGI\b/.test(header);
  const processes: GpuProcess[] = [];
  let noneFound = false;
  for (let i = rule + 1; i < lines.length; i++) {
    const line = lines[i] ?? '';
    if (BORDER.test(line))
      return {
        processes:
          noneFound && processes.length > 0 ? abort('process rows beside "No running processes found"') : processes,
        end: i + 1,
      };
    const inner = cells(line, i).join('|');
    if (/^\s*No running processes found\s*$/.test(inner)) {
      noneFound = true;
      continue;
    }
    processes.push(processRow(inner, withMig, i));
  }
  return abort('the Processes panel has no closing border (truncated output?)');
}

/** Parse the default `nvidia-smi` table (79/89/91 columns, any driver), by separators and tokens. */
export function parseTable(text: string): ParseResult<ParsedOutput> {
  return guard(() => {
    const lines = text
      .replace(/\r\n/g, '\n')
      .split('\n')
      .map((l) => l.trimEnd());
    const banners = lines.flatMap((l, i) => (BANNER.test(l) ? [i] : []));
    const bannerAt = banners[0];
    if (bannerAt === undefined) abort('no NVIDIA-SMI banner line');
    if (banners.length > 1) abort('more than one nvidia-smi table in the input');
    const banner = lines[bannerAt] ?? '';
    const out = emptyOutput('table');
    out.driverVersion = version(banner, ['KMD Version:', 'Driver Version:']);
    out.cudaVersion = version(banner, ['CUDA UMD Version:', 'CUDA Version:']);

    const gpuRule = findRule(lines, bannerAt + 1, 'GPU');
    const gpuSection = readBlocks(lines, gpuRule + 1, 'GPU');
    if (gpuSection.blocks.length === 0) abort('the table lists no GPU');
    out.gpus = gpuSection.blocks.map(parseGpuBlock);
    const indexes = new Set(out.gpus.map((g) => g.index));
    if (indexes.size !== out.gpus.length) abort('the same GPU index appears twice');

    let i = gpuSection.end;
    const outside: string[] = lines.slice(0, bannerAt);
    while (i < lines.length) {
      const line = lines[i] ?? '';
      if (/^\|\s*MIG devices:/.test(line)) {
        const rule = findRule(lines, i + 1, 'MIG devices');
        const section = readBlocks(lines, rule + 1, 'MIG devices');
        out.migDevices = section.blocks.map(parseMigBlock);
        i = section.end;
      } else if (/^\|\s*Processes:/.test(line)) {
        const panel = parseProcesses(lines, i);
        out.processes = panel.processes;
        i = panel.end;
      } else {
        if (line.startsWith('|')) abort(`unexpected table line ${i + 1}`);
        if (!BORDER.test(line)) outside.push(line);
        i++;
      }
    }
    for (const m of out.migDevices) {
      if (!indexes.has(m.gpuIndex)) abort(`MIG device on GPU ${m.gpuIndex}, which the table does not list`);
    }
    for (const p of out.processes) {
      if (p.gpuIndex !== null && !indexes.has(p.gpuIndex))
        abort(`process ${p.pid} on GPU ${p.gpuIndex}, which the table does not list`);
    }
    out.error = detectNvidiaError(outside.join('\n'));
    return out;
  });
}
