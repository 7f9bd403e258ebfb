import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../harness/stack.ts';

/**
 * GPU metrics from the watchdog's readings, scraped over HTTP from a stack whose worker runs real
 * watchdog rounds over the sshd fleet (fake nvidia-smi): per machine and GPU, Prometheus units, the
 * labels dcgm-exporter uses, and nothing for machines outside the inventory.
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

describe('GPU metrics from the watchdog readings on the metrics endpoint (real rounds over the sshd fleet)', () => {
  let s: Stack;
  const scrape = async (): Promise<Series> => parse(await (await fetch(String(s.metricsUrl))).text());
  const of = (series: Series, name: string) => series.filter((x) => x.name === name);

  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 100 }],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      metrics: true,
      env: { GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01', GPU_MEDIC_WATCH_INTERVAL_SEC: '2' },
    });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('memory used and total, memory held by no process, host RAM and GPU error state, per machine and GPU', async () => {
    await s.fleet.setLeak('kpro5', 1, 8192);
    let got: Series = [];
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      got = await scrape();
      const unowned = of(got, 'gpu_medic_gpu_memory_unowned_bytes').find((x) => x.labels.gpu === '1');
      if (
        unowned &&
        unowned.value > 0 &&
        of(got, 'gpu_medic_gpu_memory_total_bytes').some((x) => x.labels.Hostname === 'ct129')
      )
        break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const total = of(got, 'gpu_medic_gpu_memory_total_bytes').filter((x) => x.labels.Hostname === 'kpro5');
    expect(total.map((x) => x.labels.gpu).sort()).toEqual(['0', '1']);
    expect(total[0]?.value).toBe(143_771 * 1024 * 1024);
    expect(total[0]?.labels).toMatchObject({ host: 'kpro5', container: '' });
    expect(total[0]?.labels.UUID).toMatch(/^GPU-/);
    const unowned = of(got, 'gpu_medic_gpu_memory_unowned_bytes');
    expect(unowned.find((x) => x.labels.gpu === '1')?.value).toBe(8192 * 1024 * 1024);
    expect(unowned.find((x) => x.labels.gpu === '0')?.value).toBe(0);
    // Held by no process is the host's view only: a container's reading has no such series.
    expect(unowned.every((x) => x.labels.container === '')).toBe(true);
    expect(
      of(got, 'gpu_medic_gpu_memory_used_bytes').find((x) => x.labels.Hostname === 'kpro5' && x.labels.gpu === '1')
        ?.value,
    ).toBeGreaterThanOrEqual(8192 * 1024 * 1024);
    expect(of(got, 'gpu_medic_host_memory_total_bytes')).toEqual([
      {
        name: 'gpu_medic_host_memory_total_bytes',
        labels: { Hostname: 'kpro5', host: 'kpro5', container: '' },
        value: 449 * 2 ** 30,
      },
    ]);
    expect(of(got, 'gpu_medic_host_memory_used_bytes')[0]?.value).toBe(100 * 2 ** 30);
    expect(
      of(got, 'gpu_medic_gpu_error')
        .filter((x) => x.labels.Hostname === 'kpro5')
        .map((x) => x.value),
    ).toEqual([0, 0]);
    expect(
      of(got, 'gpu_medic_gpu_memory_total_bytes').find((x) => x.labels.Hostname === 'ct129')?.labels,
    ).toMatchObject({
      host: 'kpro5',
      container: 'ct129',
    });

    expect(
      of(got, 'gpu_medic_nvidia_smi_error')
        .map((x) => [x.labels.Hostname, x.value])
        .sort(),
    ).toEqual([
      ['ct129', 0],
      ['kpro5', 0],
    ]);
    // A GPU lost: nvidia-smi answers an error for the machine; its error state is 1 once the next round has read it.
    await s.fleet.setGpuError('kpro5', 'gpu_lost', 0);
    const deadline2 = Date.now() + 30_000;
    let errored: Series = [];
    while (Date.now() < deadline2) {
      errored = of(await scrape(), 'gpu_medic_nvidia_smi_error').filter(
        (x) => x.labels.Hostname === 'kpro5' && x.value === 1,
      );
      if (errored.length > 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(errored.length).toBeGreaterThan(0);
  });
});
