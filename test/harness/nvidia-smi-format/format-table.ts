import type { Gpu, GpuProcess, MigDevice, ParsedOutput } from '../../../src/gpu/types.ts';
import { asctimeUtc, left, right } from './text-layout.ts';

/** Readings the table shows that a snapshot does not carry; each has a plausible default. */
export interface TableGpuDetails {
  /** Default 'N/A' (datacenter GPUs have no fan reading). */
  fan: string;
  /** Default 30. */
  temperatureC: number;
  /** Default 'P0'. */
  perf: string;
  /** Default 70. */
  powerW: number;
  /** Default 700. */
  powerCapW: number;
  /** Default 'On'. */
  persistence: string;
  /** Default 'Off'. */
  displayActive: string;
  /** Volatile uncorrected ECC; default '0'. */
  ecc: string;
  /** Default 'Default'. */
  computeMode: string;
  /** Default 'Disabled' (or 'Enabled' when the snapshot has MIG devices on that GPU). */
  migMode: string;
}

export interface TableMigDetails {
  /** Default 0 / 0. */
  bar1UsedMiB: number;
  bar1TotalMiB: number;
  /** SM count; default 0. */
  sm: number;
  /** Default '0'. */
  ecc: string;
  /** CE ENC DEC OFA JPG counts; default 0 each. */
  engines: [number, number, number, number, number];
}

export interface FormatTableOptions {
  /** Printed on the first line, in UTC. */
  timestamp: Date;
  /**
   * Inside a container nvidia-smi shows the global memory but cannot map host PIDs, so the
   * Processes panel is printed empty. Default false.
   */
  containerView?: boolean;
  /** `NVIDIA-SMI x` in the banner; default the driver version. */
  smiVersion?: string;
  /** Per GPU (same order as `s.gpus`), what the snapshot doesn't know. */
  gpuDetails?: ReadonlyArray<Partial<TableGpuDetails> | undefined>;
  /** Per MIG device (same order as `s.migDevices`). */
  migDetails?: ReadonlyArray<Partial<TableMigDetails> | undefined>;
  /** Per process (same order as `s.processes`): MIG GI/CI; printed `N/A` when absent. */
  processPlacement?: ReadonlyArray<TableProcessPlacement | undefined>;
}

const WIDE = 89;
const BORDER = `+${'-'.repeat(WIDE)}+`;
const GPU_BORDER = `+${'-'.repeat(41)}+${'-'.repeat(24)}+${'-'.repeat(22)}+`;
const GPU_HEADER = [
  GPU_BORDER,
  '| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |',
  '| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |',
  '|                                         |                        |               MIG M. |',
  `|${'='.repeat(41)}+${'='.repeat(24)}+${'='.repeat(22)}|`,
];
const MIG_BORDER = `+${'-'.repeat(18)}+${'-'.repeat(34)}+${'-'.repeat(11)}+${'-'.repeat(23)}+`;
const MIG_HEADER = [
  BORDER,
  boxed(' MIG devices:'),
  MIG_BORDER,
  '| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |',
  '|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |',
  '|                  |                                  |        ECC|                       |',
  `|${'='.repeat(18)}+${'='.repeat(34)}+${'='.repeat(11)}+${'='.repeat(23)}|`,
];
const PROCESS_HEADER = [
  BORDER,
  boxed(' Processes:'),
  '|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |',
  '|        ID   ID                                                               Usage      |',
  `|${'='.repeat(WIDE)}|`,
];

function boxed(inner: string): string {
  return `|${left(inner, WIDE)}|`;
}

function mib(value: number | null): string {
  return value === null ? 'N/A' : `${value}MiB`;
}

/** The table keeps 27 characters of a name: longer ones become 24 + `...`. */
export function tableGpuName(name: string | null): string {
  const n = name ?? 'N/A';
  return n.length > 27 ? `${n.slice(0, 24)}...` : n;
}

/** The Processes panel keeps 32 characters of a name: longer ones keep their tail behind `...`. */
export function tableProcessName(name: string | null): string {
  const n = name ?? 'N/A';
  return n.length > 32 ? `...${n.slice(n.length - 29)}` : n;
}

function gpuRows(gpu: Gpu, position: number, d: TableGpuDetails): string[] {
  const index = String(gpu.index ?? position);
  const seg1a = `${right(index, 4)}  ${left(tableGpuName(gpu.name), 31)}${left(d.persistence, 3)} `;
  const seg2a = `   ${left(gpu.busId ?? 'N/A', 16)} ${right(d.displayActive, 3)} `;
  const seg3a = `${right(d.ecc, 21)} `;
  const seg1b =
    `${right(d.fan, 4)}${right(`${d.temperatureC}C`, 6)}${right(d.perf, 6)}` +
    `${right(`${d.powerW}W`, 16)} / ${right(`${d.powerCapW}W`, 5)} `;
  // MIG-enabled GPUs print one right-aligned N/A for the whole cell (535.x MIG table).
  const seg2b =
    gpu.memoryUsedMiB === null && gpu.memoryTotalMiB === null
      ? `${right('N/A', 23)} `
      : `${right(mib(gpu.memoryUsedMiB), 11)} / ${right(mib(gpu.memoryTotalMiB), 9)} `;
  const util = gpu.utilizationPct === null ? 'N/A' : `${gpu.utilizationPct}%`;
  const seg3b = `${right(util, 8)}${right(d.computeMode, 13)} `;
  return [
    `|${seg1a}|${seg2a}|${seg3a}|`,
    `|${seg1b}|${seg2b}|${seg3b}|`,
    `|${' '.repeat(41)}|${' '.repeat(24)}|${right(d.migMode, 21)} |`,
    GPU_BORDER,
  ];
}

