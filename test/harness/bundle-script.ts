/**
 * A TypeScript program a test starts as a child, bundled by esbuild to one plain .mjs: node
 * starts it without loading tsx (about 1.5 CPU-seconds a start on this machine). Packages stay
 * imports, so the file lives under the repository (.test-results/bundles/), where node_modules
 * resolves. Named by its content: concurrent test files write the same bytes, each through a
 * rename, so none ever runs half a file.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { build } from 'esbuild';
import { ROOT } from './dist.ts';

const OUT = join(ROOT, '.test-results', 'bundles');

/** The path of `entry` (a .ts file) bundled to .mjs, as of its sources now. */
export async function bundleScript(entry: string): Promise<string> {
  const r = await build({
    entryPoints: [entry],
    bundle: true,
    packages: 'external',
    platform: 'node',
    format: 'esm',
    target: 'node20',
    write: false,
    logLevel: 'silent',
  });
  const code = r.outputFiles[0]?.contents;
  if (!code) throw new Error(`esbuild gave no output for ${entry}`);
  const hash = createHash('sha256').update(code).digest('hex').slice(0, 16);
  const file = join(OUT, `${basename(entry, '.ts')}-${hash}.mjs`);
  if (!existsSync(file)) {
    mkdirSync(OUT, { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, code);
    renameSync(tmp, file);
  }
  return file;
}
