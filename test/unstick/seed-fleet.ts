/**
 * Readings of the seed incident (kpro5 / ct129): two hung SGLang TP ranks holding 96,413 MiB on
 * GPU 0 and 96,417 MiB on GPU 2, plus the S7 bystanders (a monitoring python3 in ct129 with the
 * device open, another container's training job on GPU 5). /proc readings go through the real
 * reading-template parser, from text in the exact form the template prints.
 */
import type { ContainerReadings, HostReadings, ProcReading } from '../../src/gpu/holders.ts';
import type { Gpu, GpuProcess, Holder } from '../../src/gpu/types.ts';
import { parseProcReadings } from '../../src/agent-grammar/templates/unstick-commands.ts';

export const CT129_NS = 'pid:[4026532845]';
export const CT131_NS = 'pid:[4026533001]';
export const HOST_NS = 'pid:[4026531836]';
const TOTAL = 97_871;

export const uuid = (i: number): string => `GPU-5c1f0a2e-7d3b-4e8f-9a1c-0000000000${String(i).padStart(2, '0')}`;

export function gpus(used: Record<number, number> = { 0: 96_413, 2: 96_417 }): Gpu[] {
  return Array.from({ length: 8 }, (_, i) => ({
    index: i,
    name: 'NVIDIA H20',
    busId: `00000000:${(0x18 + i * 0x10).toString(16).toUpperCase().padStart(2, '0')}:00.0`,
    uuid: uuid(i),
    memoryUsedMiB: used[i] ?? 0,
    memoryTotalMiB: TOTAL,
    utilizationPct: 0,
  }));
}

/** A `/proc/<pid>/stat` line with all 52 fields, as Linux 6.x prints it. */
function statLine(pid: number, comm: string, state: string, startTimeTicks: number): string {
  const f = [
    `${pid}`,
    `(${comm})`,
    state,
    '1',
    `${pid}`,
    `${pid}`,
    '0',
    '-1',
    '4194560',
    '1203481',
    '0',
    '12',
    '0',
    '98123',
    '20117',
    '0',
    '0',
    '20',
    '0',
    '97',
    '0',
    `${startTimeTicks}`,
    '1099218493440',
    '2894311',
  ];
  while (f.length < 52) f.push('0');
  return `${f.join(' ')}\n`;
}

export interface FakeProc {
  pid: number;
  nsPids: number[];
  uid: number;
  ns: string;
  comm: string;
  state?: string;
  start: number;
  cmdline: string[];
  /** `/proc/<pid>/cgroup` as the host reads it; absent: the reading has no cgroup line. */
  cgroup?: string;
}

const hex = (s: string): string => Buffer.from(s, 'utf8').toString('hex');

/** What `readProcs` prints for these processes (absent ones print empty fields, as for an exited PID). */
export function readProcsOutput(
  pids: readonly number[],
  procs: readonly FakeProc[],
  opts: { done?: boolean } = {},
): string {
  const byPid = new Map(procs.map((p) => [p.pid, p]));
  const lines: string[] = [];
  for (const pid of pids) {
    const p = byPid.get(pid);
    lines.push(`@pid ${pid}`);
    lines.push(`@stat ${p ? hex(statLine(pid, p.comm, p.state ?? 'S', p.start)) : ''}`);
    if (p) lines.push(`@status NSpid:\t${p.nsPids.join('\t')}`, `@status Uid:\t${p.uid}\t${p.uid}\t${p.uid}\t${p.uid}`);
    lines.push(`@ns ${p ? p.ns : ''}`);
    if (p?.cgroup !== undefined) lines.push(`@cgroup ${hex(p.cgroup)}`);
  }
  for (const pid of pids) {
    const p = byPid.get(pid);
    lines.push(`@cmdline ${pid} ${p ? hex(`${p.cmdline.join('\0')}\0`) : ''}`);
  }
  if (opts.done !== false) lines.push('@done');
  return `${lines.join('\n')}\n`;
}

export function readings(pids: readonly number[], procs: readonly FakeProc[]): ProcReading[] {
  return parseProcReadings(readProcsOutput(pids, procs)).readings;
}

