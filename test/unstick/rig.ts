/**
 * The unstick runners on real parts: the test fleet (real sshd, namespaces, processes), the real
 * SSH executor, real Redis under a random prefix (removed after), and a dispatcher that records
 * what it would enqueue (the expiry job) so a test can run it itself.
 */
import { captureLogger } from '../harness/capture-logger.ts';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import { ApprovalStore } from '../../src/approval/approval-store.ts';
import type { KeyPair } from '../../src/auth/keys.ts';
import { NonceLedger, NonceMemory } from '../../src/auth/nonce-ledger.ts';
import { botSigner, type BotSigner } from '../../src/auth/signed-jobs.ts';
import { BlastBudget } from '../../src/approval/blast-budget.ts';
import type { Inventory } from '../../src/config/inventory.ts';
import { validateInventory } from '../../src/config/load-inventory.ts';
import { findMachine, requestWhere } from '../../src/config/machines.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { TargetLock } from '../../src/incident/target-lock.ts';
import { StepGuard } from '../../src/step-guard/step-guard.ts';
import type { Dispatcher } from '../../src/queue/dispatcher.ts';
import type { JobData } from '../../src/queue/jobs.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import type { UnstickWorkerDeps } from '../../workers/unstick.ts';
import { newIncidentId } from '../../src/incident/ids.ts';
import { hostPidOf, startFleet } from '../harness/fleet/index.ts';
import type { Fleet, FleetSpec } from '../harness/fleet/types.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';

export const REQUESTER = 'U0REQUEST1';
export const APPROVER = 'U0APPROVE1';
export const ADMIN = 'U0ADMIN001';
export const TIMING = { graceMs: 1000, pollIntervalMs: 300, releaseTimeoutMs: 5000, commandTimeoutMs: 10_000 };
export const TTL_MS = 60_000;

export interface Enqueued {
  site: string;
  data: JobData;
  jobId: string;
  delayMs: number | undefined;
}

export interface Rig {
  fleet: Fleet;
  inventory: Inventory;
  executor: Executor;
  redis: Redis;
  prefix: string;
  log: IncidentLog;
  approvals: ApprovalStore;
  steps: StepGuard;
  lock: TargetLock;
  enqueued: Enqueued[];
  /** This rig's keys (a worker acts only on what is signed): the bot's signs requests and decisions. */
  botKeys: KeyPair;
  workerKeys: KeyPair;
  signer: BotSigner;
  /** The memory of the rig's worker "process" (single use of signed jobs). */
  nonceMemory: NonceMemory;
  /** Added to the real clock (expiry tests move time forward). */
  clockOffsetMs: number;
  logText(): string;
  deps(over?: Partial<UnstickWorkerDeps>): UnstickWorkerDeps;
  /** Opens an incident and takes the target lock, as the bot does before enqueuing. */
  newIncident(target: string, requester?: string): Promise<string>;
  events(incidentId: string): Promise<AnyLoggedEvent[]>;
  stop(): Promise<void>;
}

/** The host and vmid the bot signs into a request about `target`, from the inventory. */
export function whereOf(inv: Inventory, target: string): { host: string; vmid: number | null } {
  const m = findMachine(inv, target);
  if (!m) throw new Error(`no machine ${target} in the inventory`);
  return requestWhere(m);
}

export function inventoryOf(fleet: Fleet, tweak?: (inv: Inventory) => void): Inventory {
  const v = validateInventory(fleet.inventory());
  if (!v.inventory) throw new Error(`fleet inventory invalid: ${JSON.stringify(v.problems)}`);
  tweak?.(v.inventory);
  return v.inventory;
}

/** The inventory with these containers logged into as the non-root `fleetuser`: their root-owned GPU jobs need the host (S3). */
export function fleetuserInventory(fleet: Fleet, ids: readonly string[] = ['ct129']): Inventory {
  return inventoryOf(fleet, (inv) => {
    for (const c of inv.containers) if (ids.includes(c.id)) c.user = 'fleetuser';
  });
}

