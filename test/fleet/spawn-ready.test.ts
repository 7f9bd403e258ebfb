import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { spawnReport } from '../harness/fleet/spawn-ready.ts';

const dir = mkdtempSync(join(tmpdir(), 'spawn-report-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

describe('spawnReport', () => {
  // container-sshd runs under lxc-attach and SIGKILLs itself once its sshd runs. Whatever the attach
  // tool does with the helper's stdout as it passes the kill on, the report must still be read.
  it('reads the report of a helper that SIGKILLs itself with its stdout gone', async () => {
    const reports = await Promise.all(
      Array.from({ length: 20 }, (_, i) => {
        const reportPath = join(dir, `report-${i}.json`);
        const script = `exec >/dev/null; printf '{"n":${i}}' > "$1.tmp" && mv "$1.tmp" "$1"; kill -9 $$`;
        return spawnReport('sh', ['-c', script, 'sh', reportPath], {
          env,
          reportPath,
          stderrPath: join(dir, `err-${i}.log`),
        });
      }),
    );
    expect(reports).toEqual(Array.from({ length: 20 }, (_, i) => `{"n":${i}}`));
  });

  it('refuses a helper that exits without a report, with how it exited and its stderr', async () => {
    const reportPath = join(dir, 'none.json');
    await expect(
      spawnReport('sh', ['-c', 'echo "sshd: no hostkeys available" >&2; exit 3'], {
        env,
        reportPath,
        stderrPath: join(dir, 'err-none.log'),
      }),
    ).rejects.toThrow(/exited \(code 3, signal null\) without its report[\s\S]*no hostkeys available/);
    expect(existsSync(reportPath)).toBe(false);
  });

  it('does not take a report left by an earlier start for this one', async () => {
    const reportPath = join(dir, 'stale.json');
    await spawnReport('sh', ['-c', `printf old > "$1"`, 'sh', reportPath], {
      env,
      reportPath,
      stderrPath: join(dir, 'err-stale.log'),
    });
    await expect(
      spawnReport('sh', ['-c', 'exit 0'], { env, reportPath, stderrPath: join(dir, 'err-stale.log') }),
    ).rejects.toThrow(/without its report/);
  });
});
