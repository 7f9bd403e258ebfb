import type { Inventory } from '../config/inventory.ts';
import { findMachine, hostRouteFor, listMachines, routeFor, type Machine } from '../config/machines.ts';
import { asCodedError } from '../errors.ts';
import type { SshAccess } from '../ssh/agent-line.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { Executor, Route } from '../ssh/types.ts';
import {
  initPidOf,
  type AgentReading,
  type ContainerReading,
  type HostReading,
  type Login,
  type MachineReading,
  type ProbeRun,
  type RootKeysReading,
} from './judge.ts';
import {
  AGENT_PROBES,
  lxcInitPid,
  pidNamespaceOf,
  probeSpecs,
  rootKeysRead,
  type ProbeName,
} from '../agent-grammar/templates/doctor-probes.ts';

/** The doctor's I/O edge: runs the fixed probes through the same executor (pinned keys, timeouts) as the worker. */
export interface ReadDeps {
  exec: Executor['exec'];
  commandTimeoutMs: number;
  /** How the worker speaks to the machines (GPU_MEDIC_SSH_ACCESS); `agent` adds the forced-key probes. Default agent. */
  access?: SshAccess;
  /** The executor's raw line sender (Executor.probeLine), for the forced-key probes only. */
  probeLine?: Executor['probeLine'];
  /** The worker's clock (ms since the epoch), for the host clock check. Default Date.now. */
  now?: () => number;
  /**
   * The public key of the private key at this path (src/ssh/public-key.ts), for the root-keys check; absent:
   * that check is not made.
   */
  workerPublicKey?: (privateKeyPath: string) => Promise<RootKeysReading['worker']>;
}

/** The forced-key probes, on a machine the key logs into (not through pct exec: that is its host's agent). */
async function agentProbes(deps: ReadDeps, route: Route): Promise<AgentReading | null> {
  const send = deps.probeLine;
  if ((deps.access ?? 'agent') !== 'agent' || route.kind !== 'direct' || send === undefined) return null;
  const run = async (line: string): Promise<ProbeRun> => {
    try {
      const r = await send(route.endpoint, line, deps.commandTimeoutMs);
      return { ran: true, code: r.code, signal: r.signal, stdout: r.stdout, stderr: r.stderr, timedOut: r.timedOut };
    } catch (e) {
      const c = asCodedError(e);
      return { ran: false, code: c.code, message: c.message };
    }
  };
  const [version, unknownVerb, shell] = await Promise.all([
    run(AGENT_PROBES.version),
    run(AGENT_PROBES.unknownVerb),
    run(AGENT_PROBES.shell),
  ]);
  return { version, unknownVerb, shell };
}

/**
 * Root's key lines, read by the agent's fixed-path `root-keys` verb on a machine the worker's key logs into
 * (never by logging in as root: failed root logins count against the worker's address in PerSourcePenalties
 * and fail2ban). Only with agent access: with root-shell access the worker's key is root's by design.
 */
async function rootKeysProbe(deps: ReadDeps, route: Route, canRun: boolean): Promise<RootKeysReading | null> {
  const key = deps.workerPublicKey;
  if ((deps.access ?? 'agent') !== 'agent' || route.kind !== 'direct' || key === undefined || !canRun) return null;
  const [run, worker] = await Promise.all([
    probe(deps, route, rootKeysRead(deps.commandTimeoutMs)),
    key(route.endpoint.privateKeyPath),
  ]);
  return { run, worker };
}

async function probe(deps: ReadDeps, route: Route, spec: CommandSpec): Promise<ProbeRun> {
  try {
    const r = await deps.exec(route, spec);
    return { ran: true, code: r.code, signal: r.signal, stdout: r.stdout, stderr: r.stderr, timedOut: r.timedOut };
  } catch (e) {
    const c = asCodedError(e);
    return { ran: false, code: c.code, message: c.message };
  }
}

function loginOf(route: Route, hostId: string): Login {
  if (route.kind === 'direct')
    return {
      via: 'ssh',
      user: route.endpoint.username,
      where: `${route.endpoint.username}@${route.endpoint.host}:${route.endpoint.port}`,
    };
  return { via: 'pct', user: 'root', where: `pct exec ${route.vmid} on ${hostId}` };
}

