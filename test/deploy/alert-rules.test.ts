/**
 * The example alert rules in docs/deploy.md must work when an operator copies them: a rule file Prometheus
 * loads:
 * `promtool check rules` (Debian's prometheus package; scripts/setup.sh --ci installs it) accepts
 * them, and every metric they name is one gpu-medic serves.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { registerWatchMetrics } from '../../src/metrics/watchdog-metrics.ts';
import { ROOT } from './build.ts';

const run = promisify(execFile);

describe("docs/deploy.md's example alert rules", () => {
  const doc = readFileSync(join(ROOT, 'docs/deploy.md'), 'utf8');
  const block = [...doc.matchAll(/```yaml\n([\s\S]*?)```/g)].map((b) => b[1] ?? '').find((b) => /^groups:/m.test(b));

  it('promtool check rules accepts them', async () => {
    expect(block, 'a ```yaml block starting with groups:').toBeDefined();
    const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-rules-'));
    try {
      const file = join(dir, 'gpu-medic.rules.yml');
      writeFileSync(file, block ?? '');
      const r = await run('promtool', ['check', 'rules', file]);
      expect(r.stdout).toMatch(/SUCCESS: 4 rules found/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('name only metrics gpu-medic serves', async () => {
    const m = createMetrics();
    registerWatchMetrics(
      m.registry,
      async () => ({ lastGood: new Map(), states: [] }),
      [],
      () => 0,
    );
    const served = new Set((await m.registry.getMetricsAsJSON()).map((x) => x.name));
    const named = [...(block ?? '').matchAll(/\b(gpu_medic_[a-z_]+)\b/g)].map((m) => m[1] ?? '');
    expect(named.length).toBeGreaterThan(0);
    for (const n of named) expect(served, n).toContain(n);
  });
});
