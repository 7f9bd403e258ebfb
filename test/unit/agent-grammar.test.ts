import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ARG_TYPES, DESTRUCTIVE_VERBS, type ArgType } from '../../src/agent-grammar/arg-types.ts';
import { withEnvelopes } from '../../src/agent-grammar/envelopes.ts';
import { buildGrammar, expandRun, grammarText, type Grammar, scriptFiles } from '../../src/agent-grammar/grammar.ts';
import { VERBS } from '../../src/agent-grammar/verbs.ts';

const FILE = fileURLToPath(new URL('../../agent/grammar.json', import.meta.url));
const committed = (): Grammar => JSON.parse(readFileSync(FILE, 'utf8')) as Grammar;

/** A third call of each verb, with values neither sample has (and another count of variadic arguments). */
const MORE: Record<string, string[]> = {
  procs: ['1', '77', '65535'],
  signal: ['host', 'TERM', '4026531999', 'inc_20261201_120000_abcd', 'none', '10', '20', '30', '11', '21', '31'],
  'probe-pidns': ['999999'],
  'kernel-log': ['0'],
};

describe('agent/grammar.json', () => {
  it('is exactly what the templates generate (run `npm run -s agent:grammar` and commit it)', () => {
    expect(readFileSync(FILE, 'utf8')).toBe(grammarText());
  });

  it('names each script by a plain file in agent/scripts/ with its SHA-256, and that folder holds exactly those files, as generated', () => {
    const dir = join(dirname(FILE), 'scripts');
    const want = scriptFiles();
    expect(readdirSync(dir).sort()).toEqual(Object.keys(want).sort());
    for (const [name, text] of Object.entries(want)) expect(readFileSync(join(dir, name), 'utf8'), name).toBe(text);
    const named = Object.values(committed().verbs).flatMap((v) =>
      v.run.flatMap((w) => (typeof w === 'object' && 'script' in w ? [w] : [])),
    );
    expect(named.map((w) => w.script).sort()).toEqual(Object.keys(want).sort());
    for (const w of named)
      expect(w.sha256).toBe(
        createHash('sha256')
          .update(readFileSync(join(dir, w.script)))
          .digest('hex'),
      );
  });

  it('names the protocol, the agent version and a pattern for every argument type', () => {
    const g = committed();
    expect(g.protocol).toBe(1);
    expect(g.agentVersion).toMatch(/^\d+\.\d+\.\d+$/);
    for (const v of Object.values(g.verbs))
      for (const t of [...v.args, ...(v.variadic ? [v.variadic] : [])]) expect(Object.keys(g.types)).toContain(t);
  });

  it('expands every verb with sample arguments into exactly the argv its TS template builds', () => {
    const g = committed();
    expect(Object.keys(g.verbs).sort()).toEqual(Object.keys(VERBS).sort());
    for (const [name, def] of Object.entries(VERBS)) {
      for (const args of [...def.samples, ...(MORE[name] ? [MORE[name]] : [])]) {
        const spec = def.build(args);
        expect(spec.agent, name).toEqual({ verb: name, args });
        expect(expandRun(g, name, args), `${name} ${args.join(' ')}`).toEqual(spec.argv);
      }
    }
  });

  it('gives sample arguments the agent accepts: each matches its type', () => {
    for (const [name, def] of Object.entries(VERBS))
      for (const args of def.samples)
        args.forEach((a, i) => {
          const t: ArgType | null = def.args[i] ?? def.variadic;
          expect(t, `${name} argument ${i}`).not.toBeNull();
          expect(a, `${name} argument ${i}`).toMatch(new RegExp(ARG_TYPES[t ?? 'int']));
        });
  });

  it('marks exactly signal, persistence and reset destructive, and only they take the incident and approval', () => {
    const g = buildGrammar();
    expect(
      Object.entries(g.verbs)
        .filter(([, v]) => v.destructive)
        .map(([k]) => k)
        .sort(),
    ).toEqual([...DESTRUCTIVE_VERBS].sort());
    for (const [name, v] of Object.entries(g.verbs)) {
      const takesIds = v.args.includes('incident') && v.args.includes('approval');
      expect(takesIds, name).toBe(v.destructive);
    }
  });

  it('never passes the incident or approval id to the program a destructive verb runs, as a word of its argv', () => {
    const g = buildGrammar();
    for (const name of DESTRUCTIVE_VERBS) {
      const v = g.verbs[name];
      const def = VERBS[name];
      if (!v || !def) throw new Error(name);
      for (const args of def.samples) {
        const argv = expandRun(g, name, args);
        const inc = args[v.args.indexOf('incident')] ?? '';
        const apr = args[v.args.indexOf('approval')] ?? '';
        expect(argv.includes(inc), name).toBe(false);
        expect(argv.includes(apr), name).toBe(false);
      }
    }
  });
});

describe('a destructive spec', () => {
  it('always carries the incident and approval ids it was built with', () => {
    for (const name of DESTRUCTIVE_VERBS) {
      const def = VERBS[name];
      if (!def) throw new Error(name);
      for (const args of def.samples) {
        const spec = def.build(args);
        const inc = args[def.args.indexOf('incident')];
        const apr = args[def.args.indexOf('approval')];
        expect(spec.agent?.args[def.args.indexOf('incident')], name).toBe(inc);
        expect(spec.agent?.args[def.args.indexOf('approval')], name).toBe(apr);
      }
    }
  });

  it('is refused before it is sent when it has no envelopes, and a read needs none', () => {
    for (const name of DESTRUCTIVE_VERBS) {
      const spec = VERBS[name]?.build(VERBS[name]?.samples[0] ?? []);
      if (!spec) throw new Error(name);
      expect(() => withEnvelopes(spec, null), name).toThrow(/nothing was run/);
    }
    const read = VERBS.gpus?.build([]);
    if (!read) throw new Error('gpus');
    expect(withEnvelopes(read, null)).toBe(read);
  });

  it('writes the request, the decisions and the plan on stdin, base64 bodies and the signatures as they are', () => {
    const spec = VERBS.reset?.build(VERBS.reset.samples[1] ?? []);
    if (!spec) throw new Error('reset');
    const request = { body: 'gpu-medic request v1\nincident=inc_x\n', sig: `${'A'.repeat(86)}==` };
    const plan = { body: 'gpu-medic plan v1\n{"incidentId":"inc_x"}', sig: `${'B'.repeat(86)}==` };
    const out = withEnvelopes(spec, { request, decisions: [], plan });
    const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');
    expect(out.stdin).toBe(`request ${b64(request.body)} ${request.sig}\nplan ${b64(plan.body)} ${plan.sig}\n`);
  });

  it('is refused when its decisions do not fit its approval: tier 2 needs a decision, tier 1 none', () => {
    const env = { body: 'x', sig: 'y' };
    const tier2 = VERBS.reset?.build(VERBS.reset.samples[0] ?? []); // approval apr_…
    const tier1 = VERBS.reset?.build(VERBS.reset.samples[1] ?? []); // approval none
    if (!tier1 || !tier2) throw new Error('reset');
    expect(() => withEnvelopes(tier2, { request: env, decisions: [], plan: env })).toThrow(/has no signed decision/);
    expect(() => withEnvelopes(tier1, { request: env, decisions: [env], plan: env })).toThrow(
      /carries signed decisions/,
    );
    expect(withEnvelopes(tier2, { request: env, decisions: [env], plan: env }).stdin).toMatch(
      /^request .*\ndecision .*\nplan /,
    );
  });
});
