import type { TestKeys } from '../keys.ts';
import type { InventoryInput } from '../../../src/config/inventory.ts';

export interface GpuSpec {
  name?: string;
  memoryTotalMiB?: number;
  /** `00000000:01:00.0` form. */
  busId?: string;
  uuid?: string;
  /** Persistence mode (default false). While on, `nvidia-smi -r` is refused as "In use by another client". */
  persistence?: boolean;
}

export interface HostSpec {
  id: string;
  site?: string;
  /** GPU list, or a count of default GPUs (NVIDIA H200, 143771 MiB, bus 00000000:0N:00.0). */
  gpus: GpuSpec[] | number;
  /** Default 449 GiB total, 12 GiB used. */
  ramTotalGiB?: number;
  ramUsedGiB?: number;
  /**
   * Programs this machine lacks (`timeout`, `fuser`, `perl`, `pct`, `nvidia-smi`, ...): they are not
   * on its PATH at all, as on a machine where they were never installed. See README.
   */
  omitTools?: string[];
  /**
   * Agent access only: this host gets its own root `~/.ssh` (bound at /root/.ssh in its sshd's mount
   * namespace, never the machine's own), whose authorized_keys holds these lines: `worker` the worker's
   * public key as a plain line (a root-shell setup's key, left behind when the agent came), `worker-forced`
   * the same forced to the agent (as `install.sh --root-forced` writes it). `[]`: the own ~/.ssh, empty.
   * Default: no such bind.
   */
  rootKeys?: Array<'worker' | 'worker-forced'>;
}

export interface ContainerSpec {
  id: string;
  vmid: number;
  /** Id of its host. */
  host: string;
  /** Own sshd inside the container (own port, own host key); else reached only via `pct exec`. */
  ownAddress?: boolean;
  /** Programs this container lacks (see HostSpec.omitTools); for its own sshd and for `pct exec` alike. */
  omitTools?: string[];
  /** Its /proc is mounted with `hidepid=invisible`: a non-root login sees only its own processes. */
  hideProc?: boolean;
  /**
   * Host GPU indices passed to the container (Proxmox `devN: /dev/nvidiaM`, listed by `pct config`).
   * Only their device files exist in its /dev (under their host names), and its nvidia-smi shows
   * them renumbered from 0 in bus-id order, as NVML does. Default: every GPU of the host, same numbers.
   * `spawnHolder` on the container takes the container's numbering.
   */
  gpus?: number[];
  /**
   * The container's PID 1 is a GPU holder (an application run as the container's init): it opens
   * the devices and holds this memory; killing it stops the container. Registered as a holder.
   */
  initHolds?: HolderOptions;
  /**
   * Real LXC only (`FleetSpec.engine: 'lxc'`): a privileged container (no id map), as Proxmox's
   * `unprivileged: 0`. Default false: unprivileged with Proxmox's default map (root = host uid 100000).
   */
  privileged?: boolean;
  /**
   * Real LXC only: its own id map, container ids 0..65535 on host ids from this one (written as
   * `lxc.idmap:` lines in its pct config, as a custom Proxmox map is). Default: Proxmox's default map.
   */
  idmapBase?: number;
}

/**
 * How containers are made: `lxc` real LXC containers (lxc-start under the fleet's own lxcpath; see
 * lxc-container.ts), `namespaces` the fleet's unshare containers (container.ts). Default: the
 * GPU_MEDIC_FLEET_ENGINE environment variable, else `lxc` where lxc and busybox-static are installed.
 */
export type ContainerEngine = 'lxc' | 'namespaces';

export interface FleetSpec {
  hosts: HostSpec[];
  containers?: ContainerSpec[];
  engine?: ContainerEngine;
  /**
   * How the worker's key reaches a host (the agent's verbs only, or a shell). `agent`: the host's sshd runs
   * the stock sshd_config and the agent is installed by `agent/install.sh` (the dedicated account, its
   * root-owned `restrict,command=` key line, the sudoers entry), so the key runs gpu-medic-agent only; the
   * inventory logs in as that account. `shell`: the older test wrapper (root, any command). Default:
   * `GPU_MEDIC_FLEET_ACCESS` if set, else `agent`.
   */
  access?: FleetAccess;
}

