/** Creates a machine's dir: machine.json, bin/ tool wrappers, and for a host its state and device files. */
import { createHash } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { chmod, mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { shellQuote } from '../../../src/text/shell-quote.ts';
import type { FleetTools } from './build-tools.ts';
import { type GpuState, type HostState, type MachineInfo, writeJsonAtomic } from './state.ts';
import type { GpuSpec, HostSpec } from './types.ts';

const GiB = 1024 ** 3;

function fakeUuid(seed: string): string {
  const h = createHash('sha256').update(seed).digest('hex');
  return `GPU-${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

export function defaultHostState(spec: HostSpec): HostState {
  const list: GpuSpec[] = typeof spec.gpus === 'number' ? Array.from({ length: spec.gpus }, () => ({})) : spec.gpus;
  const gpus: GpuState[] = list.map((g, index) => ({
    index,
    name: g.name ?? 'NVIDIA H200',
    uuid: g.uuid ?? fakeUuid(`${spec.id}/${index}`),
    busId: g.busId ?? `00000000:${(index + 1).toString(16).toUpperCase().padStart(2, '0')}:00.0`,
    memoryTotalMiB: g.memoryTotalMiB ?? 143771,
    leakMiB: 0,
    persistence: g.persistence ?? false,
    resetAt: null,
    error: null,
  }));
  return {
    driverVersion: '590.48.01',
    cudaVersion: '13.1',
    gpus,
    error: null,
    ram: {
      totalBytes: Math.round((spec.ramTotalGiB ?? 449) * GiB),
      usedBytes: Math.round((spec.ramUsedGiB ?? 12) * GiB),
    },
  };
}

/** Device files a host's GPUs are reached through (plain files: holders open and mmap them; containers bind-mount them). */
function deviceNames(gpuCount: number): string[] {
  return [...Array.from({ length: gpuCount }, (_, i) => `nvidia${i}`), 'nvidiactl', 'nvidia-uvm', 'nvidia-uvm-tools'];
}

/** A served tool: the small C client asks the fleet's tool server (no Node start per call). */
async function writeClientWrapper(
  binDir: string,
  name: string,
  machineDir: string,
  tools: FleetTools,
  socket: string,
): Promise<void> {
  const text = [
    '#!/bin/sh',
    `FLEET_MACHINE_DIR=${shellQuote(machineDir)}; export FLEET_MACHINE_DIR`,
    `exec ${shellQuote(tools.toolClient)} ${shellQuote(socket)} ${shellQuote(name)} "$@"`,
    '',
  ].join('\n');
  await writeFile(join(binDir, name), text, { mode: 0o755 });
}

async function writeWrapper(binDir: string, name: string, machineDir: string, script: string): Promise<void> {
  const text = [
    '#!/bin/sh',
    `FLEET_MACHINE_DIR=${shellQuote(machineDir)}; export FLEET_MACHINE_DIR`,
    `exec ${shellQuote(process.execPath)} ${shellQuote(script)} "$@"`,
    '',
  ].join('\n');
  await writeFile(join(binDir, name), text, { mode: 0o755 });
}

/** The system dirs a machine's PATH holds after its bin/ (what sshd.ts uses by default). */
const SYSTEM_PATH = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

/**
 * A machine's own copy of the system PATH: `<dir>/sys/` with a symlink to every program in the
 * system dirs (first one wins, as on PATH) except the omitted ones, so those are truly absent
 * (`command not found`, exit 127) for everything that machine runs. Returns the dir.
 */
async function writeSystemPath(dir: string, omit: readonly string[]): Promise<string> {
  const sys = join(dir, 'sys');
  await mkdir(sys, { recursive: true });
  const skip = new Set<string>(omit);
  // LXC's own tools are the host's business through the fleet's wrappers (bin/lxc-info with the fleet's lxcpath).
  const progs = systemPrograms().filter(([name]) => !skip.has(name) && !name.startsWith('lxc-'));
  await Promise.all(progs.map(([name, target]) => symlink(target, join(sys, name))));
  return sys;
}

let programs: Array<[string, string]> | null = null;

/** Every program of the system dirs, first one on PATH wins: [name, path]. Read once per process. */
function systemPrograms(): Array<[string, string]> {
  if (programs !== null) return programs;
  const seen = new Map<string, string>();
  for (const d of SYSTEM_PATH) {
    let names: string[];
    try {
      names = readdirSync(d);
    } catch {
      continue;
    }
    for (const name of names) {
      if (seen.has(name)) continue;
      try {
        const st = statSync(join(d, name));
        if (!st.isFile() || (st.mode & 0o111) === 0) continue;
      } catch {
        continue;
      }
      seen.set(name, join(d, name));
    }
  }
  programs = [...seen];
  return programs;
}

/**
 * The real `lxc-info` on a host of real LXC containers, pointed at the fleet's lxcpath (Proxmox's
 * is the default /var/lib/lxc), each call logged to tools.log as the fake tools log theirs.
 */
async function writeLxcInfoWrapper(binDir: string, machineDir: string, lxcPath: string): Promise<void> {
  const text = [
    '#!/bin/sh',
    `log=${shellQuote(join(machineDir, 'tools.log'))}`,
    'args=""',
    'for a in "$@"; do',
    '  e=$(printf "%s" "$a" | sed \'s/[\\\\"]/\\\\&/g\')',
    '  args="${args:+$args,}\\"$e\\""',
    'done',
    'printf \'{"ts":%s,"tool":"lxc-info","argv":[%s]}\\n\' "$(date +%s%3N)" "$args" >> "$log"',
    `exec /usr/bin/lxc-info -P ${shellQuote(lxcPath)} "$@"`,
    '',
  ].join('\n');
  await writeFile(join(binDir, 'lxc-info'), text, { mode: 0o755 });
}

export async function writeMachineFiles(o: {
  dir: string;
  info: MachineInfo;
  tools: FleetTools;
  /** The fleet's tool server socket (answers nvidia-smi and free). */
  toolSocket: string;
  hostState?: HostState;
  /** Programs this machine lacks; null: it keeps the system PATH itself (no `sys/` dir). */
  omit?: readonly string[] | null;
}): Promise<void> {
  const bin = join(o.dir, 'bin');
  await mkdir(bin, { recursive: true });
  writeJsonAtomic(join(o.dir, 'machine.json'), o.info);
  await writeFile(join(o.dir, 'tools.log'), '');
  await chmod(join(o.dir, 'tools.log'), 0o666); // tools may run as a non-root user
  const omit = new Set(o.omit ?? []);
  if (o.omit !== undefined && o.omit !== null) await writeSystemPath(o.dir, o.omit);
  const wrapper = async (name: string, script: string): Promise<void> => {
    if (!omit.has(name)) await writeWrapper(bin, name, o.dir, script);
  };
  for (const served of ['nvidia-smi', 'free']) {
    if (!omit.has(served)) await writeClientWrapper(bin, served, o.dir, o.tools, o.toolSocket);
  }
  if (o.info.kind === 'host') {
    // The host's kernel log (fleet.kernelLog / logXid): journalctl -k and dmesg.
    for (const served of ['journalctl', 'dmesg']) {
      if (!omit.has(served)) await writeClientWrapper(bin, served, o.dir, o.tools, o.toolSocket);
    }
    await writeFile(join(o.dir, 'kmsg.jsonl'), '');
    await wrapper('pct', o.tools.pct);
    if (o.info.lxcPath !== undefined) {
      if (!omit.has('lxc-info')) await writeLxcInfoWrapper(bin, o.dir, o.info.lxcPath);
    } else await wrapper('lxc-info', o.tools.lxcInfo);
    await mkdir(join(o.dir, 'holders'), { recursive: true });
    await mkdir(join(o.dir, 'containers'), { recursive: true });
    const devDir = join(o.dir, 'dev');
    await mkdir(devDir, { recursive: true });
    const state = o.hostState;
    if (state === undefined) throw new Error(`host ${o.info.id}: no state`);
    writeJsonAtomic(join(o.dir, 'state.json'), state);
    for (const name of deviceNames(state.gpus.length)) {
      await writeFile(join(devDir, name), Buffer.alloc(4096));
      await chmod(join(devDir, name), 0o666); // holders may run as another user
    }
  } else {
    await mkdir(join(o.dir, 'hostproc'), { recursive: true });
    await mkdir(join(o.dir, 'hostdev'), { recursive: true });
  }
}
