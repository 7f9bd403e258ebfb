/**
 * The fuzz of the host agent's parser (fast-check, seeded like test/faults/fuzz.test.ts), its last check: nothing
 * outside the grammar reaches a program. Thousands of command lines (grammar lines, their mutations,
 * arbitrary strings and word soups) go through the real Perl core's parser (agent/test/explain.pl loads its subs), which prints
 * the argv it would run and runs nothing. Two properties:
 *   - every accepted line's argv words are literals of its verb's run template, arguments of the
 *     line that match their declared type (with the template's constant prefix/suffix), or the
 *     fixed `pct exec <vmid> -- timeout -k 1 <s>` words of a container;
 *   - the agent accepts exactly the lines an independent reading of agent/PROTOCOL.md accepts
 *     (the model below), with the same argv.
 * It runs against the sample grammar and, once agentw's generated agent/grammar.json is on the
 * branch, against that too.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AGENT_DIR, SAMPLE_GRAMMAR } from './agent-host.ts';
import { type Explained, explain } from './explain.ts';

const execFileP = promisify(execFile);

const SEED = Number(process.env.GPU_MEDIC_FUZZ_SEED ?? 20261202);

type RunPart = string | { arg: number; prefix?: string; suffix?: string } | { rest: number } | { script: string };
interface Verb {
  args: string[];
  variadic: string | null;
  on: string[];
  destructive: boolean;
  run: RunPart[];
}
interface Grammar {
  protocol: number;
  agentVersion: string;
  types: Record<string, string>;
  verbs: Record<string, Verb>;
  limits: { batchParts: number; readTimeoutMs: number };
}

// ---- the model: agent/PROTOCOL.md's "SSH command line", read independently of the Perl ----

type Model = { ok: false } | { ok: true; version: true } | { ok: true; parts: Array<{ verb: string; argv: string[] }> };

const isTimeout = (w: string | undefined) => w !== undefined && /^[1-9][0-9]{0,5}$/.test(w) && Number(w) <= 600_000;

function modelVerb(g: Grammar, on: string, ct: string | null, ms: number, words: string[]): string[] | null {
  const [verb, ...args] = words;
  if (verb === undefined || !Object.hasOwn(g.verbs, verb)) return null;
  const d = g.verbs[verb] as Verb;
  if (!d.on.includes(on)) return null;
  const n = args.length - d.args.length;
  if (n < 0 || (d.variadic === null ? n !== 0 : n < 1 || n > 256)) return null;
  const ok = args.every((a, i) =>
    new RegExp(`^(?:${g.types[(i < d.args.length ? d.args[i] : d.variadic) as string]})$`).test(a),
  );
  if (!ok) return null;
  const argv = d.run.flatMap((p): string[] => {
    if (typeof p === 'string') return [p];
    if ('rest' in p) return args.slice(p.rest);
    if ('script' in p) return [readFileSync(join(AGENT_DIR, 'scripts', p.script), 'utf8')];
    return [`${p.prefix ?? ''}${args[p.arg]}${p.suffix ?? ''}`];
  });
  if (ct === null) return argv;
  return ['pct', 'exec', ct, '--', 'timeout', '-k', '1', String(Math.max(1, Math.ceil(ms / 1000))), ...argv];
}

function model(g: Grammar, line: string, role: 'host' | 'self'): Model {
  if (/[^A-Za-z0-9 _.:+-]/.test(line) || line.length > 4096 || /^ | $| {2}/.test(line) || line === '')
    return { ok: false };
  const w = line.split(' ');
  if (w.some((x) => x.length > 128) || w[0] !== 'gpu-medic' || w[1] !== '1') return { ok: false };
  if (w[2] === 'version') return w.length === 3 ? { ok: true, version: true } : { ok: false };
  if (!isTimeout(w[2])) return { ok: false };
  const ms = Number(w[2]);
  let i = 3;
  let on: string;
  let ct: string | null = null;
  if (w[i] === 'host') {
    on = role === 'self' ? 'self' : 'host';
    i++;
  } else if (w[i] === 'ct' && role === 'host' && /^[1-9][0-9]{0,9}$/.test(w[i + 1] ?? '')) {
    on = 'ct';
    ct = w[i + 1] as string;
    i += 2;
  } else return { ok: false };
  const rest = w.slice(i);
  if (rest[0] !== 'batch') {
    const argv = modelVerb(g, on, ct, ms, rest);
    // A read (not a destructive verb) is under the grammar's read ceiling.
    if (argv !== null && !(g.verbs[rest[0] as string] as Verb).destructive && ms > g.limits.readTimeoutMs)
      return { ok: false };
    return argv === null ? { ok: false } : { ok: true, parts: [{ verb: rest[0] as string, argv }] };
  }
  const parts: Array<{ verb: string; argv: string[] }> = [];
  let cur: string[] = [];
  for (const x of [...rest.slice(1), '+']) {
    if (x !== '+') {
      cur.push(x);
      continue;
    }
    const [t, ...vw] = cur;
    if (!isTimeout(t) || Number(t) > g.limits.readTimeoutMs || parts.length >= g.limits.batchParts)
      return { ok: false };
    const argv = modelVerb(g, on, ct, Number(t), vw);
    if (argv === null || (g.verbs[vw[0] as string] as Verb).destructive) return { ok: false };
    parts.push({ verb: vw[0] as string, argv });
    cur = [];
  }
  return ms > g.limits.readTimeoutMs ? { ok: false } : { ok: true, parts };
}

// ---- the generators ----

/** One arbitrary per type, built once (building one from a regex is the slow part). */
const typedCache = new Map<string, fc.Arbitrary<string>>();
function typedWord(g: Grammar, type: string): fc.Arbitrary<string> {
  const src = g.types[type] as string;
  let a = typedCache.get(src);
  if (a === undefined) {
    a = fc.stringMatching(new RegExp(src)).filter((s) => s.length <= 128 && !s.includes('\n'));
    typedCache.set(src, a);
  }
  return a;
}