/** Host view of the two hung ranks, the other container's job, and (optionally) ct129's init. */
export const TP0: FakeProc = {
  pid: 812_345,
  nsPids: [812_345, 57],
  uid: 100_000,
  ns: CT129_NS,
  comm: 'sglang::schedul',
  start: 48_113_902,
  cmdline: ['sglang::scheduler_TP0'],
};
export const TP2: FakeProc = {
  pid: 812_351,
  nsPids: [812_351, 63],
  uid: 100_000,
  ns: CT129_NS,
  comm: 'sglang::schedul',
  start: 48_113_955,
  cmdline: ['sglang::scheduler_TP2'],
};
export const CT129_INIT: FakeProc = {
  pid: 811_900,
  nsPids: [811_900, 1],
  uid: 100_000,
  ns: CT129_NS,
  comm: 'systemd',
  start: 40_000_001,
  cmdline: ['/sbin/init'],
};
/** A root process in ct129 that the container login could not stop (`Operation not permitted`): host-only, and not the init. */
export const CT129_SERVER: FakeProc = {
  pid: 811_900,
  nsPids: [811_900, 71],
  uid: 100_000,
  ns: CT129_NS,
  comm: 'python3',
  start: 40_000_001,
  cmdline: ['python3', '/opt/serve.py'],
};
export const CT131_JOB: FakeProc = {
  pid: 823_001,
  nsPids: [823_001, 44],
  uid: 100_000,
  ns: CT131_NS,
  comm: 'python3',
  start: 51_002_417,
  cmdline: ['python3', 'train.py', '--epochs', '3'],
};

/** The same ranks as ct129's own /proc shows them (container PIDs, container uid 0). */
export const ctView = (p: FakeProc): FakeProc => ({
  ...p,
  pid: p.nsPids[p.nsPids.length - 1] ?? 0,
  nsPids: [p.nsPids[p.nsPids.length - 1] ?? 0],
  uid: 0,
});

export const MONITOR_CT_PID = 90;

export function app(p: FakeProc, gpu: number, usedMiB: number): GpuProcess {
  return { gpuIndex: gpu, gpuUuid: uuid(gpu), pid: p.pid, type: 'C', name: p.cmdline[0] ?? null, usedMiB };
}

function fuserRow(pid: number, device: string, command: string): Holder {
  return { device, pid, user: 'root', access: 'F...m', command };
}

/** S2 + S7: both ranks visible in ct129 and killable there; a monitor and ct131's job are bystanders. */
export function seedS2(): { host: HostReadings; container: ContainerReadings } {
  const hostProcs = [TP0, TP2, CT131_JOB];
  return {
    host: {
      gpus: gpus({ 0: 96_413, 2: 96_417, 5: 40_211 }),
      apps: [app(TP0, 0, 96_413), app(TP2, 2, 96_417), app(CT131_JOB, 5, 40_211)],
      procs: readings(
        hostProcs.map((p) => p.pid),
        hostProcs,
      ),
      targetPidNs: CT129_NS,
    },
    container: {
      holders: [
        fuserRow(57, '/dev/nvidia0', 'sglang::scheduler_TP0'),
        fuserRow(57, '/dev/nvidiactl', 'sglang::scheduler_TP0'),
        fuserRow(63, '/dev/nvidia2', 'sglang::scheduler_TP2'),
        fuserRow(MONITOR_CT_PID, '/dev/nvidiactl', 'python3'),
        fuserRow(MONITOR_CT_PID, '/dev/nvidia0', 'python3'),
      ],
      procs: readings(
        [57, 63, MONITOR_CT_PID],
        [
          ctView(TP0),
          ctView(TP2),
          {
            pid: MONITOR_CT_PID,
            nsPids: [MONITOR_CT_PID],
            uid: 0,
            ns: CT129_NS,
            comm: 'python3',
            start: 39_000_000,
            cmdline: ['python3', '/opt/monitor/gpu_exporter.py'],
          },
        ],
      ),
    },
  };
}
