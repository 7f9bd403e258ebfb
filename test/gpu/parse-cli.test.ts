import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixturePath, repoRoot } from './fixture-files.ts';

function cli(args: string[], input?: string | Buffer): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('npm', ['run', '-s', 'cli', '--', 'parse', ...args], {
    cwd: repoRoot,
    input,
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('npm run cli -- parse (real process)', () => {
  it('--json FILE prints exactly one JSON object with the contract keys', () => {
    const r = cli(['--json', fixturePath('nvidia-smi/table/h200_590.48.01_load_3procs.txt')]);
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    const o = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(Object.keys(o)).toEqual([
      'source',
      'driverVersion',
      'cudaVersion',
      'gpus',
      'migDevices',
      'processes',
      'holders',
      'kernelMounts',
      'error',
    ]);
    expect(o.gpus).toEqual([
      {
        index: 0,
        name: 'NVIDIA H200',
        busId: '00000000:83:00.0',
        uuid: null,
        memoryUsedMiB: 32362,
        memoryTotalMiB: 143771,
        utilizationPct: 100,
      },
    ]);
    expect((o.processes as Array<{ pid: number }>).map((p) => p.pid)).toEqual([10291, 10293, 10309]);
  });

  it('stdin "-", plain text, garbage and binary refusals in one line without a stack trace', () => {
    const plain = cli(['-'], 'No devices were found\n');
    expect(plain.status).toBe(0);
    expect(plain.stdout).toContain('ERROR no_devices');
    const garbage = cli(['--json', '-'], 'definitely not nvidia-smi\n');
    expect(garbage.status).not.toBe(0);
    expect(garbage.stdout).toBe('');
    expect(garbage.stderr.trim().split('\n')).toHaveLength(1);
    const dir = mkdtempSync(path.join(tmpdir(), 'parse-cli-'));
    const big = path.join(dir, 'big.txt');
    writeFileSync(big, Buffer.alloc(9 * 1024 * 1024, 0x41));
    const refused = cli(['--json', big]);
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/larger than 8 MiB/);
    const binary = cli(['--json', '-'], Buffer.from([0x2b, 0x2d, 0x00, 0xff, 0xfe]));
    expect(binary.status).not.toBe(0);
    expect(binary.stderr).toMatch(/binary/);
    expect(binary.stderr).not.toMatch(/\bat .*\.ts:\d+/);
  });
});