function verbLine(g: Grammar, names: string[], where: string[]): fc.Arbitrary<string[]> {
  return fc.constantFrom(...names).chain((name) => {
    const d = g.verbs[name] as Verb;
    const fixed = d.args.map((t) => typedWord(g, t));
    const more =
      d.variadic === null ? fc.constant([]) : fc.array(typedWord(g, d.variadic), { minLength: 1, maxLength: 4 });
    return fc.tuple(fc.tuple(...fixed), more).map(([a, b]) => [...where, name, ...a, ...b]);
  });
}

function grammarLine(g: Grammar): fc.Arbitrary<string> {
  const names = Object.keys(g.verbs);
  const reads = names.filter((n) => !(g.verbs[n] as Verb).destructive);
  const where = fc.oneof(
    fc.constant(['host']),
    fc.integer({ min: 1, max: 99_999 }).map((v) => ['ct', String(v)]),
  );
  const ms = fc.integer({ min: 1, max: 600_000 }).map(String);
  const single = fc
    .tuple(ms, where)
    .chain(([t, wh]) => verbLine(g, names, []).map((v) => ['gpu-medic', '1', t, ...wh, ...v]));
  const batch = fc
    .tuple(ms, where, fc.array(fc.tuple(ms, verbLine(g, reads, [])), { minLength: 1, maxLength: 3 }))
    .map(([t, wh, parts]) => [
      'gpu-medic',
      '1',
      t,
      ...wh,
      'batch',
      ...parts.flatMap(([pt, v], i) => [...(i ? ['+'] : []), pt, ...v]),
    ]);
  return fc.oneof(single, batch, fc.constant(['gpu-medic', '1', 'version'])).map((w) => w.join(' '));
}

const HOSTILE = [
  ';',
  '|',
  '&',
  '$(',
  '`',
  "'",
  '"',
  '\\',
  '\n',
  '*',
  '?',
  '~',
  '>',
  '<',
  '#',
  '=',
  ' ',
  '  ',
  '\t',
  '\0',
  'é',
  '/',
  ',',
];

function mutated(g: Grammar): fc.Arbitrary<string> {
  return fc
    .tuple(grammarLine(g), fc.nat(), fc.nat(), fc.constantFrom(...HOSTILE), fc.string({ maxLength: 12 }), fc.nat(6))
    .map(([line, a, b, bad, junk, how]) => {
      const w = line.split(' ');
      const i = a % w.length;
      const j = b % w.length;
      switch (how) {
        case 0:
          w[i] = `${w[i]}${bad}`;
          break;
        case 1:
          w[i] = junk;
          break;
        case 2:
          w.splice(i, 1);
          break;
        case 3:
          w.splice(i, 0, w[j] as string);
          break;
        case 4:
          [w[i], w[j]] = [w[j] as string, w[i] as string];
          break;
        case 5:
          w[i] = (w[i] as string).repeat(30);
          break;
        default:
          w[i] = ['0', '600001', '007', '-1', '1e3', 'none', 'host', 'ct', 'batch', '+', 'version'][b % 11] as string;
      }
      return w.join(' ');
    });
}