/** `uname` first (login and `timeout -k`); the other probes only once something can run there. */
async function runProbes(
  deps: ReadDeps,
  route: Route,
  kind: 'host' | 'container',
  clockApart = false,
): Promise<Partial<Record<ProbeName, ProbeRun>>> {
  const specs = probeSpecs(kind, deps.commandTimeoutMs);
  const out: Partial<Record<ProbeName, ProbeRun>> = {};
  const first = specs.uname;
  if (first === undefined) return out;
  out.uname = await probe(deps, route, first);
  if (!out.uname.ran || out.uname.code !== 0) return out;
  await Promise.all(
    (Object.entries(specs) as Array<[ProbeName, CommandSpec]>)
      .filter(([name]) => name !== 'uname' && !(clockApart && name === 'clock'))
      .map(async ([name, spec]) => {
        out[name] = await probe(deps, route, spec);
      }),
  );
  return out;
}

async function readHost(inv: Inventory, m: Extract<Machine, { kind: 'host' }>, deps: ReadDeps): Promise<HostReading> {
  const route = hostRouteFor(inv, m.id);
  if (route === null) throw new Error(`no route to host ${m.id}`);
  const [probes, agent] = await Promise.all([runProbes(deps, route, 'host', true), agentProbes(deps, route)]);
  const mine = listMachines(inv).filter(
    (c): c is Extract<Machine, { kind: 'container' }> => c.kind === 'container' && c.hostId === m.id,
  );
  const canRun = probes.uname?.ran === true && probes.uname.code === 0;
  const [rootKeys, inits] = await Promise.all([
    rootKeysProbe(deps, route, canRun),
    Promise.all(
      mine.map(async (c) => {
        if (!canRun) return { containerId: c.id, vmid: c.vmid, lxcInfo: null, ns: null };
        const lxcInfo = await probe(deps, route, lxcInitPid(c.vmid, deps.commandTimeoutMs));
        // The PID is an integer read from the host, never text put into a command.
        const pid = lxcInfo.ran && lxcInfo.code === 0 ? initPidOf(lxcInfo) : null;
        const ns = pid === null ? null : await probe(deps, route, pidNamespaceOf(pid, deps.commandTimeoutMs));
        return { containerId: c.id, vmid: c.vmid, lxcInfo, ns };
      }),
    ),
  ]);
  // The clock last and on its own, timed: the round trip bounds how well the offset is known.
  const now = deps.now ?? Date.now;
  const clockSpec = probeSpecs('host', deps.commandTimeoutMs).clock;
  let clock: HostReading['clock'];
  if (canRun && clockSpec !== undefined) {
    const sentAt = now();
    probes.clock = await probe(deps, route, clockSpec);
    clock = { sentAt, answeredAt: now() };
  }
  return {
    kind: 'host',
    machineId: m.id,
    login: loginOf(route, m.id),
    probes,
    inits,
    agent,
    clock,
    rootKeys,
  };
}

async function readContainer(
  inv: Inventory,
  m: Extract<Machine, { kind: 'container' }>,
  deps: ReadDeps,
): Promise<ContainerReading> {
  const route = routeFor(inv, m.id);
  if (route === null) throw new Error(`no route to container ${m.id}`);
  const [probes, agent] = await Promise.all([runProbes(deps, route, 'container'), agentProbes(deps, route)]);
  const canRun = probes.uname?.ran === true && probes.uname.code === 0;
  return {
    agent,
    rootKeys: await rootKeysProbe(deps, route, canRun),
    kind: 'container',
    machineId: m.id,
    hostId: m.hostId,
    vmid: m.vmid,
    login: loginOf(route, m.hostId),
    probes,
  };
}

/**
 * What the doctor needs to judge `ids`: those machines, plus the host of every container among
 * them (a container's namespace and GPUs are checked against its host's view).
 */
function machinesToRead(inv: Inventory, ids: readonly string[]): Machine[] {
  const want = new Set(ids);
  for (const id of ids) {
    const m = findMachine(inv, id);
    if (m?.kind === 'container') want.add(m.hostId);
  }
  return listMachines(inv).filter((m) => want.has(m.id));
}

export async function readMachines(inv: Inventory, ids: readonly string[], deps: ReadDeps): Promise<MachineReading[]> {
  return Promise.all(
    machinesToRead(inv, ids).map((m) => (m.kind === 'host' ? readHost(inv, m, deps) : readContainer(inv, m, deps))),
  );
}
