/**
 * startFleet: simulated Proxmox hosts (a real sshd each, fake nvidia-smi/free/pct on PATH) and
 * LXC containers (real PID + mount namespaces, optionally with their own sshd), with GPU holders
 * as real processes. See docs in types.ts and the module comments of container.ts and
 * process-table.ts.
 */
import { writeTestKeys } from '../keys.ts';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { appendFile, chmod, chown, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { shellQuote } from '../../../src/text/shell-quote.ts';
import { promisify } from 'node:util';
import type { InventoryInput } from '../../../src/config/inventory.ts';
import { agentCommandLog, generateKeyPair, type Sshd, type SshdOptions, startSshd } from '../sshd.ts';
import { buildFleetTools, CACHE_ROOT, type FleetTools } from './build-tools.ts';
import { createContainerCgroup, removeContainerCgroup } from './cgroup.ts';
import { nsenterArgs, type RunningContainer, startContainer } from './container.ts';
import {
  createLxcContainer,
  DEFAULT_ID_SHIFT,
  type LxcContainerOptions,
  lxcAttachArgs,
  lxcCgroupPath,
  removeCgroupTree,
  startLxcContainer,
  stopAllLxc,
} from './lxc-container.ts';
import { writePveConfig } from './pve-config.ts';
import { defaultHostState, writeMachineFiles } from './machine-files.ts';
import { ensureUser, FLEET_USER, ProcessTable } from './process-table.ts';
import { hostPidOf } from './proc-ns.ts';
import {
  FLEET_DIR_PREFIX,
  isSame,
  killFleetProcesses,
  killQuietly,
  recordedPids,
  recordPid,
  removeLxcCgroups,
  removeRecordedCgroups,
  sweepStaleFleets,
  waitGone,
  writeOwner,
} from './registry.ts';
import { spawnReady, spawnReport } from './spawn-ready.ts';
import {
  gpuUsage,
  type GpuSpoof,
  type HostState,
  type MachineInfo,
  machineDir,
  readHolders,
  readJson,
  type KernelLogLine,
  type ToolLogEntry,
  visibleGpus,
  writeJsonAtomic,
} from './state.ts';
import type {
  CommandLogEntry,
  ContainerEngine,
  ContainerSpec,
  Fleet,
  FleetAccess,
  FleetOptions,
  FleetProcess,
  FleetSpec,
  HolderOptions,
  HostSpec,
  MachineView,
} from './types.ts';

const GiB = 1024 ** 3;
const execFileP = promisify(execFile);
/** What the driver prints after an Xid's number, for the ones tests use most (NVIDIA's catalogue). */
const XID_TEXT: Record<number, string> = {
  79: 'pid=0, name=python3, GPU has fallen off the bus.',
  48: 'pid=0, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.',
  31: 'pid=0, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ',
};
const ID = /^[a-z0-9][a-z0-9._-]{0,62}$/;

interface HostRt {
  spec: HostSpec;
  dir: string;
  sshd: Sshd | null;
  port: number;
  pinned: string;
  current: string;
}

interface CtRt {
  spec: ContainerSpec;
  dir: string;
  host: HostRt;
  running: RunningContainer | null;
  cgroup: string | null;
  port: number | null;
  pinned: string | null;
  current: string | null;
  /** Host PID of its sshd listener. */
  sshdHostPid: number | null;
  /** Its init as a GPU holder (`initHolds`), or null. */
  initHolder: FleetProcess | null;
  /** A real LXC container's options (lxc-container.ts); null: a namespace container. */
  lxc: LxcContainerOptions | null;
}

function validate(spec: FleetSpec): void {
  const ids = new Set<string>();
  const vmids = new Set<number>();
  for (const m of [...spec.hosts, ...(spec.containers ?? [])]) {
    if (!ID.test(m.id)) throw new Error(`fleet: bad machine id ${JSON.stringify(m.id)}`);
    if (ids.has(m.id)) throw new Error(`fleet: duplicate machine id ${m.id}`);
    ids.add(m.id);
  }
  for (const c of spec.containers ?? []) {
    if (!spec.hosts.some((h) => h.id === c.host)) throw new Error(`fleet: container ${c.id} on unknown host ${c.host}`);
    if (vmids.has(c.vmid)) throw new Error(`fleet: duplicate vmid ${c.vmid}`);
    vmids.add(c.vmid);
  }
}

/**
 * The engine containers get: the spec's, else GPU_MEDIC_FLEET_ENGINE, else real LXC where Debian's lxc
 * and busybox-static are installed (scripts/setup.sh installs them), else the namespace one.
 */
function containerEngine(spec: FleetSpec): ContainerEngine {
  const fromEnv = process.env.GPU_MEDIC_FLEET_ENGINE;
  if (spec.engine !== undefined) return spec.engine;
  if (fromEnv === 'lxc' || fromEnv === 'namespaces') return fromEnv;
  return existsSync('/usr/bin/lxc-start') &&
    existsSync('/usr/share/lxc/templates/lxc-busybox') &&
    existsSync('/bin/busybox')
    ? 'lxc'
    : 'namespaces';
}

/** See FleetSpec.access. */
function fleetAccess(spec: FleetSpec): FleetAccess {
  const env = process.env.GPU_MEDIC_FLEET_ACCESS;
  if (spec.access !== undefined) return spec.access;
  if (env === 'agent' || env === 'shell') return env;
  return 'agent';
}

/** The account the agent's install script makes (agent/install.sh). */
const AGENT_USER = 'gpu-medic';
/** Where the install script puts things, each bound to a dir of its own per fleet host. */
const AGENT_INSTALL_DIRS = {
  lib: '/usr/local/lib/gpu-medic',
  etc: '/etc/gpu-medic',
  home: '/var/lib/gpu-medic',
  log: '/var/log/gpu-medic',
  // The agent's run slots (run_dir=): each simulated host its own, as each real host has.
  run: '/run/gpu-medic',
  sudoers: '/etc/sudoers.d',
} as const;
const INSTALL_SCRIPT = resolve(dirname(fileURLToPath(import.meta.url)), '../../../agent/install.sh');

/**
 * The agent installed on one fleet host as an admin would (agent/install.sh), inside the host
 * sshd's own mount namespace, then its config pointed at this host's simulated tools. Every file
 * it writes is this host's own (bound dirs) except the account, which all hosts of this machine
 * share in its /etc/passwd. While it does not exist, an install may create it and holds the
 * machine-wide lock alone (`flock -x`: the first fleet on a fresh machine sets up one host at a
 * time); once it exists, installs hold the lock shared and run side by side, their `usermod -p`
 * queued by the system's own passwd lock (lckpwdf). One that still fails (lckpwdf gives up after
 * 15 s) runs once more alone.
 */
function agentInstall(
  hostId: string,
  hostDir: string,
  keys: { client: string; bot: string; worker: string },
  path: string,
  operator: string | null,
  rootKeys: HostSpec['rootKeys'],
) {
  const root = join(hostDir, 'agent-root');
  const binds = [
    ...Object.entries(AGENT_INSTALL_DIRS).map(([k, to]) => ({ from: join(root, k), to })),
    // Root's own ~/.ssh, this host's alone: the engineer's login (FleetOptions.operatorLogin), HostSpec.rootKeys.
    ...(operator === null && rootKeys === undefined ? [] : [{ from: join(hostDir, 'root-ssh'), to: '/root/.ssh' }]),
    // The tools where an admin installs them, for the engineer's shell.
    ...(operator === null ? [] : [{ from: join(hostDir, 'bin'), to: '/usr/local/bin' }]),
  ];
  const log = shellQuote(join(hostDir, 'agent-install.log'));
  const lock = shellQuote(join(CACHE_ROOT, 'agent-install.lock'));
  const install = `sh ${shellQuote(INSTALL_SCRIPT)} install --key ${shellQuote(keys.client)} --bot-key ${shellQuote(keys.bot)} --worker-key ${shellQuote(keys.worker)} --from 127.0.0.1 --path ${shellQuote(path)} --machine ${shellQuote(hostId)} >${log} 2>&1`;
  const setup = [
    `{ id -u ${AGENT_USER} >/dev/null 2>&1 && flock -s ${lock} ${install}; } || flock -x ${lock} ${install} || { cat ${log} >&2; exit 1; }`,
    // What an admin would not add: a logging wrapper before the agent's front, so tests see what was sent.
    ...agentCommandLog(`${AGENT_INSTALL_DIRS.lib}/gpu-medic-agent`, join(hostDir, 'commands.jsonl')),
    ...(operator === null ? [] : operatorSetup(operator)),
    ...rootKeyLines(rootKeys ?? [], keys.client),
  ];
  return { binds, setup };
}

/**
 * HostSpec.rootKeys: the worker's public key added to this host's root authorized_keys (its own bound
 * ~/.ssh, in its sshd's mount namespace), plain as a root-shell setup left it, or forced to the agent as
 * `install.sh --root-forced` writes it.
 */
function rootKeyLines(lines: NonNullable<HostSpec['rootKeys']>, workerPub: string): string[] {
  const forced = `restrict,command="${AGENT_INSTALL_DIRS.lib}/gpu-medic-agent" `;
  return [
    'install -d -m 0700 /root/.ssh',
    ...lines.map(
      (l) =>
        `{ printf %s ${shellQuote(l === 'worker-forced' ? forced : '')}; cat ${shellQuote(workerPub)}; } >> /root/.ssh/authorized_keys`,
    ),
    'touch /root/.ssh/authorized_keys && chmod 0600 /root/.ssh/authorized_keys',
  ];
}

/**
 * The engineer's key for root (FleetOptions.operatorLogin), in the sshd's mount namespace. This
 * machine's root `~/.bashrc` is a developer's (pyenv init: 140 ms a session, which bash sources for a
 * command over ssh); a host's root has Debian's, which returns at once for a command: bound over it.
 */
function operatorSetup(publicKey: string): string[] {
  return [
    'install -d -m 0700 /root/.ssh',
    `echo ${shellQuote(publicKey)} >> /root/.ssh/authorized_keys`,
    'chmod 0600 /root/.ssh/authorized_keys',
    '[ ! -f /root/.bashrc ] || mount --bind /etc/skel/.bashrc /root/.bashrc',
  ];
}

/**
 * The agent installed in a container reached at its own address (`install.sh --role self`), run by
 * its sshd's setup inside the container, as its root, from a copy of agent/ in the fleet dir (which
 * the container sees). Two logins, as tests choose between them: root's own forced key
 * (`--root-forced`: sudo cannot work here, the container's /usr is the host's, whose setuid sudo
 * belongs to a uid this unprivileged container does not map), and the non-root `fleetuser` whose
 * agent runs as fleetuser itself (`--no-sudo`: the login of a container whose owner gives no root,
 * which can read but not signal root's processes).
 */
function selfAgentInstall(
  ct: { id: string; vmid: number },
  src: string,
  ctDir: string,
  keys: { client: string; bot: string; worker: string },
  operator: string | null,
): NonNullable<SshdOptions['agent']> {
  const common = `--role self --machine ${shellQuote(ct.id)} --vmid ${ct.vmid} --key ${shellQuote(keys.client)} --bot-key ${shellQuote(keys.bot)} --worker-key ${shellQuote(keys.worker)} --from 127.0.0.1 --path ${shellQuote(`${join(ctDir, 'bin')}:${join(ctDir, 'sys')}`)}`;
  const log = shellQuote(join(ctDir, 'sshd', 'agent-install.log'));
  const install = (mode: string) =>
    `sh ${shellQuote(join(src, 'install.sh'))} install ${mode} ${common} >>${log} 2>&1 || { cat ${log} >&2; exit 1; }`;
  return {
    binds: [],
    setup: [
      `: >${log}`,
      install('--root-forced'),
      // fleetuser is the container's own account, which install.sh did not make: adopted, as its owner would.
      install(`--no-sudo --adopt --user ${FLEET_USER}`),
      ...agentCommandLog(`${AGENT_INSTALL_DIRS.lib}/gpu-medic-agent`, join(ctDir, 'commands.jsonl')),
      // The container's own run slots (root's agent; fleetuser's live in its home).
      `mkdir -p ${shellQuote(join(ctDir, 'run'))} && sed -i ${shellQuote(`s|^run_dir=.*|run_dir=${join(ctDir, 'run')}|`)} ${AGENT_INSTALL_DIRS.etc}/agent.conf`,
      // Beside the agent's forced line in root's own authorized_keys.
      ...(operator === null
        ? []
        : [
            ...operatorSetup(operator),
            `mkdir -p /usr/local/bin && mount --bind ${shellQuote(join(ctDir, 'bin'))} /usr/local/bin`,
          ]),
    ],
  };
}

const BASE_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root' };

export async function startFleet(spec: FleetSpec, opts: FleetOptions = {}): Promise<Fleet> {
  validate(spec);
  const [, tools] = await Promise.all([sweepStaleFleets(), buildFleetTools()]);
  let dir: string;
  if (opts.dir !== undefined) {
    dir = opts.dir;
    await mkdir(dir, { recursive: true });
  } else {
    dir = await mkdtemp(join('/tmp', FLEET_DIR_PREFIX));
  }
  await chmod(dir, 0o755); // holders may run as another user and open the device files inside
  await mkdir(join(dir, 'pids'), { recursive: true });
  await writeOwner(dir);
  await writeFile(join(dir, 'signals.log'), '', { mode: 0o666 });
  await chmod(join(dir, 'signals.log'), 0o666); // holders in unprivileged containers are not host root

  // Last resort when the test process exits without stop(): kill what we started, by PID.
  const onExit = () => {
    for (const p of recordedPids(dir)) if (isSame(p)) killQuietly(p.pid);
  };
  process.on('exit', onExit);

  try {
    return await build(spec, opts, dir, tools, onExit);
  } catch (e) {
    await stopAllLxc(join(dir, 'lxc'));
    await killFleetProcesses(dir);
    await removeRecordedCgroups(dir);
    await removeLxcCgroups(dir);
    process.off('exit', onExit);
    if (opts.keepDir !== true) await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

async function build(
  spec: FleetSpec,
  opts: FleetOptions,
  dir: string,
  tools: FleetTools,
  onExit: () => void,
): Promise<Fleet> {
  // Every machine offers the non-root login; it must exist before any sshd or container starts,
  // not only once some test has spawned a process as it (a fresh CI machine has no such user).
  await ensureUser(FLEET_USER);
  const engine = containerEngine(spec);
  const lxcPath = join(dir, 'lxc');
  // Unique per fleet: concurrent fleets use the same vmids. Recorded for the sweep of a dead fleet.
  const cgroupTag = `gpu-medic-${basename(dir).replace(FLEET_DIR_PREFIX, '')}`;
  if (engine === 'lxc') {
    await mkdir(lxcPath, { recursive: true });
    await writeFile(join(dir, 'lxc.json'), `${JSON.stringify({ lxcPath, cgroupTag })}\n`);
  }
  const client = await generateKeyPair(join(dir, 'keys'), 'client');
  const operator = opts.operatorLogin === true ? await generateKeyPair(join(dir, 'keys'), 'operator') : null;
  const signingKeys = writeTestKeys(join(dir, 'keys'), 'fleet');
  const procs = new ProcessTable(dir, tools);
  // One server answers every machine's nvidia-smi and free (a C client per call, no Node start).
  const toolSocket = join(dir, 'tools.sock');
  const toolServer = await spawnReady(process.execPath, [tools.toolServer, toolSocket, String(process.pid)], {
    env: BASE_ENV,
    stderrPath: join(dir, 'tool-server.stderr'),
  });
  if (toolServer.child.pid !== undefined) recordPid(dir, toolServer.child.pid, 'tool server');

  // A host whose machines lack some programs gets its own system PATH (sys/), and so does every
  // container on it: `pct exec` keeps the host's PATH, and each container binds its own sys/ there.
  // Every machine gets one, so a tool taken away is gone whatever this machine has installed (lxc-info).
  const ownPath = (_hostId: string): boolean => true;
  const basePath = (mdir: string, own: boolean): Pick<SshdOptions, 'basePath'> =>
    own ? { basePath: join(mdir, 'sys') } : {};

  const access = fleetAccess(spec);
  if (operator !== null && access !== 'agent') throw new Error('fleet: operatorLogin is for agent access only');
  if (access !== 'agent' && spec.hosts.some((h) => h.rootKeys !== undefined))
    throw new Error('fleet: rootKeys is for agent access only');
  const agentKeys = {
    client: `${client.privateKeyPath}.pub`,
    bot: signingKeys.workerEnv.GPU_MEDIC_BOT_PUBLIC_KEY_FILES ?? '',
    worker: signingKeys.botEnv.GPU_MEDIC_WORKER_PUBLIC_KEY_FILES ?? '',
  };
  /** A container with its own address goes through its own agent too, on real LXC (see selfAgentInstall). */
  const selfAgent = (cs: ContainerSpec): boolean => access === 'agent' && engine === 'lxc' && cs.ownAddress === true;
  // What containers install from: agent/ is not inside them, the fleet dir is.
  const agentSrc = join(dir, 'agent-src');
  if (access === 'agent' && engine === 'lxc' && (spec.containers ?? []).some((cs) => cs.ownAddress === true))
    await execFileP('cp', ['-r', dirname(INSTALL_SCRIPT), agentSrc]);
  const hostSshdOptions = (h: { dir: string; spec: HostSpec }, port?: number, keepKey = false): SshdOptions => ({
    dir: join(h.dir, 'sshd'),
    ...(keepKey ? { hostKeyPath: join(h.dir, 'sshd', 'ssh_host_ed25519_key') } : {}),
    authorizedKeys: [client.publicKey],
    pathPrefix: join(h.dir, 'bin'),
    ...basePath(h.dir, ownPath(h.spec.id)),
    commandLog: join(h.dir, 'commands.jsonl'),
    ...(port === undefined ? {} : { port }),
    ...(access === 'agent'
      ? {
          agent: agentInstall(
            h.spec.id,
            h.dir,
            agentKeys,
            `${join(h.dir, 'bin')}:${join(h.dir, 'sys')}`,
            operator?.publicKey ?? null,
            h.spec.rootKeys,
          ),
        }
      : {}),
  });

  const startHostSshd = async (h: { dir: string; spec: HostSpec }, port?: number, keepKey = false): Promise<Sshd> => {
    const sshd = await startSshd(hostSshdOptions(h, port, keepKey));
    recordPid(dir, sshd.pid, 'sshd');
    // sshd reads authorized_keys as the user logging in: let non-root users (e.g. fleetuser) log in too.
    if (access === 'shell') await chmod(join(h.dir, 'sshd', 'authorized_keys'), 0o644);
    await chmod(join(h.dir, 'commands.jsonl'), 0o666); // ...and have their commands logged
    return sshd;
  };

  const hosts = new Map<string, HostRt>();
  await Promise.all(
    spec.hosts.map(async (hs) => {
      const mdir = machineDir(dir, hs.id);
      await writeMachineFiles({
        dir: mdir,
        tools,
        toolSocket,
        hostState: defaultHostState(hs),
        info: {
          id: hs.id,
          kind: 'host',
          hostId: hs.id,
          hostDir: mdir,
          vmid: null,
          hostProc: '/proc',
          cgroup: null,
          ...(engine === 'lxc' ? { lxcPath } : {}),
        },
        omit: ownPath(hs.id) ? (hs.omitTools ?? []) : null,
      });
      const sshd = await startHostSshd({ dir: mdir, spec: hs });
      hosts.set(hs.id, {
        spec: hs,
        dir: mdir,
        sshd,
        port: sshd.port,
        pinned: sshd.hostKeyFingerprint,
        current: sshd.hostKeyFingerprint,
      });
    }),
  );
  const hostOf = (id: string): HostRt => {
    const h = hosts.get(id);
    if (h === undefined) throw new Error(`fleet: no host ${id}`);
    return h;
  };

  /** Starts the shared test sshd inside the container (see tools/container-sshd.ts). */
  const startContainerSshd = async (c: CtRt, port?: number, keepKey = false): Promise<void> => {
    if (c.running === null) throw new Error(`fleet: container ${c.spec.id} is stopped`);
    const o: SshdOptions = {
      dir: join(c.dir, 'sshd'),
      // A restarted container keeps its host key, as a real one does.
      ...(keepKey ? { hostKeyPath: join(c.dir, 'sshd', 'ssh_host_ed25519_key') } : {}),
      authorizedKeys: [client.publicKey],
      pathPrefix: join(c.dir, 'bin'),
      ...basePath(c.dir, ownPath(c.spec.host)),
      commandLog: join(c.dir, 'commands.jsonl'),
      ...(port === undefined ? {} : { port }),
      ...(selfAgent(c.spec)
        ? { agent: selfAgentInstall(c.spec, agentSrc, c.dir, agentKeys, operator?.publicKey ?? null) }
        : {}),
    };
    if (c.lxc !== null && c.lxc.idShift !== null) {
      // Its sshd runs as the container's root, host uid <shift>: it writes its keys and log there.
      await mkdir(join(c.dir, 'sshd'), { recursive: true });
      await appendFile(join(c.dir, 'commands.jsonl'), '');
      await chown(join(c.dir, 'sshd'), c.lxc.idShift, c.lxc.idShift);
      await chown(join(c.dir, 'commands.jsonl'), c.lxc.idShift, c.lxc.idShift);
    }
    const enter =
      c.lxc === null
        ? { file: 'nsenter', args: nsenterArgs(c.running.initHostPid) }
        : { file: 'lxc-attach', args: lxcAttachArgs(c.lxc.lxcPath, c.lxc.vmid) };
    const reportPath = join(c.dir, 'sshd', 'ready.json');
    const report = await spawnReport(
      enter.file,
      [...enter.args, process.execPath, tools.containerSshd, JSON.stringify(o), reportPath],
      {
        env: { ...BASE_ENV, ...(c.cgroup === null ? {} : { FLEET_CGROUP: c.cgroup }) },
        reportPath,
        stderrPath: join(c.dir, 'sshd-start.log'),
      },
    );
    const info = JSON.parse(report) as { port: number; pid: number; hostKeyFingerprint: string };
    c.port = info.port;
    c.current = info.hostKeyFingerprint;
    c.pinned ??= info.hostKeyFingerprint;
    c.sshdHostPid = hostPidOf(c.running.initHostPid, info.pid);
    if (c.sshdHostPid !== null) recordPid(dir, c.sshdHostPid, `sshd in ${c.spec.id}`);
  };

  /** A container names its GPUs as it numbers them; a holder registers (and opens) the host's. */
  const hostGpusOf = (
    machineId: string,
    t: { hostDir: string; machineDir: string },
    gpus: HolderOptions['gpus'],
  ): HolderOptions['gpus'] => {
    const s = readJson<HostState>(join(t.hostDir, 'state.json'));
    const shown = visibleGpus(s, readJson<MachineInfo>(join(t.machineDir, 'machine.json')));
    return gpus.map((g) => {
      const hit = shown.find((x) => x.index === g.index);
      if (hit === undefined) throw new Error(`fleet: ${machineId} has no GPU ${g.index}`);
      return { ...g, index: hit.gpu.index };
    });
  };

  const cts = new Map<string, CtRt>();
  /** Starts (or starts again) a container: new init, new PID namespace; its own sshd on its old port. */
  const bootContainer = async (c: CtRt): Promise<void> => {
    const cs = c.spec;
    c.cgroup ??= createContainerCgroup(dir, cs.vmid);
    const baseTarget = {
      machineId: cs.id,
      hostDir: c.host.dir,
      kind: 'container' as const,
      hostProc: join(c.dir, 'hostproc'),
      machineDir: c.dir,
      cgroup: c.cgroup,
    };
    const initHolds =
      cs.initHolds === undefined
        ? null
        : { ...cs.initHolds, gpus: hostGpusOf(cs.id, { hostDir: c.host.dir, machineDir: c.dir }, cs.initHolds.gpus) };
    const initHolder = initHolds === null ? null : await procs.initEnv(baseTarget, initHolds);
    const running =
      c.lxc !== null
        ? await startLxcContainer({ ...c.lxc, ...(initHolder ? { initEnv: initHolder.env } : {}) })
        : await startContainer({
            ctDir: c.dir,
            hostDir: c.host.dir,
            hostname: cs.id,
            tools,
            cgroup: c.cgroup,
            hideProc: cs.hideProc === true,
            systemPath: ownPath(cs.host),
            gpus: cs.gpus ?? null,
            ...(initHolder ? { initEnv: initHolder.env } : {}),
          });
    recordPid(dir, running.launcherPid, `launcher of ${cs.id}`);
    recordPid(dir, running.initHostPid, `init of ${cs.id}`);
    writeJsonAtomic(join(c.dir, 'init.json'), { hostPid: running.initHostPid, startTime: running.initStartTime });
    writeJsonAtomic(join(c.host.dir, 'containers', `${cs.vmid}.json`), {
      id: cs.id,
      vmid: cs.vmid,
      dir: c.dir,
      ...(c.lxc === null ? {} : { lxcPath: c.lxc.lxcPath, cgroupTag }),
    });
    c.running = running;
    if (c.lxc !== null && cs.hideProc === true) {
      // As an admin of the container would: its root remounts its own /proc.
      await execFileP('lxc-attach', [
        ...lxcAttachArgs(c.lxc.lxcPath, cs.vmid),
        'mount',
        '-o',
        'remount,hidepid=invisible',
        '/proc',
      ]);
    }
    if (initHolder && initHolds) {
      c.initHolder = procs.adoptInit({ ...baseTarget, initHostPid: running.initHostPid }, initHolder.id, initHolds, {
        hostPid: running.initHostPid,
        startTime: running.initStartTime,
        exited: running.exited,
      });
    }
    if (cs.ownAddress === true) await startContainerSshd(c, c.port ?? undefined, c.pinned !== null);
  };
  await Promise.all(
    (spec.containers ?? []).map(async (cs) => {
      const host = hostOf(cs.host);
      const cdir = machineDir(dir, cs.id);
      const isLxc = engine === 'lxc';
      // A real LXC container's cgroup is LXC's (lxc.cgroup.dir.*): the pids hierarchy's path, for tests to read.
      const cgroup = isLxc ? lxcCgroupPath(cgroupTag, cs.vmid) : createContainerCgroup(dir, cs.vmid);
      if (cgroup !== null && !isLxc) await appendFile(join(dir, 'cgroups'), `${cgroup}\n`);
      await writeMachineFiles({
        dir: cdir,
        tools,
        toolSocket,
        info: {
          id: cs.id,
          kind: 'container',
          hostId: cs.host,
          hostDir: host.dir,
          vmid: cs.vmid,
          hostProc: join(cdir, 'hostproc'),
          cgroup,
          ...(cs.gpus === undefined ? {} : { gpus: cs.gpus }),
        },
        omit: ownPath(cs.host) ? (cs.omitTools ?? []) : null,
      });
      const c: CtRt = {
        spec: cs,
        dir: cdir,
        host,
        running: null,
        cgroup,
        port: null,
        pinned: null,
        current: null,
        sshdHostPid: null,
        initHolder: null,
        lxc: isLxc
          ? {
              lxcPath,
              vmid: cs.vmid,
              hostname: cs.id,
              ctDir: cdir,
              hostDir: host.dir,
              fleetDir: dir,
              tools,
              cgroupTag,
              idShift: cs.privileged === true ? null : (cs.idmapBase ?? DEFAULT_ID_SHIFT),
              net: cs.ownAddress === true ? 'none' : 'empty',
              systemPath: ownPath(cs.host),
              gpus: cs.gpus ?? null,
              ownUsers: selfAgent(cs),
            }
          : null,
      };
      cts.set(cs.id, c);
      await writePveConfig(host.dir, cs, readJson<HostState>(join(host.dir, 'state.json')).gpus.length, isLxc);
      if (c.lxc !== null) await createLxcContainer(c.lxc);
      await bootContainer(c);
    }),
  );

  const knownHostsPath = join(dir, 'known_hosts');
  const knownLines: string[] = [];
  for (const h of hosts.values())
    knownLines.push(
      `[127.0.0.1]:${h.port} ${(await readFile(join(h.dir, 'sshd', 'ssh_host_ed25519_key.pub'), 'utf8')).trim()}`,
    );
  for (const c of cts.values()) {
    if (c.port === null) continue;
    knownLines.push(
      `[127.0.0.1]:${c.port} ${(await readFile(join(c.dir, 'sshd', 'ssh_host_ed25519_key.pub'), 'utf8')).trim()}`,
    );
  }
  await writeFile(knownHostsPath, `${knownLines.join('\n')}\n`);

  const ctOf = (id: string): CtRt => {
    const c = cts.get(id);
    if (c === undefined) throw new Error(`fleet: no container ${id}`);
    return c;
  };
  const isHost = (id: string) => hosts.has(id);
  const hostStatePath = (hostId: string) => join(hostOf(hostId).dir, 'state.json');
  const updateState = async (hostId: string, f: (s: HostState) => void) => {
    const s = readJson<HostState>(hostStatePath(hostId));
    f(s);
    writeJsonAtomic(hostStatePath(hostId), s);
  };
  const gpuOf = (s: HostState, hostId: string, index: number) => {
    const g = s.gpus.find((x) => x.index === index);
    if (g === undefined) throw new Error(`fleet: host ${hostId} has no GPU ${index}`);
    return g;
  };

  const stopContainer = async (c: CtRt) => {
    if (c.running === null) return;
    procs.quietMachine(c.spec.id);
    if (isSame({ pid: c.running.initHostPid, startTime: c.running.initStartTime })) killQuietly(c.running.initHostPid);
    await c.running.exited;
    await waitGone([c.running.initHostPid], 5000);
    if (c.lxc === null) removeContainerCgroup(c.cgroup);
    c.running = null;
    c.sshdHostPid = null;
  };

  const target = (machineId: string) => {
    if (isHost(machineId)) {
      const h = hostOf(machineId);
      return {
        machineId,
        hostDir: h.dir,
        kind: 'host' as const,
        initHostPid: null,
        hostProc: '/proc',
        machineDir: h.dir,
        cgroup: null,
      };
    }
    const c = ctOf(machineId);
    if (c.running === null) throw new Error(`fleet: container ${machineId} is stopped`);
    return {
      machineId,
      hostDir: c.host.dir,
      kind: 'container' as const,
      initHostPid: c.running.initHostPid,
      hostProc: join(c.dir, 'hostproc'),
      machineDir: c.dir,
      cgroup: c.lxc === null ? c.cgroup : null,
      ...(c.lxc === null
        ? {}
        : { lxc: { lxcPath, vmid: c.spec.vmid, cgroupTag, unprivileged: c.lxc.idShift !== null } }),
    };
  };

  const fleet: Fleet = {
    dir,
    clientKeyPath: client.privateKeyPath,
    operatorKeyPath: operator?.privateKeyPath ?? null,
    keys: signingKeys,
    knownHostsPath,

    inventory(): InventoryInput {
      return {
        defaults: { user: 'root', keyFile: client.privateKeyPath },
        hosts: spec.hosts
          .map((hs) => hostOf(hs.id))
          .map((h) => ({
            id: h.spec.id,
            ...(h.spec.site === undefined ? {} : { site: h.spec.site }),
            address: '127.0.0.1',
            port: h.port,
            user: access === 'agent' ? AGENT_USER : 'root',
            access: access === 'agent' ? 'agent' : 'root-shell',
            keyFile: client.privateKeyPath,
            hostKeys: [h.pinned],
          })),
        containers: (spec.containers ?? [])
          .map((cs) => ctOf(cs.id))
          .map((c) =>
            c.spec.ownAddress === true && c.pinned !== null
              ? {
                  id: c.spec.id,
                  vmid: c.spec.vmid,
                  host: c.spec.host,
                  address: '127.0.0.1',
                  port: c.port ?? 22,
                  user: 'root',
                  // Its own agent (selfAgentInstall); on the namespace engine the harness's wrapper (any command as root).
                  access: selfAgent(c.spec) ? 'agent' : 'root-shell',
                  keyFile: client.privateKeyPath,
                  hostKeys: [c.pinned],
                }
              : { id: c.spec.id, vmid: c.spec.vmid, host: c.spec.host },
          ),
      };
    },

    machine(id: string): MachineView {
      if (isHost(id)) {
        const h = hostOf(id);
        return {
          id,
          kind: 'host',
          hostId: id,
          vmid: null,
          dir: h.dir,
          sshPort: h.sshd === null ? null : h.port,
          hostKeyFingerprint: h.current,
          initHostPid: null,
          cgroup: null,
          engine: null,
        };
      }
      const c = ctOf(id);
      return {
        id,
        kind: 'container',
        hostId: c.spec.host,
        vmid: c.spec.vmid,
        dir: c.dir,
        sshPort: c.running === null ? null : c.port,
        hostKeyFingerprint: c.current,
        initHostPid: c.running?.initHostPid ?? null,
        cgroup: c.cgroup,
        engine: c.lxc === null ? 'namespaces' : 'lxc',
      };
    },

    async spawnHolder(machineId, o) {
      const t = target(machineId);
      return procs.spawn(t, 'holder', { ...o, gpus: hostGpusOf(machineId, t, o.gpus) });
    },

    async spawnBystander(machineId, o) {
      return procs.spawn(target(machineId), 'bystander', o);
    },

    async takePid(machineId, at, o) {
      const t = target(machineId);
      const holding = o.gpus !== undefined && o.gpus.length > 0;
      const gpus = holding ? hostGpusOf(machineId, t, o.gpus ?? []) : [];
      const p = await procs.spawn(t, holding ? 'holder' : 'bystander', { ...o, gpus, atPid: at });
      if (p.hostPid !== at.hostPid || (at.containerPid !== undefined && p.containerPid !== at.containerPid))
        throw new Error(
          `fleet: ${p.id} got PID ${p.hostPid}/${p.containerPid}, not ${at.hostPid}/${at.containerPid ?? '-'}`,
        );
      return p;
    },

    async endProcess(p) {
      // By PID and start time: its PID may already belong to someone else (PIDs wrap at pid_max).
      if (isSame({ pid: p.hostPid, startTime: p.startTime })) killQuietly(p.hostPid);
      await p.exited;
      const left = await waitGone([p.hostPid], 5000);
      if (left.length > 0) throw new Error(`fleet: ${p.id} (PID ${p.hostPid}) still there after SIGKILL`);
    },

    async restartContainer(containerId) {
      const c = ctOf(containerId);
      await stopContainer(c);
      // Its processes died with it: seen gone (and not reported as signals) before new ones count.
      await Promise.all(
        procs
          .list()
          .filter((p) => p.machine === containerId)
          .map((p) => p.exited),
      );
      procs.unquietMachine(containerId);
      await bootContainer(c);
    },

    async startMachine(machineId) {
      if (isHost(machineId)) {
        const h = hostOf(machineId);
        // A host that comes back keeps its host key, as a rebooted host does (replaceHostKey makes a new one).
        if (h.sshd === null) {
          h.sshd = await startHostSshd(h, h.port, true);
          h.current = h.sshd.hostKeyFingerprint;
        }
        return;
      }
      const c = ctOf(machineId);
      if (c.running !== null) return;
      await Promise.all(
        procs
          .list()
          .filter((p) => p.machine === machineId)
          .map((p) => p.exited),
      );
      procs.unquietMachine(machineId);
      await bootContainer(c);
    },

    initHolder(containerId) {
      return ctOf(containerId).initHolder;
    },

    async setLeak(hostId, gpuIndex, mib) {
      await updateState(hostId, (s) => {
        gpuOf(s, hostId, gpuIndex).leakMiB = mib;
      });
    },

    async setGpuError(hostId, kind, gpuIndex) {
      await updateState(hostId, (s) => {
        if (kind === 'nvml_version_mismatch') s.error = kind;
        else if (kind === 'gpu_lost') gpuOf(s, hostId, gpuIndex ?? 0).error = 'gpu_lost';
        else if (gpuIndex !== undefined) gpuOf(s, hostId, gpuIndex).error = null;
        else {
          s.error = null;
          for (const g of s.gpus) g.error = null;
        }
      });
    },

    async setHang(machineId, on) {
      const path = join(isHost(machineId) ? hostOf(machineId).dir : ctOf(machineId).dir, 'hang');
      if (on) await writeFile(path, '');
      else await rm(path, { force: true });
    },

    async setDrop(hostId, on) {
      const path = join(hostOf(hostId).dir, 'drop');
      if (on) await writeFile(path, '');
      else await rm(path, { force: true });
    },

    async setRam(hostId, ram) {
      await updateState(hostId, (s) => {
        s.ram = { totalBytes: Math.round(ram.totalGiB * GiB), usedBytes: Math.round(ram.usedGiB * GiB) };
      });
    },

    async replaceHostKey(machineId) {
      if (isHost(machineId)) {
        const h = hostOf(machineId);
        if (h.sshd !== null) await h.sshd.stop();
        h.sshd = await startHostSshd(h, h.port); // no hostKeyPath: a new key is generated
        h.current = h.sshd.hostKeyFingerprint;
        return;
      }
      const c = ctOf(machineId);
      if (c.port === null || c.running === null) throw new Error(`fleet: container ${machineId} has no running sshd`);
      if (c.sshdHostPid !== null) {
        killQuietly(c.sshdHostPid);
        await waitGone([c.sshdHostPid], 5000);
      }
      await startContainerSshd(c, c.port);
    },

    async freezeMachine(hostId, on) {
      const sshd = hostOf(hostId).sshd;
      if (sshd === null) throw new Error(`fleet: host ${hostId} has no running sshd`);
      // Listener first when freezing (no new session starts meanwhile), last when thawing.
      const pids = [sshd.pid, ...(await sshd.descendants())];
      for (const pid of on ? pids : pids.reverse()) {
        try {
          process.kill(pid, on ? 'SIGSTOP' : 'SIGCONT');
        } catch {
          // exited meanwhile
        }
      }
    },

    async spoofGpuIdentity(containerId, containerIndex, asHostIndex) {
      const c = ctOf(containerId);
      const path = join(c.dir, 'spoof.json');
      const spoof: GpuSpoof = existsSync(path) ? readJson<GpuSpoof>(path) : {};
      if (asHostIndex === null) delete spoof[String(containerIndex)];
      else {
        const g = gpuOf(readJson<HostState>(hostStatePath(c.host.spec.id)), c.host.spec.id, asHostIndex);
        spoof[String(containerIndex)] = { uuid: g.uuid, busId: g.busId };
      }
      writeJsonAtomic(path, spoof);
    },

    async renumberHostGpus(hostId, order) {
      await updateState(hostId, (s) => {
        if (
          [...order].sort((a, b) => a - b).join() !==
          s.gpus
            .map((g) => g.index)
            .sort((a, b) => a - b)
            .join()
        )
          throw new Error(`fleet: ${JSON.stringify(order)} is not an order of ${hostId}'s GPUs`);
        const next = order.map((from, i) => ({ ...gpuOf(s, hostId, from), index: i }));
        s.gpus = next;
      });
    },

    async removeTool(machineId, tool) {
      // Its PATH is its bin/ and its sys/ only: gone from both, the tool is gone for it, whatever is installed.
      const mdir = isHost(machineId) ? hostOf(machineId).dir : ctOf(machineId).dir;
      await rm(join(mdir, 'bin', tool), { force: true });
      await rm(join(mdir, 'sys', tool), { force: true });
    },

    async kernelLog(hostId, text) {
      if (/[\n\r]/.test(text)) throw new Error('fleet: one kernel log line at a time');
      await appendFile(
        join(hostOf(hostId).dir, 'kmsg.jsonl'),
        `${JSON.stringify({ ts: Date.now(), text } satisfies KernelLogLine)}\n`,
      );
    },

    async logXid(hostId, gpuIndex, xid, detail) {
      const g = gpuOf(readJson<HostState>(hostStatePath(hostId)), hostId, gpuIndex);
      // `00000000:01:00.0` as the driver prints it in an Xid: `0000:01:00`.
      const pci = g.busId
        .toLowerCase()
        .replace(/^0000(?=[0-9a-f]{4}:)/, '')
        .replace(/\.[0-7]$/, '');
      const words = detail ?? XID_TEXT[xid] ?? '...';
      await fleet.kernelLog(hostId, `NVRM: Xid (PCI:${pci}): ${xid}, ${words}`);
    },

    async setRecoveryAction(hostId, gpuIndex, action) {
      await updateState(hostId, (s) => {
        const g = gpuOf(s, hostId, gpuIndex);
        if (action === null) delete g.recoveryAction;
        else g.recoveryAction = action;
      });
    },

    async setGpuGone(hostId, gpuIndex, gone) {
      await updateState(hostId, (s) => {
        const g = gpuOf(s, hostId, gpuIndex);
        if (gone) g.gone = true;
        else delete g.gone;
      });
    },

    async setRecoveryActionSupported(hostId, on) {
      await updateState(hostId, (s) => {
        s.recoveryActionField = on;
      });
    },

    releaseStuck: (p) => procs.releaseStuck(p),
    endTeardown: (p) => procs.endTeardown(p),

    async stopMachine(machineId) {
      if (isHost(machineId)) {
        const h = hostOf(machineId);
        await h.sshd?.stop();
        h.sshd = null;
        return;
      }
      await stopContainer(ctOf(machineId));
    },

    commandLog(machineId) {
      const mdir = isHost(machineId) ? hostOf(machineId).dir : ctOf(machineId).dir;
      const out: CommandLogEntry[] = [];
      const lines = (p: string) =>
        existsSync(p)
          ? readFileSync(p, 'utf8')
              .split('\n')
              .filter((l) => l !== '')
          : [];
      for (const l of lines(join(mdir, 'commands.jsonl'))) {
        const e = JSON.parse(l) as { ts: string; cmd: string };
        out.push({ ts: Date.parse(e.ts), cmd: e.cmd, via: 'ssh' });
      }
      for (const l of lines(join(mdir, 'tools.log'))) {
        const e = JSON.parse(l) as ToolLogEntry;
        out.push({ ts: e.ts, cmd: [e.tool, ...e.argv].join(' '), via: 'tool' });
      }
      return out.sort((a, b) => a.ts - b.ts);
    },

    signals: () => procs.signals(),

    gpuMemory(hostId) {
      const h = hostOf(hostId);
      const s = readJson<HostState>(join(h.dir, 'state.json'));
      return gpuUsage(s, readHolders(h.dir), '/proc', Date.now()).map((u) => ({
        index: u.gpu.index,
        usedMiB: u.usedMiB,
        totalMiB: u.gpu.memoryTotalMiB,
      }));
    },

    processes: () => procs.list(),

    async stop() {
      procs.stopAll();
      await Promise.all([...cts.values()].map(stopContainer));
      // Only those still the same process: a dead one's PID may be reused by another test's process by now.
      for (const p of procs.list()) if (isSame({ pid: p.hostPid, startTime: p.startTime })) killQuietly(p.hostPid);
      await Promise.all([...hosts.values()].map(async (h) => h.sshd?.stop()));
      if (engine === 'lxc') await stopAllLxc(lxcPath); // one started behind the fleet's back (`pct start`)
      const left = await killFleetProcesses(dir);
      await removeRecordedCgroups(dir);
      if (engine === 'lxc') removeCgroupTree(cgroupTag);
      process.off('exit', onExit);
      if (left.length > 0) throw new Error(`fleet: processes still alive after stop: ${left.join(' ')}`);
      if (opts.keepDir !== true) await rm(dir, { recursive: true, force: true });
    },
  };
  return fleet;
}
