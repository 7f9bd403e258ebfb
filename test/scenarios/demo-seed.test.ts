/**
 * The README's picture (test/scenarios/demo-seed-incident.yaml, screenshot.ts) is a scenario like any
 * other: played end to end here, so what the picture shows is what gpu-medic does. The seed's host
 * at 98 % RAM alerts once, on the host (not again for its container, which reads the same RAM),
 * with the seed's root cause; the memory no process holds alerts on its GPU; the status thread says
 * why; nothing is signalled.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { expectRunClean, file } from './report-helpers.ts';
import { runScenario, type Report } from './run-scenario.ts';

describe('the demo of the seed incident (the README picture)', () => {
  let r: Report;
  beforeAll(async () => {
    r = await runScenario(file('demo-seed-incident'));
  }, 180_000);

  it('runs cleanly and meets its expect block', () => expectRunClean(r));

  it("one RAM alert for the host, none for its container, and it says the seed's cause", () => {
    const ram = r.alerts.filter((a) => a.kind === 'ram_high');
    expect(ram.map((a) => a.machine)).toEqual(['kpro5']);
    expect(ram[0]?.messages[0]?.text).toMatch(
      /Why: 8 ranks × 300 GB host cache .*= 2\.4 TB requested on a 449 GiB host/,
    );
  });

  it('the watchdog and the status read signalled nothing', () => {
    expect(r.signals).toEqual([]);
  });
});
