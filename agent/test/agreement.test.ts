/**
 * The worker and the agent agree on every verb (else a read fails in the field), on the agent's side: for
 * every verb of the worker's table (src/agent-grammar/verbs.ts) and each of its sample calls, the
 * line the worker's executor sends (buildAgentCommand) goes through the Perl core reading the
 * committed agent/grammar.json (agent/test/explain.pl), which would run exactly the argv the worker's own
 * template builds: on the host as it is, in a container behind `pct exec <vmid> -- timeout -k 1 <s>`,
 * and on a container's own agent (role=self) as it is.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { VERBS } from '../../src/agent-grammar/verbs.ts';
import { buildAgentCommand } from '../../src/ssh/agent-line.ts';
import type { Route, SshEndpoint } from '../../src/ssh/types.ts';
import { AGENT_DIR } from './agent-host.ts';
import { explain } from './explain.ts';

const GRAMMAR = join(AGENT_DIR, 'grammar.json');
const ENDPOINT: SshEndpoint = {
  machineId: 'kpro5',
  host: '127.0.0.1',
  port: 22,
  username: 'gpu-medic',
  privateKeyPath: '/nonexistent',
  hostKeyFingerprints: [],
};

function casesFor(where: 'host' | 'ct' | 'self'): Array<{ line: string; argv: string[] }> {
  const route: Route =
    where === 'ct' ? { kind: 'pct', host: ENDPOINT, vmid: 129 } : { kind: 'direct', endpoint: ENDPOINT };
  const out: Array<{ line: string; argv: string[] }> = [];
  for (const def of Object.values(VERBS)) {
    if (!def.on.includes(where)) continue;
    for (const args of def.samples) {
      const spec = def.build(args);
      const secs = String(Math.max(1, Math.ceil(spec.timeoutMs / 1000)));
      out.push({
        line: buildAgentCommand(route, spec).command,
        argv: where === 'ct' ? ['pct', 'exec', '129', '--', 'timeout', '-k', '1', secs, ...spec.argv] : spec.argv,
      });
    }
  }
  return out;
}

describe('the worker and the agent agree on every verb (the worker line through the Perl core and agent/grammar.json)', () => {
  it.each(['host', 'ct', 'self'] as const)('on %s: every sample call would run its template argv', async (where) => {
    const cases = casesFor(where);
    expect(cases.length).toBeGreaterThan(where === 'host' ? 20 : 5);
    const out = await explain(
      GRAMMAR,
      cases.map((c) => c.line),
      where === 'self' ? 'self' : 'host',
    );
    const got = out.map((e) => (e.ok && 'parts' in e ? e.parts.map((p) => p.argv) : ['reason' in e ? e.reason : '?']));
    expect(got).toEqual(cases.map((c) => [c.argv]));
  });

  it("agent/grammar.json has the worker table's verbs and no other", () => {
    const g = JSON.parse(readFileSync(GRAMMAR, 'utf8')) as { verbs: Record<string, unknown> };
    expect(Object.keys(g.verbs).sort()).toEqual(Object.keys(VERBS).sort());
  });
});
