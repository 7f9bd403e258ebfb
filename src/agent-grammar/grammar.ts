import { createHash } from 'node:crypto';
import { AGENT_LIMITS, AGENT_PROTOCOL, AGENT_VERSION, ARG_TYPES, DESTRUCTIVE_VERBS } from './arg-types.ts';
import { VERBS, type VerbDef, type Where } from './verbs.ts';

/**
 * agent/grammar.json as data (agent/PROTOCOL.md, "grammar.json format"), made from the templates:
 * each verb's `run` is read off the argv its template builds for two sample calls. A word the same
 * in both is a literal; one that differs is an argument's (whole, or between a constant prefix and
 * suffix); the variadic arguments at the end are `{"rest": i}`. Pure.
 */
export type RunWord =
  | string
  | { arg: number; prefix?: string; suffix?: string }
  | { rest: number }
  /** A script the interpreter before it runs: its file in agent/scripts/ and the SHA-256 of its bytes. */
  | { script: string; sha256: string };

/** Interpreters whose next word is a program text, and the file extension their scripts get. */
const SCRIPT_RUNNERS: Record<string, { flag: string; ext: string }> = {
  sh: { flag: '-c', ext: 'sh' },
  perl: { flag: '-e', ext: 'pl' },
  python3: { flag: '-c', ext: 'py' },
};

/** The file name of a verb's script, when its run template's third word is one (`sh -c <text>` …); else null. */
function scriptName(verb: string, run: readonly RunWord[]): string | null {
  const r = typeof run[0] === 'string' ? SCRIPT_RUNNERS[run[0]] : undefined;
  return r !== undefined && run[1] === r.flag && typeof run[2] === 'string' ? `${verb}.${r.ext}` : null;
}

const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

export interface GrammarVerb {
  args: string[];
  variadic: string | null;
  on: Where[];
  destructive: boolean;
  run: RunWord[];
}

export interface Grammar {
  protocol: number;
  agentVersion: string;
  limits: { batchParts: number; readTimeoutMs: number };
  types: Record<string, string>;
  verbs: Record<string, GrammarVerb>;
}

function argWord(w1: string, w2: string, a1: readonly string[], a2: readonly string[]): RunWord | null {
  for (let i = 0; i < a1.length; i++) {
    const x = a1[i] ?? '';
    const y = a2[i] ?? '';
    if (w1 === x && w2 === y) return { arg: i };
  }
  for (let i = 0; i < a1.length; i++) {
    const x = a1[i] ?? '';
    const y = a2[i] ?? '';
    const at = w1.indexOf(x);
    if (x === '' || at < 0) continue;
    const prefix = w1.slice(0, at);
    const suffix = w1.slice(at + x.length);
    if (w2 === prefix + y + suffix) return { arg: i, prefix, suffix };
  }
  return null;
}

/** The `run` of one verb, from its template; throws when the two samples do not line up. */
function runOf(name: string, def: VerbDef): RunWord[] {
  const [a1, a2] = def.samples;
  const s1 = def.build(a1);
  const s2 = def.build(a2);
  for (const [s, a] of [
    [s1, a1],
    [s2, a2],
  ] as const)
    if (s.agent?.verb !== name || JSON.stringify(s.agent.args) !== JSON.stringify(a))
      throw new Error(
        `verb ${name}: the template's agent call is ${JSON.stringify(s.agent)}, not ${name} ${a.join(' ')}`,
      );
  if (s1.argv.length !== s2.argv.length) throw new Error(`verb ${name}: the samples' argv differ in length`);
  const run: RunWord[] = s1.argv.map((w1, j) => {
    const w2 = s2.argv[j] ?? '';
    if (w1 === w2) return w1;
    const w = argWord(w1, w2, a1, a2);
    if (w === null) throw new Error(`verb ${name}: argv word ${j} is no argument's (${w1.slice(0, 40)})`);
    return w;
  });
  if (def.variadic === null) return run;
  // The variadic arguments in order at the end: one `rest`.
  const from = def.args.length;
  const n = a1.length - from;
  const tail = run.slice(run.length - n);
  const isRest =
    n > 0 && tail.every((w, k) => typeof w === 'object' && 'arg' in w && w.arg === from + k && !w.prefix && !w.suffix);
  if (!isRest) throw new Error(`verb ${name}: its variadic arguments are not the argv's last words, in order`);
  return [...run.slice(0, run.length - n), { rest: from }];
}

/**
 * Every script the grammar names, by file name: each a plain file in agent/scripts/ that an admin can
 * read and lint, the grammar carrying its checksum (the agent refuses a file that differs).
 */
export function scriptFiles(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, def] of Object.entries(VERBS)) {
    const run = runOf(name, def);
    const file = scriptName(name, run);
    if (file !== null) out[file] = run[2] as string;
  }
  return out;
}

export function buildGrammar(): Grammar {
  const verbs: Record<string, GrammarVerb> = {};
  for (const [name, def] of Object.entries(VERBS)) {
    const run = runOf(name, def);
    const file = scriptName(name, run);
    verbs[name] = {
      args: [...def.args],
      variadic: def.variadic,
      on: [...def.on],
      destructive: DESTRUCTIVE_VERBS.includes(name),
      run: file === null ? run : run.map((w, i) => (i === 2 ? { script: file, sha256: sha256(run[2] as string) } : w)),
    };
  }
  return {
    protocol: AGENT_PROTOCOL,
    agentVersion: AGENT_VERSION,
    limits: { ...AGENT_LIMITS },
    types: { ...ARG_TYPES },
    verbs,
  };
}

/** The file's text: what `npm run agent:grammar` writes and the committed file must equal. */
export function grammarText(): string {
  return `${JSON.stringify(buildGrammar(), null, 2)}\n`;
}

/** What the agent executes for `verb args…` by this grammar (the TS side of the agreement test). */
export function expandRun(
  g: Grammar,
  verb: string,
  args: readonly string[],
  scripts: Record<string, string> = scriptFiles(),
): string[] {
  const v = g.verbs[verb];
  if (v === undefined) throw new Error(`no verb ${verb}`);
  return v.run.flatMap((w): string[] => {
    if (typeof w === 'string') return [w];
    if ('rest' in w) return args.slice(w.rest);
    if ('script' in w) {
      const text = scripts[w.script];
      if (text === undefined) throw new Error(`no script ${w.script}`);
      return [text];
    }
    return [`${w.prefix ?? ''}${args[w.arg] ?? ''}${w.suffix ?? ''}`];
  });
}
