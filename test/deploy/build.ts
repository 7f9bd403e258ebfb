/**
 * The production build (`npm run build`: tsc -p tsconfig.build.json into dist/), made once at a
 * time: test files that run the compiled entry point share dist/ and take a lock around tsc,
 * which is incremental, so an up-to-date dist/ costs only the check.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** What the image's ENTRYPOINT, the systemd units and `npm start` run. */
export const MAIN_JS = join(ROOT, 'dist/src/main.js');
const LOCK = join(ROOT, '.test-results', 'build.lock');

export async function buildDist(): Promise<string> {
  mkdirSync(join(ROOT, '.test-results'), { recursive: true });
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch {
      // A lock older than ten minutes belongs to a run that died.
      try {
        if (Date.now() - statSync(LOCK).mtimeMs > 600_000) rmSync(LOCK, { recursive: true, force: true });
      } catch {
        /* gone meanwhile */
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  try {
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    await run(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: ROOT, timeout: 300_000 });
    // As `npm run build` does: main.js is the `gpu-medic` command (package.json bin).
    chmodSync(MAIN_JS, 0o755);
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
  return MAIN_JS;
}
