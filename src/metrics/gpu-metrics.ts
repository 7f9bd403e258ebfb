import { Gauge, type Registry } from 'prom-client';
import type { Machine } from '../config/machines.ts';
import type { MachineGlance } from '../watchdog/watch-glance.ts';

/**
 * GPU metrics from the watchdog's last readings (the glances it stores in Redis at each commit),
 * on the worker's metrics endpoint, for the machines that have no DCGM exporter. Read from Redis
 * at scrape time, so every worker serves the same numbers whichever of them ran the round.
 *
 * Labels follow dcgm-exporter's, so the same rules and the same receiver mapping fit both:
 * `Hostname` (the machine read: a host or a container id of the inventory), `host` (its Proxmox
 * host), `container` (the container id, "" for a host's own reading), `gpu` (the index as that
 * machine numbers it) and `UUID` ("" when not read). Cardinality: one series per metric per
 * (machine, GPU) of the inventory: (hosts + containers) × GPUs for the per-GPU series, hosts × GPUs
 * for the unowned memory, hosts for host RAM, machines for the reading time. A machine gone from
 * the inventory, or a GPU no longer read, disappears at the next scrape.
 */
const GPU_LABELS = ['Hostname', 'host', 'container', 'gpu', 'UUID'] as const;
const MACHINE_LABELS = ['Hostname', 'host', 'container'] as const;
const MiB = 1024 * 1024;

interface GpuSeries {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The series of the glances of `machines` (pure): inventory machines only, numbers only. */
function gpuSeries(glances: readonly MachineGlance[], machines: readonly Machine[]): GpuSeries[] {
  const out: GpuSeries[] = [];
  for (const g of glances) {
    const m = machines.find((x) => x.id === g.machineId);
    if (!m) continue;
    const where = {
      Hostname: m.id,
      host: m.kind === 'container' ? m.hostId : m.id,
      container: m.kind === 'container' ? m.id : '',
    };
    out.push({ name: 'gpu_medic_gpu_reading_timestamp_seconds', labels: where, value: g.at / 1000 });
    out.push({ name: 'gpu_medic_gpu_query_ok', labels: where, value: g.ok ? 1 : 0 });
    if (m.kind === 'host' && typeof g.ramUsedBytes === 'number' && typeof g.ramTotalBytes === 'number') {
      out.push({ name: 'gpu_medic_host_memory_used_bytes', labels: where, value: g.ramUsedBytes });
      out.push({ name: 'gpu_medic_host_memory_total_bytes', labels: where, value: g.ramTotalBytes });
    }
    if (!g.ok) continue;
    if (g.gpuError !== undefined)
      out.push({ name: 'gpu_medic_nvidia_smi_error', labels: where, value: g.gpuError ? 1 : 0 });
    for (const r of g.gpuReadings ?? []) {
      const labels = { ...where, gpu: String(r.index), UUID: r.uuid ?? '' };
      if (r.usedMiB !== null) out.push({ name: 'gpu_medic_gpu_memory_used_bytes', labels, value: r.usedMiB * MiB });
      if (r.totalMiB !== null) out.push({ name: 'gpu_medic_gpu_memory_total_bytes', labels, value: r.totalMiB * MiB });
      if (r.unownedMiB !== null && m.kind === 'host')
        out.push({ name: 'gpu_medic_gpu_memory_unowned_bytes', labels, value: r.unownedMiB * MiB });
      out.push({ name: 'gpu_medic_gpu_error', labels, value: r.error ? 1 : 0 });
    }
  }
  return out;
}

const HELP: Record<string, { help: string; labels: readonly string[] }> = {
  gpu_medic_gpu_memory_used_bytes: { help: 'GPU memory in use, as the watchdog last read it.', labels: GPU_LABELS },
  gpu_medic_gpu_memory_total_bytes: { help: 'GPU memory in all, as the watchdog last read it.', labels: GPU_LABELS },
  gpu_medic_gpu_memory_unowned_bytes: {
    help: 'GPU memory in use that no process on the host holds (host readings only): a leaked context.',
    labels: GPU_LABELS,
  },
  gpu_medic_gpu_error: {
    help: '1 when nvidia-smi answered an error for this GPU instead of numbers.',
    labels: GPU_LABELS,
  },
  gpu_medic_nvidia_smi_error: {
    help: '1 when nvidia-smi answered an error (for one GPU or for every GPU) instead of numbers at the last reading.',
    labels: MACHINE_LABELS,
  },
  gpu_medic_host_memory_used_bytes: { help: 'Host RAM in use (hosts only).', labels: MACHINE_LABELS },
  gpu_medic_host_memory_total_bytes: { help: 'Host RAM in all (hosts only).', labels: MACHINE_LABELS },
  gpu_medic_gpu_query_ok: {
    help: '1 when the last watchdog reading of the machine succeeded.',
    labels: MACHINE_LABELS,
  },
  gpu_medic_gpu_reading_timestamp_seconds: {
    help: 'When the watchdog last read the machine (Unix seconds).',
    labels: MACHINE_LABELS,
  },
};

/** Registers the gauges; each scrape reads the glances once (`read`) and sets every gauge from them. */
export function registerGpuMetrics(
  registry: Registry,
  read: () => Promise<readonly MachineGlance[]>,
  machines: readonly Machine[],
): void {
  const gauges = new Map<string, Gauge<string>>();
  let pending: Promise<void> | null = null;
  const refresh = (): Promise<void> => {
    pending ??= read()
      .then((glances) => {
        for (const g of gauges.values()) g.reset();
        for (const s of gpuSeries(glances, machines)) gauges.get(s.name)?.set(s.labels, s.value);
      })
      .finally(() => {
        pending = null;
      });
    return pending;
  };
  // A restarted worker group in the same process registers again: its reader replaces the old one.
  for (const name of Object.keys(HELP)) registry.removeSingleMetric(name);
  for (const [name, h] of Object.entries(HELP))
    gauges.set(
      name,
      new Gauge({
        name,
        help: h.help,
        labelNames: [...h.labels],
        registers: [registry],
        async collect() {
          await refresh();
        },
      }),
    );
}
