/**
 * The allow-list of command lines gpu-medic may send to a machine, built from the template
 * functions themselves (src/agent-grammar/templates/snapshot-commands.ts, unstick-commands.ts) through the same
 * builders the executor uses: buildAgentCommand for a machine reached through gpu-medic-agent
 * (a least-privilege host: its log holds the agent lines it received, `ct <vmid>` ones too for the containers
 * it reaches with pct), buildRemoteCommand for one that takes shell lines (`root-shell`, e.g. a
 * container with its own address). Which one is chosen per machine from the fleet's inventory.
 * Only integers, GPU UUIDs, incident/approval ids and timeouts vary. Anything else in a machine's
 * command log is a breach.
 */
import {
  fuserDevices,
  hostMemory,
  queryComputeApps,
  queryGpus,
} from '../../../src/agent-grammar/templates/snapshot-commands.ts';
import { machineRead } from '../../../src/agent-grammar/templates/machine-read.ts';
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
} from '../../../src/agent-grammar/templates/unstick-commands.ts';
import { signalCommand } from '../../../src/agent-grammar/templates/signal.ts';
import { ARG_TYPES } from '../../../src/agent-grammar/arg-types.ts';
import type { InventoryInput } from '../../../src/config/inventory.ts';
import { AGENT_VERSION_LINE, buildAgentCommand } from '../../../src/ssh/agent-line.ts';
import { buildRemoteCommand } from '../../../src/ssh/remote-command.ts';
import type { CommandSpec } from '../../../src/agent-grammar/command-spec.ts';
import type { Route, SshEndpoint } from '../../../src/ssh/types.ts';

// Sentinels: values no real template produces by accident, replaced by integer patterns below.
const PID_A = 424242;
const PID_B = 434343;
const VMID = 4747;
const GPU = 'GPU-48484848-4848-4848-4848-484848484848';
/** Signal template sentinels: start time, container PID, namespace inode. */
const START = 454545;
const CT = 464646;
const NS = 4026599999;
/** Timeout sentinels (ms): a template's, and a machine read's (the slowest part's + its TERM/KILL + 1 s). */
const TIMEOUT_MS = 97_531;
const READ_TIMEOUT_MS = TIMEOUT_MS + 3000;
const INCIDENT = 'inc_19990101_000000_zzqqzz';
const APPROVAL = `apr_${'Z'.repeat(22)}`;

function templates(): CommandSpec[] {
  const t = { timeoutMs: TIMEOUT_MS, incidentId: INCIDENT, approvalId: APPROVAL };
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
/** An agent argument type's pattern without its anchors, as one group. */
const bare = (anchored: string): string => `(?:${anchored.replace(/^\^/, '').replace(/\$$/, '')})`;

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
  // Agent lines: the line's and each batch part's timeout (ms), and the destructive verbs' ids.
  re = re.replaceAll(String(READ_TIMEOUT_MS), INT);
  re = re.replaceAll(String(TIMEOUT_MS), INT);
  re = re.replaceAll(INCIDENT, bare(ARG_TYPES.incident));
  re = re.replaceAll(APPROVAL, bare(ARG_TYPES.approval));
  return re;
}

interface AllowList {
  /** Shell lines (buildRemoteCommand): straight to the machine, and through its host's pct. */
  shellDirect: RegExp[];
  shellPct: RegExp[];
  /** Agent lines (buildAgentCommand): `host …`, and `ct <vmid> …` for a container it reaches. */
  agentDirect: RegExp[];
  agentCt: RegExp[];
  tools: RegExp[];
}

function buildAllowList(): AllowList {
  const endpoint: SshEndpoint = {
    machineId: 'x',
    host: '127.0.0.1',
    port: 22,
    username: 'root',
    privateKeyPath: '/k',
    hostKeyFingerprints: [],
  };
  const direct: Route = { kind: 'direct', endpoint };
  const pct: Route = { kind: 'pct', host: endpoint, vmid: VMID };
  const line = (command: string): RegExp => new RegExp(`^${generalise(command)}$`);
  // The worker asks an agent its version after an `unknown verb` (agent/PROTOCOL.md).
  const allow: AllowList = {
    shellDirect: [],
    shellPct: [],
    agentDirect: [line(AGENT_VERSION_LINE)],
    agentCt: [],
    tools: [],
  };
  for (const spec of templates()) {
    allow.shellDirect.push(line(buildRemoteCommand(direct, spec, 1000).command));
    allow.shellPct.push(line(buildRemoteCommand(pct, spec, 1000).command));
    allow.agentDirect.push(line(buildAgentCommand(direct, spec).command));
    allow.agentCt.push(line(buildAgentCommand(pct, spec).command));
    // A fake tool logs its own argv (after the shell removed the quoting).
    allow.tools.push(line(spec.argv.join(' ')));
    allow.tools.push(
      new RegExp(
        `^pct exec ${INT} -- timeout -k \\d+(?:\\.\\d+)? \\d+(?:\\.\\d+)? ${generalise(spec.argv.join(' '))}$`,
      ),
    );
  }
  // `fuser -v /dev/nvidia*` after the remote shell expanded the glob.
  allow.tools.push(/^fuser -v(?: \/dev\/nvidia[a-z0-9-]*)+$/);
  allow.tools.push(/^fuser -v \/dev\/nvidia\*$/);
  return allow;
}

const ALLOW = buildAllowList();

export interface CommandLogLike {
  commandLog(machineId: string): Array<{ cmd: string; via: 'ssh' | 'tool' }>;
  /** How each machine is reached: its `access`, and for a container whether it has its own address. */
  inventory(): InventoryInput;
}

/**
 * The lines `machineId`'s SSH log may hold: a host's in its access mode (its own and its
 * containers' `ct`/pct lines); a container with its own address takes shell lines straight.
 */
function sshAllowed(inv: InventoryInput, machineId: string): RegExp[] {
  const host = inv.hosts?.find((h) => h.id === machineId);
  if (host !== undefined)
    return host.access === 'root-shell'
      ? [...ALLOW.shellDirect, ...ALLOW.shellPct]
      : [...ALLOW.agentDirect, ...ALLOW.agentCt];
  const ct = inv.containers?.find((c) => c.id === machineId);
  if (ct?.address === undefined) return []; // reached only through its host: nothing arrives by SSH
  return ct.access === 'agent' ? ALLOW.agentDirect : ALLOW.shellDirect;
}

/** Every logged command on these machines that is not a template (empty = proof). */
export function commandsOutsideTemplates(
  fleet: CommandLogLike,
  machineIds: readonly string[],
): Array<{ machine: string; via: string; cmd: string }> {
  const inv = fleet.inventory();
  const out: Array<{ machine: string; via: string; cmd: string }> = [];
  for (const m of machineIds) {
    const ssh = sshAllowed(inv, m);
    for (const e of fleet.commandLog(m))
      if (!(e.via === 'ssh' ? ssh : ALLOW.tools).some((re) => re.test(e.cmd)))
        out.push({ machine: m, via: e.via, cmd: e.cmd });
  }
  return out;
}
