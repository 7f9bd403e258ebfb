/**
 * Every shell and Perl text the agent package ships is checked by the tools an admin would use:
 * shellcheck for the sh front, install.sh and every `sh -c` script in grammar.json; `perl -c` with
 * warnings made fatal for the core and every `perl -e` script. Where shellcheck is missing the check
 * is skipped, but not under CI=true (scripts/setup.sh --ci installs it): there it fails.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { AGENT_DIR } from './agent-host.ts';

const grammar = JSON.parse(readFileSync(join(AGENT_DIR, 'grammar.json'), 'utf8')) as {
  verbs: Record<string, { run: unknown[] }>;
};

/** The scripts grammar.json names (agent/scripts/<verb>.sh, .pl): each verb and the file's text. */
function scripts(interpreter: 'sh' | 'perl'): Array<[string, string]> {
  const ext = interpreter === 'sh' ? '.sh' : '.pl';
  return Object.entries(grammar.verbs)
    .flatMap(([verb, d]) => {
      const w = d.run[2];
      return d.run[0] === interpreter && typeof w === 'object' && w !== null && 'script' in w
        ? [
            [verb, readFileSync(join(AGENT_DIR, 'scripts', (w as { script: string }).script), 'utf8')] as [
              string,
              string,
            ],
          ]
        : [];
    })
    .filter(([verb]) => existsSync(join(AGENT_DIR, 'scripts', `${verb}${ext}`)));
}

const hasShellcheck = spawnSync('shellcheck', ['--version']).status === 0;
const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-static-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** shellcheck's findings for `file` (its shebang says sh or bash), or '' when there are none. */
function shellcheck(file: string): string {
  const r = spawnSync('shellcheck', ['-f', 'gcc', file], { encoding: 'utf8' });
  return r.status === 0 ? '' : `${r.stdout}${r.stderr}`;
}

function perlCheck(file: string): string {
  const r = spawnSync('perl', ['-Mwarnings=FATAL,all', '-c', file], { encoding: 'utf8' });
  return r.status === 0 ? '' : r.stderr;
}

describe('the agent package passes shellcheck and perl -c', () => {
  it('shellcheck is here, or this is not CI', () => {
    expect(hasShellcheck || process.env.CI !== 'true').toBe(true);
  });

  it.skipIf(!hasShellcheck)('the front, install.sh and the test host script: no finding', () => {
    const files = ['gpu-medic-agent', 'install.sh', join('test', 'host-ns.sh')].map((f) => join(AGENT_DIR, f));
    expect(files.map((f) => [f, shellcheck(f)]).filter(([, out]) => out !== '')).toEqual([]);
  });

  it.skipIf(!hasShellcheck)("grammar.json's sh -c scripts: each found, each without a finding", () => {
    const found = scripts('sh');
    expect(found.map(([v]) => v)).toEqual(expect.arrayContaining(['signal', 'procs', 'kernel-log', 'stuck']));
    const bad = found.flatMap(([verb, text]) => {
      const f = join(dir, `${verb}.sh`);
      writeFileSync(f, `#!/bin/sh\n${text}\n`);
      const out = shellcheck(f);
      return out === '' ? [] : [[verb, out]];
    });
    expect(bad).toEqual([]);
  });

  it('the Perl core and the perl -e scripts compile with warnings made fatal', () => {
    expect(perlCheck(join(AGENT_DIR, 'gpu-medic-agent.pl'))).toBe('');
    const found = scripts('perl');
    expect(found.length).toBeGreaterThan(0);
    const bad = found.flatMap(([verb, text]) => {
      const f = join(dir, `${verb}.pl`);
      writeFileSync(f, `${text}\n`);
      const out = perlCheck(f);
      return out === '' ? [] : [[verb, out]];
    });
    expect(bad).toEqual([]);
  });

  it('a broken script is caught: the check can fail', () => {
    const f = join(dir, 'broken.sh');
    writeFileSync(f, '#!/bin/sh\necho $1\nif [ x = y ]; then\n');
    if (hasShellcheck) expect(shellcheck(f)).not.toBe('');
    const p = join(dir, 'broken.pl');
    writeFileSync(p, 'my $x = 1; my $x = 2;\n');
    expect(perlCheck(p)).toMatch(/masks earlier declaration/);
  });
});