export type FleetAccess = 'agent' | 'shell';

export interface FleetOptions {
  /** Default: a new /tmp/gpu-medic-fleet-XXXXXX (removed by stop()). */
  dir?: string;
  /** Keep the dir after stop() (for debugging). Default false. */
  keepDir?: boolean;
  /**
   * The bench's baselines (what on-call does by hand): an engineer's own key (`Fleet.operatorKeyPath`),
   * authorized for root on every host and own-address container beside the agent's, as on a real
   * host, a plain shell with the fake tools on root's default PATH (/usr/local/bin). Agent access
   * only. Default false: root refuses every key but the agent's (what the tests run against).
   */
  operatorLogin?: boolean;
}

export interface MachineView {
  id: string;
  kind: 'host' | 'container';
  /** The host's id (itself for a host). */
  hostId: string;
  vmid: number | null;
  dir: string;
  /** null for a container without its own address, or a stopped machine. */
  sshPort: number | null;
  /** Current host key (after replaceHostKey it differs from the inventory pin). */
  hostKeyFingerprint: string | null;
  /** A container's PID 1, as the host sees it (null for a host or a stopped container). */
  initHostPid: number | null;
  /**
   * A container's cgroup (path containing `/lxc/<vmid>/`: the v2 one of a namespace container, the pids
   * hierarchy's `<tag>/lxc/<vmid>/ns` of an LXC one), null for a host or where cgroups are unavailable.
   */
  cgroup: string | null;
  /** How a container is made (null for a host). */
  engine: ContainerEngine | null;
}

export interface SpawnOptions {
  /**
   * Command line the process shows in `ps`/cmdline (split on spaces into argv); comm becomes
   * basename(argv[0]). Default for holders: `python3 -m sglang.launch_server --tp-size 8`.
   */
  title?: string;
  /**
   * Start it under a parent process with this command line (split on spaces, as `title`): a
   * launcher such as `python3 -m sglang.launch_server --tp-size 8 …` above a rank titled
   * `sglang::scheduler_TP0`. The parent holds no device, is not the fleet process (never its
   * PID), and dies as the process died. Not with `atPid`.
   */
  parentTitle?: string;
  /**
   * Its comm (`/proc/<pid>/comm`, stat field 2) instead of basename(argv[0]): bytes as given, at
   * most 15 (the kernel's limit), so a name may hold spaces, `) ` or bytes that are not UTF-8.
   */
  comm?: Buffer;
  /** Ignore SIGTERM (still logged). */
  ignoreTerm?: boolean;
  /** Run as this user (created with useradd when missing). Default root. */
  user?: string;
}

export interface HolderOptions extends SpawnOptions {
  gpus: Array<{ index: number; mib: number }>;
  /** After the process dies its memory stays in use this long (driver teardown of a big context). */
  dieDelayMs?: number;
  /**
   * A holder stuck while holding (the watchdog's holder_stuck): `Z` a real zombie (the holder forks,
   * the child holds and exits, its parent never reaps it; nvidia-smi still lists it), `D` real
   * uninterruptible sleep (the holder vfork()s a child that never execs). spawnHolder resolves once
   * /proc shows that state; `releaseStuck` ends it. Host PIDs, as on a host or in a container.
   */
  stuck?: 'Z' | 'D';
}

/** A PID a new process must take (set through `/proc/sys/kernel/ns_last_pid` in each PID namespace). */
export interface AtPid {
  /** Its PID in the host's namespace. */
  hostPid: number;
  /** Its PID inside the container (container processes only); default: whatever comes. */
  containerPid?: number;
}

export interface FleetProcess {
  /** Fleet-wide id (also the tag in the signal log). */
  id: string;
  machine: string;
  hostPid: number;
  /** PID inside the container (null on a host). */
  containerPid: number | null;
  /** /proc/<hostPid>/stat field 22. */
  startTime: number;
  cmdline: string;
  /** Resolves when the process is gone. */
  exited: Promise<{ code: number | null; signal: string | null }>;
}

