import { XMLParser, XMLValidator } from 'fast-xml-parser';
import type { Gpu, GpuProcess, MigDevice, ParsedOutput } from '../types.ts';
import { emptyOutput } from './empty-output.ts';
import { normaliseBusId } from './normalise-bus-id.ts';
import { abort, guard, type ParseResult, toInt } from './parse-failure.ts';

type Node = Record<string, unknown>;

const ARRAYS = new Set(['gpu', 'process_info', 'mig_device']);

const parser = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: '@_',
  parseTagValue: false,
  parseAttributeValue: false,
  trimValues: true,
  // nvidia-smi output uses no entities beyond the XML five; refuse expansion games.
  processEntities: true,
  htmlEntities: false,
  isArray: (name) => ARRAYS.has(name),
});

export function looksLikeXml(text: string): boolean {
  const head = text.trimStart().slice(0, 400);
  return head.startsWith('<?xml') || head.startsWith('<!DOCTYPE nvidia_smi_log') || head.startsWith('<nvidia_smi_log');
}

function child(node: unknown, name: string): unknown {
  return typeof node === 'object' && node !== null && !Array.isArray(node) ? (node as Node)[name] : undefined;
}

function text(node: unknown): string | null {
  if (typeof node === 'string') {
    const t = node.trim();
    return t === '' || t === 'N/A' || /^\[.*\]$/.test(t) ? null : t;
  }
  const inner = child(node, '#text');
  return typeof inner === 'string' ? text(inner) : null;
}

function list(node: unknown): unknown[] {
  return Array.isArray(node) ? node : node === undefined || node === null || node === '' ? [] : [node];
}

/** `123 MiB` → 123; missing → null; anything else aborts. */
function mib(node: unknown, what: string): number | null {
  const t = text(node);
  if (t === null) return null;
  const m = /^(\d+) MiB$/.exec(t);
  const n = toInt(m?.[1] ?? '');
  if (n === null) abort(`unreadable ${what} "${t.slice(0, 30)}"`);
  return n;
}

function int(node: unknown, what: string): number | null {
  const t = text(node);
  if (t === null) return null;
  const n = toInt(t);
  if (n === null) abort(`unreadable ${what} "${t.slice(0, 30)}"`);
  return n;
}

function readGpu(node: unknown, index: number): { gpu: Gpu; migs: MigDevice[]; processes: GpuProcess[] } {
  const idAttr = child(node, '@_id');
  const busText = text(child(child(node, 'pci'), 'pci_bus_id')) ?? (typeof idAttr === 'string' ? idAttr : null);
  const busId = busText === null ? null : normaliseBusId(busText);
  if (busText !== null && busId === null) abort(`unreadable bus id "${busText.slice(0, 30)}"`);
  const fb = child(node, 'fb_memory_usage');
  const utilText = text(child(child(node, 'utilization'), 'gpu_util'));
  const util = utilText === null ? null : toInt(/^(\d+) %$/.exec(utilText)?.[1] ?? '');
  if (utilText !== null && util === null) abort(`unreadable gpu_util "${utilText.slice(0, 30)}"`);
  const uuid = text(child(node, 'uuid'));
  const gpu: Gpu = {
    index,
    name: text(child(node, 'product_name')),
    busId,
    uuid,
    memoryUsedMiB: mib(child(fb, 'used'), 'fb_memory_usage/used'),
    memoryTotalMiB: mib(child(fb, 'total'), 'fb_memory_usage/total'),
    utilizationPct: util,
  };
  const migs = list(child(child(node, 'mig_devices'), 'mig_device')).map((m): MigDevice => {
    const gi = int(child(m, 'gpu_instance_id'), 'gpu_instance_id');
    const ci = int(child(m, 'compute_instance_id'), 'compute_instance_id');
    const dev = int(child(m, 'index'), 'mig_device index');
    if (gi === null || ci === null || dev === null) abort('a MIG device lacks its ids');
    const mfb = child(m, 'fb_memory_usage');
    return {
      gpuIndex: index,
      gi,
      ci,
      migDevice: dev,
      memoryUsedMiB: mib(child(mfb, 'used'), 'MIG used memory'),
      memoryTotalMiB: mib(child(mfb, 'total'), 'MIG total memory'),
    };
  });
  const processes = list(child(child(node, 'processes'), 'process_info')).map((p): GpuProcess => {
    const pid = int(child(p, 'pid'), 'pid');
    if (pid === null || pid === 0) abort('a process has no PID');
    return {
      gpuIndex: index,
      gpuUuid: uuid,
      pid,
      type: text(child(p, 'type')),
      name: text(child(p, 'process_name')),
      usedMiB: mib(child(p, 'used_memory'), 'process used_memory'),
    };
  });
  return { gpu, migs, processes };
}

/** `nvidia-smi -q -x` (DTD v10-v13): GPUs in document order, which is index order. */
export function parseXml(input: string): ParseResult<ParsedOutput> {
  return guard(() => {
    const valid = XMLValidator.validate(input);
    if (valid !== true) abort(`malformed XML: ${valid.err.msg} (line ${valid.err.line})`);
    const doc: unknown = parser.parse(input);
    const log = child(doc, 'nvidia_smi_log');
    if (typeof log !== 'object' || log === null) abort('XML without an <nvidia_smi_log> element');
    const out = emptyOutput('xml');
    out.driverVersion = text(child(log, 'driver_version'));
    out.cudaVersion = text(child(log, 'cuda_version'));
    list(child(log, 'gpu')).forEach((g, i) => {
      const { gpu, migs, processes } = readGpu(g, i);
      out.gpus.push(gpu);
      out.migDevices.push(...migs);
      out.processes.push(...processes);
    });
    if (out.gpus.length === 0) abort('the XML lists no GPU');
    return out;
  });
}