function migRows(m: MigDevice, d: TableMigDetails): string[] {
  const ids = `${right(String(m.gpuIndex), 3)}${right(String(m.gi), 5)}${right(String(m.ci), 4)}${right(String(m.migDevice), 4)}  `;
  const memory = `${right(mib(m.memoryUsedMiB), 19)} / ${right(mib(m.memoryTotalMiB), 8)}    `;
  const bar1 = `${right(mib(d.bar1UsedMiB), 19)} / ${right(mib(d.bar1TotalMiB), 8)}    `;
  const [ce, enc, dec, ofa, jpg] = d.engines;
  const engines = `${right(String(ce), 3)}${right(String(enc), 4)}${right(String(dec), 5)}${right(String(ofa), 5)}${right(String(jpg), 5)} `;
  return [
    `|${ids}|${memory}|${right(String(d.sm), 3)}${right(d.ecc, 7)} |${engines}|`,
    `|${' '.repeat(18)}|${bar1}|${' '.repeat(11)}|${' '.repeat(23)}|`,
    MIG_BORDER,
  ];
}

function processRow(p: GpuProcess, gi: number | null, ci: number | null): string {
  const giText = gi === null ? right('N/A', 6) : `${right(String(gi), 5)} `;
  const ciText = ci === null ? right('N/A', 5) : `${right(String(ci), 4)} `;
  const memory = p.usedMiB === null ? `${' '.repeat(6)}N/A${' '.repeat(5)}` : right(mib(p.usedMiB), 14);
  const inner =
    `${right(p.gpuIndex === null ? 'N/A' : String(p.gpuIndex), 5)}${giText}${ciText}` +
    `${right(String(p.pid), 16)}${right(p.type ?? 'C', 7)}   ${left(tableProcessName(p.name), 32)}${memory} `;
  return `|${inner}|`;
}

export interface TableProcessPlacement {
  /** MIG GPU instance and compute instance of a process (per process, same order); null when not MIG. */
  gi: number | null;
  ci: number | null;
}

/**
 * The default `nvidia-smi` table in the 590.x 91-column layout, byte for byte as the driver
 * prints it (trailing spaces on the timestamp line, final newline).
 */
export function formatTable(s: ParsedOutput, opts: FormatTableOptions): string {
  const driver = s.driverVersion ?? 'N/A';
  const lines: string[] = [`${asctimeUtc(opts.timestamp)}       `, BORDER];
  lines.push(
    `| NVIDIA-SMI ${left(opts.smiVersion ?? driver, 23)}Driver Version: ${left(driver, 15)}CUDA Version: ${left(s.cudaVersion ?? 'N/A', 9)}|`,
  );
  lines.push(...GPU_HEADER);
  s.gpus.forEach((gpu, i) => {
    const hasMig = s.migDevices.some((m) => m.gpuIndex === (gpu.index ?? i));
    const d: TableGpuDetails = {
      fan: 'N/A',
      temperatureC: 30,
      perf: 'P0',
      powerW: 70,
      powerCapW: 700,
      persistence: 'On',
      displayActive: 'Off',
      ecc: '0',
      computeMode: 'Default',
      migMode: hasMig ? 'Enabled' : 'Disabled',
      ...opts.gpuDetails?.[i],
    };
    lines.push(...gpuRows(gpu, i, d));
  });
  lines.push('');
  if (s.migDevices.length > 0) {
    lines.push(...MIG_HEADER);
    s.migDevices.forEach((m, i) => {
      const d: TableMigDetails = {
        bar1UsedMiB: 0,
        bar1TotalMiB: 0,
        sm: 0,
        ecc: '0',
        engines: [0, 0, 0, 0, 0],
        ...opts.migDetails?.[i],
      };
      lines.push(...migRows(m, d));
    });
    lines.push('');
  }
  lines.push(...PROCESS_HEADER);
  if (opts.containerView !== true) {
    if (s.processes.length === 0) {
      lines.push(boxed('  No running processes found'));
    } else {
      s.processes.forEach((p, i) => {
        const placement = opts.processPlacement?.[i];
        lines.push(processRow(p, placement?.gi ?? null, placement?.ci ?? null));
      });
    }
  }
  lines.push(BORDER);
  return `${lines.join('\n')}\n`;
}
