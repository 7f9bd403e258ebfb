import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Repo root, found from this file so CI can clone anywhere with `shared/` beside the repo. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const fixturesDir = path.resolve(repoRoot, '..', 'shared', 'fixtures');

export function fixturePath(relative: string): string {
  return path.join(fixturesDir, relative);
}

export function readFixture(relative: string): string {
  return readFileSync(fixturePath(relative), 'utf8');
}
