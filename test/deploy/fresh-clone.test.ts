/**
 * A fresh clone carries everything its tests read: cloned into a temporary directory with no
 * ../shared beside it, the tests that read the fixtures pass there. Kept cheap: node_modules is
 * linked from this checkout (what `npm install` would put there) and only the fixture and parse
 * test files run in the clone, not the whole suite. The clone is of the committed HEAD.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from './build.ts';

const run = promisify(execFile);
const FIXTURE_TESTS = [
  'test/gpu/fixture-integrity.test.ts',
  'test/gpu/parse-fixtures.test.ts',
  'test/gpu/parse-cli.test.ts',
  'test/gpu/format-writers.test.ts',
];

// A checkout without git metadata (an unpacked archive) has nothing to clone from.
const isRepo = existsSync(join(ROOT, '.git'));
if (!isRepo) console.warn(`fresh-clone: ${ROOT} is not a git checkout, skipping`);

describe.skipIf(!isRepo)('a fresh clone, without ../shared beside it', () => {
  let dir: string;
  let clone: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gpu-medic-clone-'));
    clone = join(dir, 'gpu-medic');
    await run('git', ['clone', '--quiet', ROOT, clone], { timeout: 120_000 });
    symlinkSync(join(ROOT, 'node_modules'), join(clone, 'node_modules'));
  }, 180_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('has its fixtures and the setup script, and nothing named shared beside it', () => {
    expect(existsSync(join(dirname(clone), 'shared'))).toBe(false);
    expect(existsSync(join(clone, 'test/fixtures/SOURCES.md'))).toBe(true);
    expect(existsSync(join(clone, 'scripts/setup.sh'))).toBe(true);
  });

  it('passes the tests that read the fixtures', async () => {
    const vitest = join(clone, 'node_modules/vitest/vitest.mjs');
    // The clone's own vitest.config.ts writes its JSON summary there.
    const out = join(clone, '.test-results/vitest.json');
    await run(process.execPath, [vitest, 'run', ...FIXTURE_TESTS], {
      cwd: clone,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root' },
      timeout: 300_000,
    });
    const r = JSON.parse(readFileSync(out, 'utf8')) as {
      numFailedTests: number;
      numPassedTests: number;
      testResults: Array<{ name: string; status: string }>;
    };
    expect(r.numFailedTests).toBe(0);
    expect(r.numPassedTests).toBeGreaterThan(20);
    expect(r.testResults.map((t) => relative(clone, t.name)).sort()).toEqual([...FIXTURE_TESTS].sort());
    expect(r.testResults.every((t) => t.status === 'passed')).toBe(true);
    // The inner run has its own 300 s bound; vitest's default 60 s cut it on a loaded machine.
  }, 320_000);
});
