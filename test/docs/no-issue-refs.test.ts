/**
 * No comment in the code or its tests sends the reader to an issue tracker they cannot open: a comment
 * says why, in its own words. TypeScript comments are found by the compiler's own scanner (so a string
 * that looks like a comment is not one); in Perl and shell, what follows a `#` that starts a word.
 * A link to another project's issue (`github.com/owner/repo/issues/N`, `owner/repo #N`) is not matched.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The folders of code and tests; fixtures are verbatim copies of others' outputs and are not read. */
const FOLDERS = ['src', 'workers', 'commands', 'bench', 'scripts', 'agent', 'test'];
const SKIP = new Set(['node_modules', 'dist', 'fixtures']);

/** The word "issue(s)" then a number, with or without `#` or a dash: a tracker this repository does not ship. */
const CITES_ISSUE = /\bissues?[\s-]*#?\d+/i;

function filesUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory()) return SKIP.has(e.name) ? [] : filesUnder(p);
    return /\.(ts|pl|sh)$/.test(e.name) || (dir === 'agent' && e.name === 'gpu-medic-agent') ? [p] : [];
  });
}

/** Every comment of a TypeScript file, with the line it starts on (1-based). */
function tsComments(text: string): Array<{ line: number; text: string }> {
  const source = ts.createSourceFile('x.ts', text, ts.ScriptTarget.Latest, true);
  const seen = new Set<number>();
  const out: Array<{ line: number; text: string }> = [];
  const take = (pos: number, end: number) => {
    if (seen.has(pos)) return;
    seen.add(pos);
    out.push({ line: source.getLineAndCharacterOfPosition(pos).line + 1, text: text.slice(pos, end) });
  };
  const visit = (node: ts.Node) => {
    ts.forEachLeadingCommentRange(text, node.pos, take);
    ts.forEachTrailingCommentRange(text, node.end, take);
    for (const child of node.getChildren(source)) visit(child);
  };
  visit(source);
  return out.sort((a, b) => a.line - b.line);
}

/** The comment part of each line of a Perl or shell file: from a `#` at the start of a word. */
function hashComments(text: string): Array<{ line: number; text: string }> {
  return text.split('\n').flatMap((l, i) => {
    const m = /(?:^|\s)(#.*)$/.exec(l);
    return m?.[1] ? [{ line: i + 1, text: m[1] }] : [];
  });
}

function citations(path: string): string[] {
  const text = readFileSync(join(ROOT, path), 'utf8');
  if (!CITES_ISSUE.test(text)) return [];
  const comments = path.endsWith('.ts') ? tsComments(text) : hashComments(text);
  return comments.flatMap((c) =>
    c.text.split('\n').flatMap((l, i) => (CITES_ISSUE.test(l) ? [`${path}:${c.line + i}: ${l.trim()}`] : [])),
  );
}

describe('comments say why, not which issue', () => {
  const files = FOLDERS.flatMap(filesUnder);

  it('finds the comments it reads', () => {
    expect(files.length).toBeGreaterThan(300);
    const found = tsComments('const a = "// not a comment"; // one\n/* two */ f(/* three */ `x${1 /* four */}`);');
    expect(found.map((c) => c.text)).toEqual(['// one', '/* two */', '/* three */', '/* four */']);
  });

  it('no comment in the code or its tests cites an issue number', () => {
    expect(files.flatMap(citations)).toEqual([]);
  });
});
