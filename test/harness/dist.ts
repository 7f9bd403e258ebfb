/**
 * The compiled entry point (`npm run build`: tsc -p tsconfig.build.json into dist/) and children
 * that run it. A test that starts gpu-medic itself as a process starts `node dist/src/main.js`,
 * as the image, the systemd units and `npm start` do: about 0.8 CPU-seconds a start against about 2
 * through tsx, which adds up over the suite's hundreds of children on two cores.
 *
 * dist/ is shared by every test file: tsc runs under a lock (several vitest workers ask at once)
 * and only when the sources differ from those of the last good build, recorded in a stamp file
 * written after tsc succeeded. An up-to-date dist/ costs a stat of each source file (tsc's own
 * incremental check took 9 CPU-seconds).
 */
import { execFile, spawn, type ChildProcess, type ExecFileOptions, type SpawnOptions } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** What the image's ENTRYPOINT, the systemd units and `npm start` run. */
export const MAIN_JS = join(ROOT, 'dist/src/main.js');
const LOCK = join(ROOT, '.test-results', 'build.lock');
const STAMP = join(ROOT, 'dist', '.sources-stamp');
/** What tsconfig.build.json compiles, and what decides how. */
const SOURCE_DIRS = ['src', 'commands', 'workers'];
const SOURCE_FILES = ['tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json'];

/** Every input's path, size and mtime, hashed: a changed, added or removed file changes it. */
function sourcesStamp(): string {
  const hash = createHash('sha256');
  const add = (rel: string): void => {
    const st = statSync(join(ROOT, rel));
    hash.update(`${rel}\0${st.size}\0${st.mtimeMs}\n`);
  };
  const walk = (rel: string): void => {
    for (const e of readdirSync(join(ROOT, rel), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = `${rel}/${e.name}`;
      if (e.isDirectory()) walk(p);
      else add(p);
    }
  };
  for (const d of SOURCE_DIRS) walk(d);
  for (const f of SOURCE_FILES) if (existsSync(join(ROOT, f))) add(f);
  hash.update(process.version);
  return hash.digest('hex');
}

function upToDate(stamp: string): boolean {
  try {
    return existsSync(MAIN_JS) && readFileSync(STAMP, 'utf8') === stamp;
  } catch {
    return false;
  }
}

/** dist/ built from the sources as they are now; resolves to MAIN_JS. */
export async function buildDist(): Promise<string> {
  if (upToDate(sourcesStamp())) return MAIN_JS;
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
    // Taken before tsc reads anything: a file edited while it runs makes the next call build again.
    const stamp = sourcesStamp();
    // Another file's build may have finished while this one waited for the lock.
    if (upToDate(stamp)) return MAIN_JS;
    rmSync(STAMP, { force: true });
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    await run(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: ROOT, timeout: 300_000 }).catch(
      (e: unknown) => {
        // tsc reports type errors on stdout, which execFile's message leaves out.
        const out = (e as { stdout?: string }).stdout ?? '';
        throw new Error(`tsc -p tsconfig.build.json failed; dist/ is not up to date:\n${out}${String(e)}`);
      },
    );
    // As `npm run build` does: main.js is the `gpu-medic` command (package.json bin).
    chmodSync(MAIN_JS, 0o755);
    writeFileSync(`${STAMP}.tmp`, stamp);
    renameSync(`${STAMP}.tmp`, STAMP);
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
  return MAIN_JS;
}

/** `node dist/src/main.js ...args`, dist/ built first if the sources changed. */
export async function spawnMain(args: readonly string[], options: SpawnOptions): Promise<ChildProcess> {
  const main = await buildDist();
  return spawn(process.execPath, [main, ...args], options);
}

/** `node dist/src/main.js ...args` to its exit; rejects as execFile does (a non-zero code, with stdout and stderr). */
export async function execMain(
  args: readonly string[],
  options: ExecFileOptions,
): Promise<{ stdout: string; stderr: string }> {
  const main = await buildDist();
  const r = await run(process.execPath, [main, ...args], { ...options, encoding: 'utf8' });
  return { stdout: r.stdout, stderr: r.stderr };
}
