import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../harness/stack.ts';

/**
 * What an operator's monitoring needs of the watchdog: the worker's metrics endpoint tells the watchdog's
 * rounds (by site and outcome), their duration, the age of each machine's last good read, and the open alerts
 * by kind (every kind at 0 until one opens), after real rounds over the sshd fleet.
 */
type Series = Array<{ name: string; labels: Record<string, string>; value: number }>;

function parse(text: string): Series {
  const out: Series = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m?.[1] || m[3] === undefined) throw new Error(`unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1] ?? ''] = l[2] ?? '';
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

describe('watchdog metrics on the worker endpoint (real rounds over the sshd fleet)', () => {
  let s: Stack;
  const scrape = async (): Promise<Series> => parse(await (await fetch(String(s.metricsUrl))).text());
  const of = (series: Series, name: string) => series.filter((x) => x.name === name);
  const until = async (ok: (x: Series) => boolean): Promise<Series> => {
    let got: Series = [];
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      got = await scrape();
      if (ok(got)) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    return got;
  };

  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2 }],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      metrics: true,
      env: { GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01', GPU_MEDIC_WATCH_INTERVAL_SEC: '2' },
      // The hung machine's read waits this out once (the inventory's default is 20 s); 10 s is still
      // long enough for a loaded machine's reads (as in test/watchdog/alert-kinds.test.ts).
      tweakInventory: (inv) => {
        inv.defaults.commandTimeoutSec = 10;
      },
    });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('rounds by site and outcome, their duration, each machine last good read age, open alerts by kind', async () => {
    const got = await until((x) =>
      of(x, 'gpu_medic_watch_rounds_total').some((r) => r.labels.outcome === 'ok' && r.value >= 1),
    );
    const rounds = of(got, 'gpu_medic_watch_rounds_total');
    const okRounds = rounds.find((r) => r.labels.outcome === 'ok');
    expect(okRounds?.value).toBeGreaterThanOrEqual(1);
    expect(okRounds?.labels.site).toBeTruthy();
    // The failed outcome exists at 0 from the start, so `increase(...) > 0` fires on the first failure.
    expect(rounds.find((r) => r.labels.outcome === 'failed' && r.labels.site === okRounds?.labels.site)?.value).toBe(0);
    const count = of(got, 'gpu_medic_watch_round_duration_seconds_count').find(
      (r) => r.labels.site === okRounds?.labels.site,
    );
    expect(count?.value).toBeGreaterThanOrEqual(1);
    const sum = of(got, 'gpu_medic_watch_round_duration_seconds_sum')[0]?.value ?? -1;
    expect(sum).toBeGreaterThan(0);
    const age = of(got, 'gpu_medic_watch_last_good_read_age_seconds');
    expect(age.map((a) => a.labels.machine).sort()).toEqual(['ct129', 'kpro5']);
    for (const a of age) {
      expect(a.value).toBeGreaterThanOrEqual(0);
      expect(a.value).toBeLessThan(30);
    }
    const open = of(got, 'gpu_medic_watch_open_alerts');
    expect(open.map((o) => o.labels.kind).sort()).toEqual(
      [
        'ghost_memory',
        'gpu_error',
        'gpus_missing',
        'holder_stuck',
        'nvidia_smi_failing',
        'ram_high',
        'recovery_action',
        'unreachable',
        'xid',
      ].sort(),
    );
    expect(open.every((o) => o.value === 0)).toBe(true);

    // A machine that hangs: its last good read grows old, and its alert is counted by kind once raised.
    await s.fleet.setHang('ct129', true);
    const later = await until((x) => of(x, 'gpu_medic_watch_open_alerts').some((o) => o.value > 0));
    const raised = of(later, 'gpu_medic_watch_open_alerts').filter((o) => o.value > 0);
    expect(raised.length).toBeGreaterThan(0);
    const kproAge = of(later, 'gpu_medic_watch_last_good_read_age_seconds').find((a) => a.labels.machine === 'kpro5');
    const ctAge = of(later, 'gpu_medic_watch_last_good_read_age_seconds').find((a) => a.labels.machine === 'ct129');
    expect(ctAge?.value).toBeGreaterThan(kproAge?.value ?? Number.POSITIVE_INFINITY);
  });
});