export interface SignalRecord {
  ts: number;
  /** The fleet process's id (`FleetProcess.id`): tells a process from a later one on the same PID. */
  id: string;
  machine: string;
  hostPid: number;
  containerPid: number | null;
  cmdline: string;
  /** `SIGTERM`, `SIGKILL`, ... */
  signal: string;
  /** Sender PID as the receiver's namespace sees it (0 = from outside it; null for SIGKILL, which can't be observed). */
  by: number | null;
  kind: 'holder' | 'bystander';
}

export interface CommandLogEntry {
  ts: number;
  /** SSH command line as received, or a fake tool's argv joined with spaces. */
  cmd: string;
  via: 'ssh' | 'tool';
}

export interface GpuMemoryReading {
  index: number;
  usedMiB: number;
  totalMiB: number;
}

export interface Fleet {
  dir: string;
  /** Private key the worker uses (ed25519, no passphrase). */
  clientKeyPath: string;
  /** The engineer's key for `root@` (FleetOptions.operatorLogin), else null. */
  operatorKeyPath: string | null;
  /**
   * The bot's and the worker's signing keys for this fleet (its hosts' agents trust their
   * public halves, as an installed agent trusts the keys in /etc/gpu-medic/), with the settings each role gets.
   */
  keys: TestKeys;
  /** OpenSSH known_hosts with every machine's key as pinned at start (`[127.0.0.1]:port key`). */
  knownHostsPath: string;
  /** Matches src/config/inventory.ts InventoryInput; pins the host keys the fleet started with. */
  inventory(): InventoryInput;
  machine(id: string): MachineView;
  spawnHolder(machineId: string, o: HolderOptions): Promise<FleetProcess>;
  /** A process holding no GPU (e.g. a monitoring `python3 monitor.py`): must never be signalled. */
  spawnBystander(machineId: string, o: SpawnOptions & { title: string }): Promise<FleetProcess>;
  /**
   * A new process that takes the given PID (host, and in a container also its container PID),
   * e.g. one the test just ended: a holder when `gpus` is given and non-empty, else a bystander.
   * Retries while something else on the machine takes the PID first; throws if it never gets it.
   */
  takePid(
    machineId: string,
    at: AtPid,
    o: SpawnOptions & { gpus?: HolderOptions['gpus']; dieDelayMs?: number },
  ): Promise<FleetProcess>;
  /** SIGKILLs one fleet process from outside (as if it died on its own) and waits until its PID is free. */
  endProcess(p: FleetProcess): Promise<void>;
  /** Stops a container and starts it again: a new init, a new PID namespace; its processes are gone. */
  restartContainer(containerId: string): Promise<void>;
  /** Starts a stopped container again (new PID namespace), or a stopped host's sshd (same port, same host key). */
  startMachine(machineId: string): Promise<void>;
  /** The container's init as a GPU holder (`initHolds`), or null. */
  initHolder(containerId: string): FleetProcess | null;
  /** Memory held with no process (only a host-level `nvidia-smi -r` frees it). */
  setLeak(hostId: string, gpuIndex: number, mib: number): Promise<void>;
  /** `gpu_lost` marks one GPU (default 0); `nvml_version_mismatch` breaks the whole driver; null clears (one GPU or all). */
  setGpuError(hostId: string, kind: 'gpu_lost' | 'nvml_version_mismatch' | null, gpuIndex?: number): Promise<void>;
  /** nvidia-smi hangs on that machine (a host's flag hangs its containers too). */
  setHang(machineId: string, on: boolean): Promise<void>;
  /**
   * Host only: while on, every nvidia-smi call on it drops its SSH connections the moment it starts
   * (the tool server SIGKILLs each per-connection sshd under the listener, which stays up): a
   * connection lost mid-command, at a known point rather than at a test's guess of one.
   */
  setDrop(hostId: string, on: boolean): Promise<void>;
  setRam(hostId: string, ram: { totalGiB: number; usedGiB: number }): Promise<void>;
  /** Restarts the machine's sshd on the same port with a NEW host key (inventory keeps the old pin). */
  replaceHostKey(machineId: string): Promise<void>;
  /**
   * Host only: SIGSTOP (on) / SIGCONT (off) its sshd listener and every per-connection sshd and
   * session under it, as a frozen machine behaves: TCP still accepts, nothing answers, pooled
   * connections stay open and silent.
   */
  freezeMachine(hostId: string, on: boolean): Promise<void>;
  /**
   * The container's nvidia-smi reports its GPU `containerIndex` with the UUID and bus id of host GPU
   * `asHostIndex` (a container root that replaced nvidia-smi); null undoes it. Host views are untouched.
   */
  spoofGpuIdentity(containerId: string, containerIndex: number, asHostIndex: number | null): Promise<void>;
  /**
   * The host enumerates its GPUs in a new order (a reboot or a GPU that fell off the bus and came
   * back): the GPU now at index `order[i]` gets index i. Leaks, errors and persistence follow the
   * GPU (its UUID); holders registered by index stay on that index.
   */
  renumberHostGpus(hostId: string, order: number[]): Promise<void>;
  /**
   * Removes one fake tool (`lxc-info`, `pct`, `nvidia-smi`, `free`, a host's `journalctl` or `dmesg`)
   * from the machine's PATH: running it then exits 127 (without journalctl the watchdog reads dmesg).
   */
  removeTool(
    machineId: string,
    tool: 'lxc-info' | 'pct' | 'nvidia-smi' | 'free' | 'journalctl' | 'dmesg',
  ): Promise<void>;
  /** Appends a line (now) to the host's kernel log, as `journalctl -k` and `dmesg` then print it. */
  kernelLog(hostId: string, text: string): Promise<void>;
  /**
   * Logs an NVIDIA Xid for one of the host's GPUs the way the driver does:
   * `NVRM: Xid (PCI:0000:01:00): 79, pid=0, name=python3, GPU has fallen off the bus.`
   * (`detail`: what follows the number; default a plain description for 79 / 48 / 31, else `...`).
   */
  logXid(hostId: string, gpuIndex: number, xid: number, detail?: string): Promise<void>;
  /** The GPU's `gpu_recovery_action` (`GPU Reset`, `Node Reboot`, `Drain P2P`, `Drain and Reset`, ...); null: `None`. */
  setRecoveryAction(hostId: string, gpuIndex: number, action: string | null): Promise<void>;
  /**
   * The GPU fell off the bus and was removed (`gone`): the host's nvidia-smi lists one GPU fewer,
   * the others numbered without it, as NVML enumerates them; false brings it back.
   */
  setGpuGone(hostId: string, gpuIndex: number, gone: boolean): Promise<void>;
  /** false: the host's driver predates `gpu_recovery_action` (nvidia-smi refuses a query naming it, exit 2). */
  setRecoveryActionSupported(hostId: string, on: boolean): Promise<void>;
  /**
   * Ends a stuck holder's state (`HolderOptions.stuck`) as the kernel lets it go, without signalling
   * the holder: a zombie's parent dies (the zombie is reaped, its memory freed); a D holder's vfork
   * child dies (it runs on, state S). Not reported by signals().
   */
  releaseStuck(p: FleetProcess): Promise<void>;
  /**
   * A holder spawned with `dieDelayMs`: its memory is free from now on (the teardown ends), dead or
   * not yet noticed as dead; a live holder still pins it while it lives.
   */
  endTeardown(p: FleetProcess): void;
  /** Host: its sshd stops (unreachable). Container: the container stops (pct says stopped). */
  stopMachine(machineId: string): Promise<void>;
  /** SSH command lines the machine received plus fake-tool invocations on it, oldest first. */
  commandLog(machineId: string): CommandLogEntry[];
  /** Every signal a holder or bystander received (catchable ones logged by the process, SIGKILL from its death). */
  signals(): SignalRecord[];
  gpuMemory(hostId: string): GpuMemoryReading[];
  /** Every process the fleet started, live or not. */
  processes(): FleetProcess[];
  /** Stops everything it started, by PID, and removes the dir. */
  stop(): Promise<void>;
}