export async function startRig(spec: FleetSpec): Promise<Rig> {
  const fleet = await startFleet(spec);
  const inventory = inventoryOf(fleet);
  const executor = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
  const redis = newRedis();
  const prefix = randomPrefix();
  const { logger, text: logText } = captureLogger('unstick-worker-test');
  const enqueued: Enqueued[] = [];
  // The workers' seal key: the same for every attempt in a rig, never known to a forger.
  const planKey = randomBytes(32);
  // The fleet's: its hosts' agents trust their public halves, so signals on agent hosts verify.
  const botKeys = fleet.keys.bot;
  const workerKeys = fleet.keys.worker;
  const signer = botSigner(botKeys.privateKey);
  const nonceMemory = new NonceMemory();
  const dispatcher: Dispatcher = {
    async enqueue(site, data, jobId, o) {
      enqueued.push({ site, data, jobId, delayMs: o?.delayMs });
    },
    // As the real one: the incident's writes go to Redis in one MULTI; the jobs are recorded.
    async enqueueAll(jobs, alongside) {
      const m = redis.multi();
      alongside(m);
      await m.exec();
      for (const { site, data, jobId } of jobs) enqueued.push({ site, data, jobId, delayMs: undefined });
    },
    async close() {},
  };
  const rig: Rig = {
    fleet,
    inventory,
    executor,
    redis,
    prefix,
    log: new IncidentLog(redis, prefix),
    // The bot's store: it signs every decision, as the bot does.
    approvals: new ApprovalStore(redis, prefix, { signer }),
    steps: new StepGuard(redis, prefix),
    lock: new TargetLock(redis, prefix),
    enqueued,
    botKeys,
    workerKeys,
    signer,
    nonceMemory,
    clockOffsetMs: 0,
    logText,
    deps(over = {}) {
      return {
        inventory,
        executor,
        log: rig.log,
        approvals: rig.approvals,
        steps: rig.steps,
        lock: rig.lock,
        dispatcher,
        approvers: [APPROVER, 'U0APPROVE2'],
        planKey,
        keys: {
          signing: workerKeys.privateKey,
          workerPublic: [workerKeys.publicKey],
          botPublic: [botKeys.publicKey],
        },
        nonces: new NonceLedger(redis, prefix, nonceMemory),
        admins: [ADMIN],
        // Large: tests about other things never meet the blast-radius budget (budget tests pass their own).
        budget: new BlastBudget(redis, prefix, { limit: 1000 }),
        approvalTtlMs: TTL_MS,
        timing: TIMING,
        now: () => new Date(Date.now() + rig.clockOffsetMs),
        sleep: (ms: number) => new Promise<void>((r) => setTimeout(r, ms)),
        logger,
        workerId: `w-${randomBytes(3).toString('hex')}`,
        ...over,
      };
    },
    async newIncident(target, requester = REQUESTER) {
      const id = newIncidentId(new Date()); // the production shape: the agent's grammar checks it
      const createdAt = new Date().toISOString();
      // As the bot does: the meta, and its signature of who asked for what.
      await rig.log.create(
        {
          id,
          kind: 'unstick',
          requester,
          channel: 'C0ONCALL01',
          targets: [target],
          text: `unstick ${target}`,
          reason: null,
          createdAt,
        },
        signer.request(
          { incidentId: id, target, ...whereOf(rig.inventory, target), requester, channel: 'C0ONCALL01' },
          Date.now() + rig.clockOffsetMs,
        ),
      );
      const got = await rig.lock.acquire(target, { incidentId: id, requester, since: createdAt }, 600_000);
      if (!got.ok) throw new Error(`${target} is locked by ${JSON.stringify(got.holder)}`);
      return id;
    },
    events: (id) => rig.log.events(id),
    async stop() {
      await executor.close().catch(() => undefined);
      await fleet.stop();
      await removePrefix(redis, prefix);
      redis.disconnect();
    },
  };
  return rig;
}

