import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const f of readdirSync(join(ROOT, dir))) {
    const p = join(dir, f);
    if (statSync(join(ROOT, p)).isDirectory()) out.push(...tsFiles(p));
    else if (p.endsWith('.ts')) out.push(p);
  }
  return out;
}

function importsOf(file: string): string[] {
  const src = readFileSync(join(ROOT, file), 'utf8');
  return [...src.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'([^']+)'/g)].map((m) => m[1] ?? '');
}

const FILES = ['src', 'commands', 'workers'].flatMap(tsFiles);

function localDeps(file: string): string[] {
  return importsOf(file)
    .filter((s) => s.startsWith('.'))
    .map((s) => relative(ROOT, resolve(ROOT, dirname(file), s)));
}

describe('architecture', () => {
  it('has no import cycles in src/, commands/ and workers/', () => {
    const state = new Map<string, 1 | 2>();
    const cycles: string[] = [];
    const visit = (f: string, stack: string[]): void => {
      state.set(f, 1);
      stack.push(f);
      for (const d of localDeps(f)) {
        if (state.get(d) === 1) cycles.push([...stack.slice(stack.indexOf(d)), d].join(' -> '));
        else if (!state.has(d)) visit(d, stack);
      }
      stack.pop();
      state.set(f, 2);
    };
    for (const f of FILES) if (!state.has(f)) visit(f, []);
    expect(FILES.length).toBeGreaterThan(50);
    expect(cycles).toEqual([]);
  });

  it('keeps the pure core free of I/O: parse, diagnose, plan, policy and render import no I/O module', () => {
    const pure = FILES.filter(
      (f) =>
        (f.startsWith('src/gpu/') && f !== 'src/gpu/parse/index.ts') ||
        [
          '../../src/plan/unstick-plan.ts',
          'src/agent-grammar/templates/snapshot-commands.ts',
          'src/agent-grammar/templates/machine-read.ts',
          'src/agent-grammar/templates/unstick-commands.ts',
          'src/approval/approval-policy.ts',
          'src/approval/policy.ts',
        ].includes(f) ||
        f.startsWith('src/render/') ||
        f.startsWith('src/watchdog/') ||
        f.startsWith('src/doctor/') ||
        (f.startsWith('src/agent-grammar/') && f !== 'src/agent-grammar/generate.ts') ||
        f === 'src/incident/timeline.ts' ||
        f === 'src/incident/incident-summary.ts' ||
        f === 'src/health/report.ts',
    );
    expect(pure.length).toBeGreaterThan(20);
    const io =
      /^(ioredis|bullmq|ssh2|pino|node:(fs|net|http|https|child_process|dgram|tls)|fs|net|http|child_process)(\/|$)/;
    const ioModules =
      /(src\/ssh\/(executor|connection-pool|channel-run)|src\/incident\/log|src\/incident\/target-lock|src\/approval\/approval-store|src\/step-guard\/|src\/queue\/|src\/http\/|src\/bot|src\/worker-process|src\/slack\/(app|outbox|poster|replay-guard))/;
    const offenders: string[] = [];
    for (const f of pure) {
      for (const s of importsOf(f)) {
        // Type-only imports of Slack block types are fine; runtime imports of I/O are not.
        if (io.test(s)) offenders.push(`${f} imports ${s}`);
        if (s.startsWith('.') && ioModules.test(relative(ROOT, resolve(ROOT, dirname(f), s))))
          offenders.push(`${f} imports ${s}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
