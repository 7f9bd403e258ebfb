/**
 * Root causes in plain words, from the command lines of the processes holding the GPUs, so a thread says why.
 * Pure and table-driven: each known serving program lists the arguments that decide how much host
 * RAM and GPU memory it asks for, whether a value is per rank (tensor-parallel process), and its
 * default. Only programs in the table get a sentence; an unknown program gets no guess.
 *
 * The seed incident: `python3 -m sglang.launch_server --tp-size 8 --hicache-size 300 …` asked each of
 * 8 ranks for 300 GB of host cache, 2.4 TB on a 449 GiB host. That reads here as
 * "8 ranks × 300 GB host cache (`--hicache-size` is per rank) = 2.4 TB requested on a 449 GiB host".
 *
 * Sentences hold only numbers and the table's own flag names, never text from the machine; each
 * cause also comes as `parts` (src/text/rich.ts), its flag names as code, for the renderers.
 */
import type { Rich } from '../text/rich.ts';
import { countRounded } from '../text/units.ts';

export interface RootCauseInput {
  /**
   * Command lines of the GPU holders and of their parents (a TP rank's own title is often only
   * `sglang::scheduler_TP0`; the launcher's command line carries the arguments), as /proc shows them
   * with the NULs between arguments turned into spaces.
   */
  commandLines: readonly string[];
  /** The host's RAM, when read. */
  hostRamTotalBytes: number | null;
  /** How many GPUs the machine (a container: its own view) sees, when read. */
  gpusVisible: number | null;
}

export type RootCauseKind = 'host_memory_over_ram' | 'host_memory_near_ram' | 'ranks_over_gpus' | 'gpu_fraction_high';

export interface RootCause {
  program: string;
  kind: RootCauseKind;
  /** One plain sentence (numbers and flag names only, the flags in backticks). */
  sentence: string;
  /** The same sentence as data: its flag names as code parts, the rest plain words. */
  parts: Rich;
  /** Host bytes the arguments ask for in all, where that is what the cause is about. */
  requestedBytes?: number;
}

interface HostMemoryArg {
  flags: readonly string[];
  what: string;
  /** Bytes per unit of the value (GB = 1e9, GiB = 2^30), as the program documents its unit. */
  unit: 'GB' | 'GiB';
  /** The value is per tensor-parallel rank (per GPU), so the host total is value × ranks. */
  perRank: boolean;
  /** Only counted when this flag is also present (e.g. the cache is off without it). */
  requires?: string;
}

interface Program {
  name: string;
  /** Matches the command line of a launch of this program. */
  launch: RegExp;
  rankFlags: readonly string[];
  hostMemory: readonly HostMemoryArg[];
  gpuFraction: { flags: readonly string[]; default: number | null };
  /** The program's parser takes `--a_b` for `--a-b` (vLLM's FlexibleArgumentParser does). */
  underscores: boolean;
}

/**
 * SGLang: `--hicache-size` is the host KV cache per rank in GB (the seed). vLLM: `--swap-space` and
 * `--cpu-offload-gb` are GiB per GPU (its engine arguments), `--gpu-memory-utilization` defaults to 0.9.
 */
const PROGRAMS: readonly Program[] = [
  {
    name: 'SGLang',
    launch: /(?:^|[\s/])(?:-m\s+)?sglang(?:\.launch_server|\s+serve)\b/,
    rankFlags: ['--tp-size', '--tp', '--tensor-parallel-size'],
    hostMemory: [
      {
        flags: ['--hicache-size'],
        what: 'host cache',
        unit: 'GB',
        perRank: true,
        requires: '--enable-hierarchical-cache',
      },
    ],
    gpuFraction: { flags: ['--mem-fraction-static'], default: null },
    underscores: false,
  },
  {
    name: 'vLLM',
    launch: /(?:^|[\s/])(?:vllm\s+serve|-m\s+vllm\.entrypoints\.\S+)\b/,
    rankFlags: ['--tensor-parallel-size', '-tp'],
    hostMemory: [
      { flags: ['--cpu-offload-gb'], what: 'CPU offload', unit: 'GiB', perRank: true },
      { flags: ['--swap-space'], what: 'CPU swap space', unit: 'GiB', perRank: true },
    ],
    gpuFraction: { flags: ['--gpu-memory-utilization'], default: 0.9 },
    underscores: true,
  },
];

const UNIT_BYTES = { GB: 1e9, GiB: 2 ** 30 } as const;
/** At or above this share of the host's RAM, host-side requests are worth a sentence. */
const NEAR_RAM = 0.8;
/** A GPU fraction at or above this leaves little for activations and other processes. */
const HIGH_FRACTION = 0.9;

interface ArgSeen {
  /** The flag as the command line wrote it (one of the table's names). */
  flag: string;
  value: string;
}

/** `--flag value` or `--flag=value`; the last one wins, as argparse does. */
function argValue(tokens: readonly string[], flags: readonly string[]): ArgSeen | null {
  let v: ArgSeen | null = null;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i] ?? '';
    for (const f of flags) {
      if (t === f && i + 1 < tokens.length) v = { flag: f, value: tokens[i + 1] ?? '' };
      else if (t.startsWith(`${f}=`)) v = { flag: f, value: t.slice(f.length + 1) };
    }
  }
  return v;
}

