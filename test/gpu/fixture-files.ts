import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Repo root, found from this file the repo carries its fixtures (test/fixtures, verbatim copies of shared/fixtures). */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const fixturesDir = path.resolve(repoRoot, 'test', 'fixtures');

export function fixturePath(relative: string): string {
  return path.join(fixturesDir, relative);
}

export function readFixture(relative: string): string {
  return readFileSync(fixturePath(relative), 'utf8');
}