function soup(g: Grammar): fc.Arbitrary<string> {
  const literal = [
    ...new Set(Object.values(g.verbs).flatMap((v) => v.run.filter((p): p is string => typeof p === 'string'))),
  ].filter((s) => s.length <= 128);
  const pool = [
    'gpu-medic',
    '1',
    'version',
    'host',
    'ct',
    '129',
    'batch',
    '+',
    '5000',
    ...Object.keys(g.verbs),
    ...literal,
    ...HOSTILE,
  ];
  return fc.array(fc.constantFrom(...pool), { minLength: 1, maxLength: 12 }).map((w) => w.join(' '));
}

function cases(g: Grammar, n: number): string[] {
  const arb = fc.oneof(
    { weight: 3, arbitrary: grammarLine(g) },
    { weight: 4, arbitrary: mutated(g) },
    { weight: 2, arbitrary: soup(g) },
    { weight: 1, arbitrary: fc.string({ maxLength: 200, unit: 'binary' }) },
    { weight: 1, arbitrary: fc.string({ minLength: 4000, maxLength: 4200, unit: fc.constantFrom('1', ' ', 'a') }) },
  );
  return fc.sample(arb, { seed: SEED, numRuns: n });
}

// ---- the properties ----

/** Every argv word of an accepted part: a literal of its verb, a typed word of the line (with prefix/suffix), or a ct word. */
function wordsFromGrammar(g: Grammar, line: string, e: Explained): string[] {
  if (!e.ok || !('parts' in e)) return [];
  const lineWords = line.split(' ');
  const bad: string[] = [];
  for (const p of e.parts) {
    const d = g.verbs[p.verb];
    if (d === undefined) {
      bad.push(`verb ${p.verb}`);
      continue;
    }
    // A script word is a literal too: the text of the file the grammar names.
    const literals = new Set(
      d.run.flatMap((x) =>
        typeof x === 'string' ? [x] : 'script' in x ? [readFileSync(join(AGENT_DIR, 'scripts', x.script), 'utf8')] : [],
      ),
    );
    const shaped = d.run.filter(
      (x): x is { arg: number; prefix?: string; suffix?: string } => typeof x !== 'string' && 'arg' in x,
    );
    const types = [...d.args, ...(d.variadic === null ? [] : [d.variadic])];
    const typed = (w: string) => lineWords.includes(w) && types.some((t) => new RegExp(`^(?:${g.types[t]})$`).test(w));
    const ctWords = new Set(['pct', 'exec', '--', 'timeout', '-k', '1']);
    let argv = p.argv;
    if (lineWords[3] === 'ct') {
      if (
        !(
          argv[0] === 'pct' &&
          argv[1] === 'exec' &&
          lineWords.includes(argv[2] as string) &&
          /^\d+$/.test(argv[7] ?? '')
        )
      )
        bad.push(`ct prefix ${argv.slice(0, 8).join(' ')}`);
      if (!argv.slice(0, 7).every((w, i) => i === 2 || ctWords.has(w))) bad.push('ct words');
      argv = argv.slice(8);
    }
    for (const w of argv) {
      const fromShape = shaped.some((s) => {
        const pre = s.prefix ?? '';
        const suf = s.suffix ?? '';
        return (
          w.startsWith(pre) &&
          w.endsWith(suf) &&
          w.length > pre.length + suf.length &&
          typed(w.slice(pre.length, w.length - suf.length))
        );
      });
      if (!literals.has(w) && !typed(w) && !fromShape) bad.push(w);
    }
  }
  return bad;
}

function sameAsModel(m: Model, e: Explained): boolean {
  if (m.ok !== e.ok) return false;
  if (!m.ok || !e.ok) return true;
  if ('version' in m || 'version' in e) return 'version' in m && 'version' in e;
  return JSON.stringify(m.parts) === JSON.stringify(e.parts.map((p) => ({ verb: p.verb, argv: p.argv })));
}