/** A positive decimal as Python's float() reads one (`0.95`, `.95`, `1.0`, `300`); the text kept as written. */
function positive(a: ArgSeen | null): { n: number; text: string } | null {
  if (a === null || !/^(?:\d{1,15}(?:\.\d{0,15})?|\.\d{1,15})$/.test(a.value)) return null;
  const n = Number(a.value);
  return n > 0 && Number.isFinite(n) ? { n, text: a.value } : null;
}

/** A rank count is a whole number, as the programs' `type=int` parsers insist. */
function wholeCount(a: ArgSeen | null): number | null {
  if (a === null || !/^[1-9]\d{0,5}$/.test(a.value)) return null;
  return Number(a.value);
}

/** `--tensor_parallel_size=8` → `--tensor-parallel-size=8` for programs whose parser does the same. */
function dashed(token: string): string {
  if (!token.startsWith('--')) return token;
  const eq = token.indexOf('=');
  return eq < 0 ? token.replace(/_/g, '-') : `${token.slice(0, eq).replace(/_/g, '-')}${token.slice(eq)}`;
}

/** `… (\`--flag\` …)` → plain words and code parts: the sentence's backticks mark only the table's flag names. */
function partsOf(sentence: string): Rich {
  return sentence
    .split('`')
    .map((run, i) => (i % 2 === 1 ? { code: run } : run))
    .filter((p) => p !== '');
}

/** Decimal units for GB values (as the flag means them), binary for RAM, as `free -h` shows it. */
function bytesWords(b: number, unit: 'GB' | 'GiB'): string {
  if (unit === 'GB') return b >= 1e12 ? `${trim(b / 1e12)} TB` : `${trim(b / 1e9)} GB`;
  return b >= 2 ** 40 ? `${trim(b / 2 ** 40)} TiB` : `${trim(b / 2 ** 30)} GiB`;
}

function trim(n: number): string {
  return n >= 100 ? String(Math.round(n)) : String(Math.round(n * 10) / 10);
}

function ramWords(b: number): string {
  return `${countRounded(b / 2 ** 30)} GiB`;
}

function causesOf(p: Program, raw: readonly string[], input: RootCauseInput): Array<Omit<RootCause, 'parts'>> {
  const tokens = p.underscores ? raw.map(dashed) : raw;
  const out: Array<Omit<RootCause, 'parts'>> = [];
  const rankArg = argValue(tokens, p.rankFlags);
  const ranks = wholeCount(rankArg) ?? 1;
  const rankFlag = rankArg?.flag ?? p.rankFlags[0] ?? '';
  for (const a of p.hostMemory) {
    if (a.requires !== undefined && !tokens.includes(a.requires)) continue;
    const given = positive(argValue(tokens, a.flags));
    if (given === null) continue;
    const value = given.n;
    const per = value * UNIT_BYTES[a.unit];
    const total = a.perRank ? per * ranks : per;
    const flag = `\`${a.flags[0] ?? ''}\``;
    const how =
      a.perRank && ranks > 1
        ? `${ranks} ranks × ${trim(value)} ${a.unit} ${a.what} (${flag} is per rank) = ${bytesWords(total, a.unit)}`
        : `${trim(value)} ${a.unit} ${a.what} (${flag})`;
    if (input.hostRamTotalBytes !== null && total > input.hostRamTotalBytes) {
      out.push({
        program: p.name,
        kind: 'host_memory_over_ram',
        requestedBytes: total,
        sentence: `${how} requested on a ${ramWords(input.hostRamTotalBytes)} host: more than its RAM.`,
      });
    } else if (input.hostRamTotalBytes !== null && total >= NEAR_RAM * input.hostRamTotalBytes) {
      const pct = Math.round((total / input.hostRamTotalBytes) * 100);
      out.push({
        program: p.name,
        kind: 'host_memory_near_ram',
        requestedBytes: total,
        sentence: `${how} requested on a ${ramWords(input.hostRamTotalBytes)} host: ${pct} % of its RAM.`,
      });
    }
  }
  if (input.gpusVisible !== null && ranks > input.gpusVisible) {
    out.push({
      program: p.name,
      kind: 'ranks_over_gpus',
      sentence: `\`${rankFlag}\` ${ranks} asks for ${ranks} GPUs, and this machine sees ${input.gpusVisible}.`,
    });
  }
  const given = positive(argValue(tokens, p.gpuFraction.flags));
  const fraction = given?.n ?? p.gpuFraction.default;
  const fracFlag = `\`${p.gpuFraction.flags[0] ?? ''}\``;
  if (fraction !== null && fraction >= HIGH_FRACTION && fraction <= 1) {
    out.push({
      program: p.name,
      kind: 'gpu_fraction_high',
      sentence: `Each rank reserves ${Math.round(fraction * 100)} % of its GPU's memory (${fracFlag} ${given === null ? `default ${fraction}` : given.text}), so little is left for anything else on that GPU.`,
    });
  }
  return out;
}

/** What the holders' command lines say about why memory ran out; empty for programs not in the table. */
export function rootCauses(input: RootCauseInput): RootCause[] {
  const out: RootCause[] = [];
  const seen = new Set<string>();
  for (const line of input.commandLines) {
    const norm = line.replace(/\s+/g, ' ').trim();
    if (norm === '' || seen.has(norm)) continue;
    seen.add(norm);
    const program = PROGRAMS.find((p) => p.launch.test(norm));
    if (!program) continue;
    for (const c of causesOf(program, norm.split(' '), input)) {
      if (!out.some((o) => o.kind === c.kind && o.sentence === c.sentence))
        out.push({ ...c, parts: partsOf(c.sentence) });
    }
  }
  return out;
}
