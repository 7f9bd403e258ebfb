/**
 * docs/architecture.md's two one-page maps, the watchdog and the kill path, stay true: every file path written
 * in them exists, so a rename that forgets the map fails here. Each map is a numbered list, one file a line, and
 * the kill path runs from the Approve click's handler to the host agent's core.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const DOC = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');

/** The text of a `## ` section, up to the next one. */
function section(heading: string): string {
  const start = DOC.indexOf(`\n${heading}\n`);
  if (start < 0) return '';
  const end = DOC.indexOf('\n## ', start + heading.length + 2);
  return DOC.slice(start, end < 0 ? undefined : end);
}

/** Every path in a section that starts at a top-level folder of the repository, in order, written or not in backticks. */
const pathsIn = (text: string): string[] =>
  [...text.matchAll(/\b(?:src|workers|commands|agent|bench|test|docs|scripts|deploy)\/[\w./-]*\w/g)].map((m) => m[0]);

/** The file each numbered line of a section's list starts with (`1. \`path\`: …`). */
const stepsIn = (text: string): string[] => [...text.matchAll(/^\d+\. `([^`]+)`/gm)].map((m) => m[1] ?? '');

const MAPS = ['## The watchdog, file by file', '## The kill path, file by file'];

describe("docs/architecture.md's maps", () => {
  for (const heading of MAPS) {
    const text = section(heading);

    it(`${heading.slice(3)}: is there, one file a numbered line`, () => {
      expect(text, heading).not.toBe('');
      expect(stepsIn(text).length).toBeGreaterThan(10);
    });

    it(`${heading.slice(3)}: every file path written in it exists`, () => {
      const paths = pathsIn(text);
      expect(paths.length).toBeGreaterThan(10);
      expect(paths.filter((p) => !existsSync(join(ROOT, p)))).toEqual([]);
    });
  }

  it('the kill path runs from the Approve click to the host agent', () => {
    const steps = stepsIn(section('## The kill path, file by file'));
    expect(steps[0]).toBe('commands/approval-actions.ts');
    expect(steps.at(-1)).toBe('agent/gpu-medic-agent.pl');
  });
});