const GRAMMARS: Array<[string, string]> = [
  ['the sample grammar', SAMPLE_GRAMMAR],
  ...(existsSync(join(AGENT_DIR, 'grammar.json'))
    ? [['agent/grammar.json', join(AGENT_DIR, 'grammar.json')] as [string, string]]
    : []),
];

describe.each(GRAMMARS)(
  `the agent's parser, fuzzed (seed ${SEED}; GPU_MEDIC_FUZZ_SEED replays another), %s`,
  (_name, file) => {
    const g = JSON.parse(readFileSync(file, 'utf8')) as Grammar;

    it('the generator is seeded and covers grammar lines, hostile bytes, over-long lines and batches', () => {
      const a = cases(g, 3000);
      expect(cases(g, 3000)).toEqual(a);
      expect(a.some((l) => l.length > 4096)).toBe(true);
      expect(a.some((l) => /[;|&$`'"\\\n]/.test(l))).toBe(true);
      expect(a.some((l) => l.includes(' batch '))).toBe(true);
      expect(a.some((l) => / ct \d+ /.test(l))).toBe(true);
    });

    it('10,000 lines through the parser of the core: accepted lines run only grammar words, and exactly the model accepts the same argv', async () => {
      const lines = cases(g, 10_000);
      const out = await explain(file, lines);
      const notGrammar = lines
        .map((l, i) => ({ l, bad: wordsFromGrammar(g, l, out[i] as Explained) }))
        .filter((x) => x.bad.length);
      expect(notGrammar.slice(0, 3)).toEqual([]);
      const disagree = lines
        .map((l, i) => ({ line: l, agent: out[i], model: model(g, l, 'host') }))
        .filter((x) => !sameAsModel(x.model, x.agent as Explained));
      expect(disagree.slice(0, 3)).toEqual([]);
      const accepted = out.filter((e) => e.ok).length;
      expect(accepted).toBeGreaterThan(600);
      expect(lines.length - accepted).toBeGreaterThan(600);
    }, 120_000);

    it('the sh front itself (/bin/sh) passes exactly the words of the lines its checks let through, and nothing else', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'gpu-medic-front-'));
      try {
        // The real front with its core pointed at a stub that prints the words it was given.
        await writeFile(join(dir, 'stub.pl'), 'print join("\\0", @ARGV);\n');
        const front = (await readFile(join(AGENT_DIR, 'gpu-medic-agent'), 'utf8')).replace(
          /^GPU_MEDIC_CORE=.*$/m,
          `GPU_MEDIC_CORE=${join(dir, 'stub.pl')}`,
        );
        await writeFile(join(dir, 'front'), front, { mode: 0o755 });
        const lines = cases(g, 400).filter((l) => !l.includes('\0'));
        let passed = 0;
        let refused = 0;
        for (const line of lines) {
          const { stdout } = await execFileP('/bin/sh', ['-c', join(dir, 'front')], {
            env: { SSH_ORIGINAL_COMMAND: line, PATH: '/usr/bin:/bin' },
          });
          const got = stdout.split('\0');
          const passes =
            !/[^A-Za-z0-9 _.:+-]/.test(line) && line.length <= 4096 && !/^ | $| {2}/.test(line) && line !== '';
          const words = line.split(' ');
          const want =
            passes && words.every((w) => w.length <= 128)
              ? ['--config', '/etc/gpu-medic/agent.conf', '--', ...words]
              : null;
          if (want === null)
            expect([line, got.slice(0, 3)]).toEqual([line, ['--config', '/etc/gpu-medic/agent.conf', '--refuse']]);
          else expect([line, got]).toEqual([line, want]);
          if (want === null) refused++;
          else passed++;
        }
        expect(Math.min(passed, refused)).toBeGreaterThan(100);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 120_000);

    it('role=self: `host` verbs are checked against `self`, and `ct` is refused', async () => {
      const lines = cases(g, 800);
      const out = await explain(file, lines, 'self');
      const disagree = lines
        .map((l, i) => ({ line: l, agent: out[i], model: model(g, l, 'self') }))
        .filter((x) => !sameAsModel(x.model, x.agent as Explained));
      expect(disagree.slice(0, 3)).toEqual([]);
      expect(out.some((e, i) => e.ok && / ct \d+ /.test(lines[i] as string))).toBe(false);
    }, 120_000);
  },
);
