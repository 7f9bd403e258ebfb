/**
 * One production CLI, so every documented command works on a real install. `gpu-medic` is package.json's bin,
 * the compiled dist/src/main.js, and runs from an install pruned of dev dependencies (no tsx, no TypeScript):
 * dist/ and package.json copied to a temp dir with only the production dependencies (copied, not linked, so
 * nothing resolves back into this checkout's dev dependencies), the command put on PATH by a symlink as
 * docs/deploy.md does.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { filledExampleInventory } from '../harness/example-inventory.ts';
import { buildDist, ROOT } from './build.ts';

const run = promisify(execFile);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

describe('gpu-medic, the production command, from a pruned install', () => {
  let dir: string;
  let bin: string;
  beforeAll(async () => {
    await buildDist();
    dir = mkdtempSync(join(tmpdir(), 'gpu-medic-pruned-'));
    const app = join(dir, 'opt', 'gpu-medic');
    mkdirSync(app, { recursive: true });
    cpSync(join(ROOT, 'package.json'), join(app, 'package.json'));
    cpSync(join(ROOT, 'dist'), join(app, 'dist'), { recursive: true });
    // What `npm prune --omit=dev` leaves: the production dependency tree only.
    const { stdout } = await run('npm', ['ls', '--omit=dev', '--all', '--parseable'], {
      cwd: ROOT,
      maxBuffer: 16 * 1024 * 1024,
    }).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? '' }));
    const root = ROOT.replace(/\/$/, '');
    for (const p of stdout.split('\n').filter((l) => l.startsWith(`${root}/node_modules/`)))
      cpSync(p, join(app, relative(root, p)), { recursive: true, dereference: true });
    bin = join(dir, 'bin', 'gpu-medic');
    mkdirSync(join(dir, 'bin'));
    symlinkSync(join(app, 'dist', 'src', 'main.js'), bin);
  }, 300_000);
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const gpuMedic = async (
    args: string[],
    env: Record<string, string> = {},
  ): Promise<{ code: number; out: string; err: string }> => {
    try {
      const r = await run(bin, args, {
        cwd: dir,
        env: { PATH: `${join(dir, 'bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`, HOME: dir, ...env },
        timeout: 60_000,
      });
      return { code: 0, out: r.stdout, err: r.stderr };
    } catch (e) {
      const x = e as { code?: number; stdout?: string; stderr?: string };
      return { code: typeof x.code === 'number' ? x.code : -1, out: x.stdout ?? '', err: x.stderr ?? '' };
    }
  };

  it('package.json names it: bin gpu-medic is the compiled main.js', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { bin?: Record<string, string> };
    expect(pkg.bin).toEqual({ 'gpu-medic': 'dist/src/main.js' });
    expect(readFileSync(join(ROOT, 'dist/src/main.js'), 'utf8').startsWith('#!/usr/bin/env node')).toBe(true);
  });

  it('the pruned install holds no dev dependency', () => {
    for (const dev of ['tsx', 'typescript', 'vitest', '@biomejs/biome'])
      expect(existsSync(join(dir, 'opt', 'gpu-medic', 'node_modules', dev)), dev).toBe(false);
    expect(existsSync(join(dir, 'opt', 'gpu-medic', 'node_modules', '@slack', 'bolt'))).toBe(true);
  });

  it('without arguments: a usage line that names gpu-medic and each documented subcommand', async () => {
    const r = await gpuMedic([]);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^usage: gpu-medic /);
    for (const s of ['config check', 'doctor', 'incidents', 'incident ID [--json|--markdown]', 'health'])
      expect(r.err).toContain(s);
  });

  it('config check worker passes on a filled-in example inventory', async () => {
    const r = await gpuMedic(['config', 'check', 'worker'], { GPU_MEDIC_INVENTORY: filledExampleInventory() });
    expect(r.err).toBe('');
    expect(r.out).toMatch(/ok\. 3 machines/);
    expect(r.code).toBe(0);
  });

  it('incidents and incident <id> --markdown read Redis', async () => {
    const env = { REDIS_URL, GPU_MEDIC_PREFIX: `tcli${process.pid}`, GPU_MEDIC_INVENTORY: filledExampleInventory() };
    const list = await gpuMedic(['incidents'], env);
    expect(list.err).toBe('');
    expect(list.code).toBe(0);
    const one = await gpuMedic(['incident', 'inc_20261201_000000_nosuch01', '--markdown'], env);
    expect(one.code).not.toBe(0);
    expect(one.err).toMatch(/inc_20261201_000000_nosuch01/);
  });

  it('health and doctor load and answer in words', async () => {
    const h = await gpuMedic(['health', 'worker'], { GPU_MEDIC_HEALTH_FILE: join(dir, 'none.json') });
    expect(h.code).not.toBe(0);
    expect(`${h.out}${h.err}`).toMatch(/no heartbeat at /);
    const d = await gpuMedic(['doctor', 'nosuch'], { GPU_MEDIC_INVENTORY: filledExampleInventory() });
    expect(d.code).not.toBe(0);
    expect(`${d.out}${d.err}`).toMatch(/nosuch/);
  });
});
