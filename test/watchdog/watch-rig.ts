/**
 * The watchdog's round on real parts, without the scheduler's clock: a real fleet (sshd, fake
 * nvidia-smi, real holder processes), real Redis under a random prefix, the real SSH executor, and
 * `runWatchJob` called by the test, one round at a time. `restartWorker()` throws the executor and
 * deps away as a restarted worker process would; only Redis remains.
 */
import type { Redis } from 'ioredis';
import { validateInventory } from '../../src/config/load-inventory.ts';
import type { Inventory, InventoryInput } from '../../src/config/inventory.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { SnoozeStore } from '../../src/watch-store/snooze-store.ts';
import { watchKeys } from '../../src/watch-store/watch-keys.ts';
import { WatchRoundStore } from '../../src/watch-store/watch-round-store.ts';
import type { AlertEvent } from '../../src/watchdog/alert-events.ts';
import { DEFAULT_WATCH_SETTINGS, type WatchSettings } from '../../src/watchdog/judge.ts';
import { type MachineRoundResult, runWatchJob, type WatchdogDeps } from '../../workers/watchdog.ts';
import { captureLogger } from '../harness/capture-logger.ts';
import { startFleet } from '../harness/fleet/index.ts';
import type { Fleet, FleetSpec } from '../harness/fleet/types.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';

export const ALERTS_CHANNEL = 'C0ALERTS01';

export interface AlertRecord {
  incidentId: string;
  events: Array<AlertEvent & { id: string }>;
}

export interface WatchRig {
  fleet: Fleet;
  redis: Redis;
  prefix: string;
  inventory: Inventory;
  log: IncidentLog;
  /** One round over `site` (default `default`) with this worker's deps; `o` overrides some. */
  round(o?: { site?: string; deps?: Partial<WatchdogDeps> }): Promise<MachineRoundResult[]>;
  deps(): WatchdogDeps;
  /** A new executor and new deps: what a restarted worker process has (Redis is all that is kept). */
  restartWorker(): Promise<void>;
  /** Every alert incident in the log, with its alert events, oldest first. */
  alerts(): Promise<AlertRecord[]>;
  /** `kind` events of alerts of `alertKind` on `machineId`. */
  eventsOf(machineId: string, alertKind: string): Promise<Array<AlertEvent & { id: string }>>;
  snooze(scope: string, untilMs: number): Promise<void>;
  logText(): string;
  stop(): Promise<void>;
}

export async function startWatchRig(
  spec: FleetSpec,
  o: {
    settings?: Partial<WatchSettings>;
    commandTimeoutSec?: number;
    /** The inventory the worker uses, made from the fleet's (e.g. its machines behind a proxy). Default: the fleet's. */
    inventory?: (fromFleet: InventoryInput) => Promise<InventoryInput>;
  } = {},
): Promise<WatchRig> {
  const fleet = await startFleet(spec);
  const v = validateInventory(o.inventory ? await o.inventory(fleet.inventory()) : fleet.inventory());
  if (!v.inventory) throw new Error(`fleet inventory invalid: ${JSON.stringify(v.problems)}`);
  const inventory = v.inventory;
  if (o.commandTimeoutSec !== undefined) inventory.defaults.commandTimeoutSec = o.commandTimeoutSec;
  const redis = newRedis();
  const prefix = randomPrefix('watch');
  const log = new IncidentLog(redis, prefix);
  const { logger, text } = captureLogger('watch-rig');
  const settings: WatchSettings = { ...DEFAULT_WATCH_SETTINGS, ghostMinutes: 0, ...o.settings };
  let executor: Executor = createSshExecutor({
    access: 'root-shell',
    connectTimeoutMs: inventory.defaults.connectTimeoutSec * 1000,
  });
  const makeDeps = (): WatchdogDeps => ({
    inventory,
    executor,
    store: new WatchRoundStore(redis, prefix, ALERTS_CHANNEL),
    snoozes: new SnoozeStore(redis, prefix),
    settings,
    now: () => new Date(),
    commandTimeoutMs: inventory.defaults.commandTimeoutSec * 1000,
    logger,
  });
  let deps = makeDeps();
  const alerts = async (): Promise<AlertRecord[]> => {
    const ids = await redis.zrange(`${prefix}:incidents`, 0, -1);
    const out: AlertRecord[] = [];
    for (const id of ids) {
      if (!id.startsWith('inc_alert_')) continue;
      const events = (await log.events(id)).filter((e): e is AnyLoggedEvent & AlertEvent =>
        e.type.startsWith('alert_'),
      );
      out.push({ incidentId: id, events });
    }
    return out;
  };
  return {
    fleet,
    redis,
    prefix,
    inventory,
    log,
    round: (ro = {}) => runWatchJob({ kind: 'watch', site: ro.site ?? 'default' }, { ...deps, ...ro.deps }),
    deps: () => deps,
    async restartWorker() {
      await executor.close();
      executor = createSshExecutor({
        access: 'root-shell',
        connectTimeoutMs: inventory.defaults.connectTimeoutSec * 1000,
      });
      deps = makeDeps();
    },
    alerts,
    async eventsOf(machineId, alertKind) {
      const all = await alerts();
      return all
        .flatMap((a) => a.events)
        .filter((e) => 'alert' in e && e.alert.machineId === machineId && e.alert.kind === alertKind);
    },
    async snooze(scope, untilMs) {
      await new SnoozeStore(redis, prefix).snooze(scope, untilMs);
    },
    logText: text,
    async stop() {
      await executor.close().catch(() => undefined);
      await fleet.stop();
      await removePrefix(redis, prefix);
      redis.disconnect();
    },
  };
}

export { watchKeys };
