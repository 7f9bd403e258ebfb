/**
 * The allow-list of command lines gpu-medic may send to a machine, built from the template
 * functions themselves (src/playbooks/commands.ts, unstick-commands.ts) through the same
 * buildRemoteCommand the executor uses. Only integers and GPU UUIDs vary: PIDs, vmids, GPU UUIDs and
 * the `timeout` seconds. Anything else in a machine's command log is a breach.
 */
import { fuserDevices, hostMemory, queryComputeApps, queryGpus } from '../../../src/playbooks/commands.ts';
import { machineRead } from '../../../src/playbooks/machine-read.ts';
import {
  containerConfig,
  containerInitPid,
  gpuReset,
  hostGpuApps,
  hostGpuByUuid,
  hostGpuReport,
  persistenceMode,
  readProcs,
  setPersistence,
} from '../../../src/playbooks/unstick-commands.ts';
import { signalCommand } from '../../../src/playbooks/signal/template.ts';
import { buildRemoteCommand } from '../../../src/ssh/remote-command.ts';
import type { CommandSpec, Route, SshEndpoint } from '../../../src/ssh/types.ts';

// Sentinels: values no real template produces by accident, replaced by integer patterns below.
const PID_A = 424242;
const PID_B = 434343;
const VMID = 4747;
const GPU = 'GPU-48484848-4848-4848-4848-484848484848';
/** Signal template sentinels: start time, container PID, namespace inode. */
const START = 454545;
const CT = 464646;
const NS = 4026599999;

function templates(): CommandSpec[] {
  const t = { timeoutMs: 987_000, incidentId: 'inc_20261130_092000_k3x9q2', approvalId: 'none' };
  return [
    queryGpus(t),
    queryComputeApps(t),
    hostMemory(t),
    fuserDevices(t),
    // A snapshot's one session: host and container reads.
    machineRead([queryGpus(t), queryComputeApps(t), hostMemory(t)]),
    machineRead([queryGpus(t), queryComputeApps(t), hostMemory(t), fuserDevices(t)]),
    ...(['TERM', 'KILL'] as const).flatMap((sig) => [
      signalCommand('container', sig, `pid:[${NS}]`, [{ pid: PID_A, startTimeTicks: START, containerPid: null }], t),
      signalCommand(
        'container',
        sig,
        `pid:[${NS}]`,
        [
          { pid: PID_A, startTimeTicks: START, containerPid: null },
          { pid: PID_B, startTimeTicks: START, containerPid: null },
        ],
        t,
      ),
    ]),
    signalCommand('host', 'KILL', `pid:[${NS}]`, [{ pid: PID_A, startTimeTicks: START, containerPid: CT }], t),
    signalCommand(
      'host',
      'KILL',
      `pid:[${NS}]`,
      [
        { pid: PID_A, startTimeTicks: START, containerPid: CT },
        { pid: PID_B, startTimeTicks: START, containerPid: CT },
      ],
      t,
    ),
    readProcs([PID_A], t),
    readProcs([PID_A, PID_B], t),
    containerInitPid(VMID, t),
    hostGpuApps(GPU, t),
    persistenceMode(GPU, t),
    setPersistence(GPU, true, t),
    setPersistence(GPU, false, t),
    gpuReset(GPU, t),
    hostGpuByUuid(GPU, t),
    hostGpuReport(t),
    containerConfig(VMID, t),
  ];
}

const escapeRegex = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const INT = '[1-9]\\d{0,14}';

/** A command line (or argv joined by spaces) with the sentinels turned into integer patterns. */
function generalise(literal: string): string {
  let re = escapeRegex(literal);
  // Signal template: (pid start ctpid) triples after the namespace inode.
  re = re.replaceAll(`${PID_A} ${START} ${CT} ${PID_B} ${START} ${CT}`, `${INT} \\d+ ${INT}(?: ${INT} \\d+ ${INT})*`);
  re = re.replaceAll(`${PID_A} ${START} 0 ${PID_B} ${START} 0`, `${INT} \\d+ 0(?: ${INT} \\d+ 0)*`);
  re = re.replaceAll(`${PID_A} ${START} ${CT}`, `${INT} \\d+ ${INT}`);
  re = re.replaceAll(`${PID_A} ${START} 0`, `${INT} \\d+ 0`);
  re = re.replaceAll(String(NS), '\\d+');
  re = re.replaceAll(`${PID_A} ${PID_B}`, `${INT}(?: ${INT})*`);
  re = re.replaceAll(String(PID_A), INT);
  re = re.replaceAll(String(VMID), INT);
  re = re.replaceAll(GPU, 'GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}');
  re = re.replace(/timeout -k \S+ \S+/g, 'timeout -k \\d+(?:\\.\\d+)? \\d+(?:\\.\\d+)?');
  return re;
}

function buildAllowList(): { ssh: RegExp[]; tools: RegExp[] } {
  const endpoint: SshEndpoint = {
    machineId: 'x',
    host: '127.0.0.1',
    port: 22,
    username: 'root',
    privateKeyPath: '/k',
    hostKeyFingerprints: [],
  };
  const routes: Route[] = [
    { kind: 'direct', endpoint },
    { kind: 'pct', host: endpoint, vmid: VMID },
  ];
  const ssh: RegExp[] = [];
  const tools: RegExp[] = [];
  for (const spec of templates()) {
    for (const route of routes) ssh.push(new RegExp(`^${generalise(buildRemoteCommand(route, spec, 1000).command)}$`));
    // A fake tool logs its own argv (after the shell removed the quoting).
    tools.push(new RegExp(`^${generalise(spec.argv.join(' '))}$`));
    tools.push(
      new RegExp(
        `^pct exec ${INT} -- timeout -k \\d+(?:\\.\\d+)? \\d+(?:\\.\\d+)? ${generalise(spec.argv.join(' '))}$`,
      ),
    );
  }
  // `fuser -v /dev/nvidia*` after the remote shell expanded the glob.
  tools.push(/^fuser -v(?: \/dev\/nvidia[a-z0-9-]*)+$/);
  tools.push(/^fuser -v \/dev\/nvidia\*$/);
  return { ssh, tools };
}

const ALLOW = buildAllowList();

/** True when `line` (as a machine logged it) is one of the fixed templates. */
function isTemplateCommand(line: string, via: 'ssh' | 'tool'): boolean {
  return (via === 'ssh' ? ALLOW.ssh : ALLOW.tools).some((re) => re.test(line));
}

export interface CommandLogLike {
  commandLog(machineId: string): Array<{ cmd: string; via: 'ssh' | 'tool' }>;
}

/** Every logged command on these machines that is not a template (empty = proof). */
export function commandsOutsideTemplates(
  fleet: CommandLogLike,
  machineIds: readonly string[],
): Array<{ machine: string; via: string; cmd: string }> {
  const out: Array<{ machine: string; via: string; cmd: string }> = [];
  for (const m of machineIds)
    for (const e of fleet.commandLog(m))
      if (!isTemplateCommand(e.cmd, e.via)) out.push({ machine: m, via: e.via, cmd: e.cmd });
  return out;
}
