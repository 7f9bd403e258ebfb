/**
 * The agent core's parser through agent/test/explain.pl (test-only; it loads the core's own subs):
 * one JSON string per line in, one JSON answer per line out, the argv the core WOULD run, nothing
 * run. The config and grammar are copied into a fresh root-owned dir, as the core requires.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { AGENT_DIR } from './agent-host.ts';

const execFileP = promisify(execFile);

export type Explained =
  | { ok: true; version: 1 }
  | {
      ok: true;
      batch: boolean;
      parts: Array<{ verb: string; argv: string[]; timeoutMs: number; destructive: boolean }>;
    }
  | { ok: false; reason: string };

export async function explain(
  grammarFile: string,
  lines: readonly string[],
  role: 'host' | 'self' = 'host',
): Promise<Explained[]> {
  const dir = await mkdtemp(join(tmpdir(), 'gpu-medic-explain-'));
  try {
    await copyFile(grammarFile, join(dir, 'grammar.json'));
    // The scripts the grammar names, from beside it (the sample grammar has none).
    const scripts = join(dirname(grammarFile), 'scripts');
    if (existsSync(scripts)) await cp(scripts, join(dir, 'scripts'), { recursive: true });
    await writeFile(
      join(dir, 'agent.conf'),
      `path=/usr/sbin:/usr/bin:/sbin:/bin\ngrammar=${join(dir, 'grammar.json')}\naudit_file=${join(dir, 'audit.log')}\nrole=${role}\n`,
      { mode: 0o644 },
    );
    const child = execFileP(
      'perl',
      [join(AGENT_DIR, 'test', 'explain.pl'), join(AGENT_DIR, 'gpu-medic-agent.pl'), join(dir, 'agent.conf')],
      {
        env: { PATH: '/usr/bin:/bin' },
        maxBuffer: 256 * 1024 * 1024,
      },
    );
    child.child.stdin?.end(lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
    const { stdout } = await child;
    const out = stdout
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Explained);
    if (out.length !== lines.length) throw new Error(`explain answered ${out.length} of ${lines.length} lines`);
    return out;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
