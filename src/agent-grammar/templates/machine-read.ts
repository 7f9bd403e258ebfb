/**
 * One SSH session per machine read, so reading a whole fleet stays cheap. A snapshot's queries (GPU list,
 * compute apps, RAM, and in a container the device holders) used to be one exec channel each: on a real host
 * every channel is an sshd session (fork, PAM, a login shell). `machineRead` joins them into one fixed script
 * that runs each query under its own `timeout -k`, in parallel, and prints per query its exit code, its
 * output sizes and its stdout and stderr (capped, base64: machine output can hold any byte, so no delimiter
 * in it can forge another query's answer). `parseMachineRead` turns that back into one result per query, so a
 * failing query is still reported on its own. Pure.
 */
import { shellJoin } from '../../text/shell-quote.ts';
import { AGENT_LIMITS } from '../arg-types.ts';
import type { CommandSpec } from '../command-spec.ts';

/** Each query's stdout and stderr are cut at this many bytes (the batch itself is capped above their sum). */
export const PART_CAP_BYTES = 256 * 1024;
/** Seconds between a query's TERM and KILL inside the script. */
const PART_KILL_AFTER_S = 2;

const MARK = 'gpu-medic-part';

function seconds(ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)));
}

/** The shell line a query runs as inside the read script (also its literal command in the incident log). */
function partLine(spec: CommandSpec): string {
  return shellJoin(['timeout', '-k', String(PART_KILL_AFTER_S), seconds(spec.timeoutMs), ...spec.argv]);
}

/**
 * The read script for `parts` as one command. Every word of it comes from the templates; the only
 * values are the parts' own template argv and their timeouts. The script's own timeout covers the
 * slowest part's TERM and KILL plus a second.
 */
export function machineRead(parts: readonly CommandSpec[]): CommandSpec {
  if (parts.length === 0) throw new Error('machineRead: no parts');
  if (parts.length > AGENT_LIMITS.batchParts)
    throw new Error(`machineRead: ${parts.length} parts, over the agent's ${AGENT_LIMITS.batchParts}`);
  const lines = ['d=$(mktemp -d) || exit 97', `trap 'rm -rf "$d"' EXIT`];
  parts.forEach((p, i) => lines.push(`(${partLine(p)} >"$d/o${i}" 2>"$d/e${i}"; echo $? >"$d/c${i}") &`));
  lines.push('wait');
  lines.push(`for i in ${parts.map((_, i) => i).join(' ')}; do`);
  lines.push(`  printf '${MARK} %s %s %s %s ' "$i" "$(cat "$d/c$i")" "$(wc -c <"$d/o$i")" "$(wc -c <"$d/e$i")"`);
  lines.push(`  head -c ${PART_CAP_BYTES} "$d/o$i" | base64 -w0; printf ' '`);
  lines.push(`  head -c ${PART_CAP_BYTES} "$d/e$i" | base64 -w0; printf '\\n'`);
  lines.push('done');
  const slowest = Math.max(...parts.map((p) => p.timeoutMs));
  // The agent's `batch`: each part its own verb under its own timeout, the same output framing.
  const calls = parts.map((p) => p.agent);
  const batch = calls.every((c) => c !== undefined)
    ? calls.flatMap((c, i) => [...(i > 0 ? ['+'] : []), String(Math.ceil(parts[i]?.timeoutMs ?? 0)), c.verb, ...c.args])
    : null;
  return {
    argv: ['sh', '-c', lines.join('\n')],
    ...(batch ? { agent: { verb: 'batch', args: batch } } : {}),
    timeoutMs: slowest + (PART_KILL_AFTER_S + 1) * 1000,
    maxOutputBytes: parts.length * (Math.ceil((PART_CAP_BYTES * 4) / 3) + 256) + 4096,
  };
}

export interface PartResult {
  /** The query's line inside the script. */
  command: string;
  code: number | null;
  stdout: string;
  stderr: string;
  /** `timeout` ended it (124 after TERM, 137 after KILL). */
  timedOut: boolean;
  /** Its output was longer than PART_CAP_BYTES and was cut. */
  truncated: boolean;
}

export type MachineReadParse = { ok: true; parts: PartResult[] } | { ok: false; reason: string };

const LINE = new RegExp(`^${MARK} (\\d+) (\\d+) +(\\d+) +(\\d+) ([A-Za-z0-9+/=]*) ([A-Za-z0-9+/=]*)$`);

/** The script's output back into one result per part, in the parts' order; anything malformed is refused whole. */
export function parseMachineRead(parts: readonly CommandSpec[], stdout: string): MachineReadParse {
  const seen = new Map<number, PartResult>();
  for (const raw of stdout.split('\n')) {
    if (raw === '') continue;
    const m = LINE.exec(raw);
    if (!m)
      return { ok: false, reason: `unexpected line in the read script's output: ${JSON.stringify(raw.slice(0, 120))}` };
    const i = Number(m[1]);
    const spec = parts[i];
    if (spec === undefined || seen.has(i))
      return { ok: false, reason: `the read script answered for query ${i} twice or out of range` };
    const code = Number(m[2]);
    seen.set(i, {
      command: partLine(spec),
      code,
      stdout: Buffer.from(m[5] ?? '', 'base64').toString('utf8'),
      stderr: Buffer.from(m[6] ?? '', 'base64').toString('utf8'),
      timedOut: code === 124 || code === 137,
      truncated: Number(m[3]) > PART_CAP_BYTES || Number(m[4]) > PART_CAP_BYTES,
    });
  }
  const out: PartResult[] = [];
  for (let i = 0; i < parts.length; i++) {
    const r = seen.get(i);
    if (r === undefined)
      return { ok: false, reason: `the read script gave no answer for query ${i} (${parts[i]?.argv[0] ?? '?'})` };
    out.push(r);
  }
  return { ok: true, parts: out };
}
