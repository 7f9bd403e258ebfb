/**
 * The README's map is true: one line per folder of the code (src/, workers/, commands/ and every
 * folder under them), no line for a folder that is gone; every top-level folder is named; and
 * docs/tests.md has one line per folder of test/.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const read = (p: string) => readFileSync(join(ROOT, p), 'utf8');

/** `dir/` and every folder under it, each as `path/`. */
function foldersUnder(dir: string): string[] {
  const subs = readdirSync(join(ROOT, dir), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .flatMap((e) => foldersUnder(`${dir}/${e.name}`));
  return [`${dir}/`, ...subs];
}

/** The folders a markdown section's table rows name in their first cell (`| \`src/gpu/\` | … |`). */
function tableFolders(markdown: string, heading: string): string[] {
  const start = markdown.indexOf(`\n${heading}\n`);
  expect(start, `${heading} in the document`).toBeGreaterThan(-1);
  const end = markdown.indexOf('\n## ', start + heading.length + 2);
  const section = markdown.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/^\| `([^`]+\/)` +\|/gm)].map((m) => m[1] ?? '');
}

const CODE = ['src', 'workers', 'commands'].flatMap(foldersUnder).sort();
const readme = read('README.md');
const mapped = tableFolders(readme, '## Map');

describe("the README's map", () => {
  it('every folder under src/, workers/ and commands/ has a line in the map', () => {
    expect(CODE.length).toBeGreaterThan(15);
    expect(CODE.filter((f) => !mapped.includes(f))).toEqual([]);
  });

  it('every line of the map names a folder that exists, once', () => {
    expect(mapped.filter((f) => !CODE.includes(f))).toEqual([]);
    expect(mapped.filter((f, i) => mapped.indexOf(f) !== i)).toEqual([]);
  });

  it('every top-level folder is named in the README', () => {
    const top = readdirSync(ROOT, { withFileTypes: true })
      .filter((e) => e.isDirectory() && !e.name.startsWith('.') && !['node_modules', 'dist'].includes(e.name))
      .map((e) => `${e.name}/`);
    expect(top.length).toBeGreaterThan(5);
    expect(top.filter((f) => !readme.includes(`\`${f}\``))).toEqual([]);
  });
});

describe("docs/tests.md's table of test folders", () => {
  const listed = tableFolders(read('docs/tests.md'), '## Where the tests are');
  const folders = readdirSync(join(ROOT, 'test'), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => `test/${e.name}/`);

  it('every folder of test/ has a line, and every line names a folder of test/', () => {
    expect(folders.length).toBeGreaterThan(10);
    expect(folders.filter((f) => !listed.includes(f))).toEqual([]);
    expect(listed.filter((f) => !folders.includes(f))).toEqual([]);
  });
});