export interface DeviceMonitor {
  hostPid: number;
  containerPid: number;
  startTime: number;
  alive(): boolean;
  stop(): void;
}

function startTimeOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (rest[0] === 'Z' || rest[0] === 'X') return null;
    return Number(rest[19]);
  } catch {
    return null;
  }
}

/**
 * A monitoring python3 inside a container with `/dev/nvidia0` and `/dev/nvidiactl` open and no
 * GPU memory (what an NVML exporter looks like to fuser). A real python3, started by this test.
 */
export async function startDeviceMonitor(fleet: Fleet, containerId: string): Promise<DeviceMonitor> {
  const init = fleet.machine(containerId).initHostPid;
  if (init === null) throw new Error(`${containerId} is not running`);
  const script =
    "import os,sys,time\nf=open('/dev/nvidia0','rb')\ng=open('/dev/nvidiactl','rb')\nprint(os.getpid(),flush=True)\ntime.sleep(3600)\n";
  const m = fleet.machine(containerId);
  const run = ['/usr/bin/python3', '-c', script, 'gpu_exporter.py'];
  // In a real LXC container it must run as the container's own (its root, in its user namespace):
  // started as Proxmox starts anything inside, with the host's pct exec (lxc-attach).
  const child =
    m.engine === 'lxc'
      ? spawn(join(fleet.machine(m.hostId).dir, 'bin', 'pct'), ['exec', String(m.vmid), '--', ...run], {
          stdio: ['ignore', 'pipe', 'inherit'],
        })
      : spawn('nsenter', ['--target', String(init), '--pid', '--mount', '--', ...run], {
          stdio: ['ignore', 'pipe', 'inherit'],
        });
  const ctPid = await new Promise<number>((resolve, reject) => {
    let buf = '';
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      const m = /^(\d+)\n/.exec(buf);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', () => reject(new Error('monitor exited early')));
  });
  const hostPid = hostPidOf(init, ctPid);
  if (hostPid === null) throw new Error('monitor host PID not found');
  const startTime = startTimeOf(hostPid);
  if (startTime === null) throw new Error('monitor vanished');
  return {
    hostPid,
    containerPid: ctPid,
    startTime,
    alive: () => startTimeOf(hostPid) === startTime,
    stop() {
      if (startTimeOf(hostPid) === startTime) process.kill(hostPid, 'SIGKILL');
      child.kill('SIGKILL');
    },
  };
}

export function procStart(pid: number): number | null {
  return startTimeOf(pid);
}

type Ev<T extends AnyLoggedEvent['type']> = Extract<AnyLoggedEvent, { type: T }>;

export function ofType<T extends AnyLoggedEvent['type']>(events: readonly AnyLoggedEvent[], type: T): Array<Ev<T>> {
  return events.filter((e): e is Ev<T> => e.type === type);
}

/**
 * The words a signal command ends with. `agent` (the default): the logged agent line
 * (docs/agent.md): the verb, side, signal, namespace inode, incident and approval (or `none`), then
 * per target its PID, start time and (host side) container PID. `script`: the signal script's own
 * argv (side, signal, inode, the targets; the agent passes no ids on), as the fleet's tool log shows
 * it ran, or as the shell line to a container reached at its own address (no agent there) reads.
 * A RegExp source.
 */
export function signalTail(
  side: 'host' | 'container',
  signal: 'TERM' | 'KILL',
  targets: ReadonlyArray<{ pid: number; start: number; ctPid?: number | null }>,
  form: 'agent' | 'script' = 'agent',
): string {
  const words = targets.map((t) => `${t.pid} ${t.start} ${side === 'host' ? (t.ctPid ?? 0) : 0}`).join(' ');
  return form === 'agent'
    ? ` signal ${side} ${signal} \\d+ inc_\\S+ \\S+ ${words}$`
    : ` ${side} ${signal} \\d+ ${words}$`;
}
