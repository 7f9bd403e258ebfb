import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixturePath, fixturesDir } from './fixture-files.ts';

interface Row {
  file: string;
  bytes: number;
  sha16: string;
  finalNewline: boolean;
}

function sourcesTable(): Row[] {
  const md = readFileSync(fixturePath('SOURCES.md'), 'utf8');
  return md
    .split('\n')
    .filter((l) => /^\| (fuser|nvidia-smi|proxmox)\//.test(l))
    .map((l) => {
      const cells = l.split(' | ');
      const last = cells.slice(-3);
      return {
        file: (cells[0] ?? '').replace(/^\| /, ''),
        bytes: Number(last[0]),
        sha16: last[1] ?? '',
        finalNewline: (last[2] ?? '').startsWith('yes'),
      };
    });
}

function allFixtureFiles(): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(path.join(fixturesDir, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)],
    );
  return [...walk('fuser'), ...walk('nvidia-smi'), ...walk('proxmox')].sort();
}

describe('fixtures are byte-exact copies (SOURCES.md sizes and hashes)', () => {
  const rows = sourcesTable();

  it('SOURCES.md lists every fixture file and nothing else', () => {
    expect(rows.map((r) => r.file).sort()).toEqual(allFixtureFiles());
    expect(rows.length).toBe(39);
  });

  it.each(rows.map((r) => [r.file, r] as const))('%s', (_file, row) => {
    const bytes = readFileSync(fixturePath(row.file));
    expect(bytes.length).toBe(row.bytes);
    expect(createHash('sha256').update(bytes).digest('hex').slice(0, 16)).toBe(row.sha16);
    expect(bytes.at(-1) === 0x0a).toBe(row.finalNewline);
  });
});
