/**
 * Builds the fleet's executables once per source version: the fake tools bundled to plain .mjs
 * (node starts them in ~50 ms; tsx would take ~300 ms per call) and the C holder program.
 * Cached under /tmp/gpu-medic-fleet-cache/<hash>/, keyed by the sources' contents.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { build } from 'esbuild';

const execFileP = promisify(execFile);
const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '../../..');
export const CACHE_ROOT = '/tmp/gpu-medic-fleet-cache';

export interface FleetTools {
  dir: string;
  /** Compiled holder.c. */
  holder: string;
  /** Compiled tools/tool-client.c: what bin/nvidia-smi and bin/free run. */
  toolClient: string;
  /** The per-fleet server answering the client (tools/tool-server.ts). */
  toolServer: string;
  /** The served tools as one Node process per call (the reference for the server's answers). */
  standalone: string;
  pct: string;
  lxcInfo: string;
  containerSshd: string;
}

const ENTRIES = {
  'tool-server': 'tools/tool-server.ts',
  standalone: 'tools/standalone.ts',
  pct: 'tools/pct.ts',
  'lxc-info': 'tools/lxc-info.ts',
  'container-sshd': 'tools/container-sshd.ts',
};

async function sourceFiles(): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string) => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) await walk(p);
      else if (/\.(ts|c)$/.test(e.name)) out.push(p);
    }
  };
  await walk(HERE);
  await walk(join(REPO, 'src/gpu'));
  await walk(join(REPO, 'test/harness/nvidia-smi-format'));
  out.push(
    join(REPO, 'test/harness/sshd.ts'),
    join(REPO, 'src/ssh/host-key.ts'),
    join(REPO, 'src/text/shell-quote.ts'),
  );
  return out.sort();
}

let pending: Promise<FleetTools> | null = null;

export function buildFleetTools(): Promise<FleetTools> {
  pending ??= doBuild().catch((e: unknown) => {
    pending = null;
    throw e;
  });
  return pending;
}

async function doBuild(): Promise<FleetTools> {
  const hash = createHash('sha256');
  for (const f of await sourceFiles()) {
    if (!existsSync(f)) continue;
    hash.update(f).update(await readFile(f));
  }
  hash.update(process.version);
  const dir = join(CACHE_ROOT, hash.digest('hex').slice(0, 16));
  const tools: FleetTools = {
    dir,
    holder: join(dir, 'fleet-holder'),
    toolClient: join(dir, 'fleet-tool-client'),
    toolServer: join(dir, 'tool-server.mjs'),
    standalone: join(dir, 'standalone.mjs'),
    pct: join(dir, 'pct.mjs'),
    lxcInfo: join(dir, 'lxc-info.mjs'),
    containerSshd: join(dir, 'container-sshd.mjs'),
  };
  if (existsSync(join(dir, 'complete'))) return tools;

  // Build into a private dir, then rename: concurrent test files never see half a build.
  const tmp = `${dir}.${process.pid}.tmp`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  await Promise.all([
    execFileP('gcc', ['-O2', '-Wall', '-Wextra', '-o', join(tmp, 'fleet-holder'), join(HERE, 'holder.c')]),
    execFileP('gcc', [
      '-O2',
      '-Wall',
      '-Wextra',
      '-o',
      join(tmp, 'fleet-tool-client'),
      join(HERE, 'tools/tool-client.c'),
    ]),
    build({
      entryPoints: Object.fromEntries(Object.entries(ENTRIES).map(([k, v]) => [k, join(HERE, v)])),
      outdir: tmp,
      outExtension: { '.js': '.mjs' },
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      logLevel: 'silent',
    }),
  ]);
  await execFileP('touch', [join(tmp, 'complete')]);
  try {
    await rename(tmp, dir);
  } catch {
    // another process finished the same build first
    await rm(tmp, { recursive: true, force: true });
  }
  return tools;
}
