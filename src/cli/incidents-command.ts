/**
 * `incidents [--limit N]`, `incident <id> [--json|--markdown]` and `history <machine> [--limit N]`:
 * the durable incident log read straight from Redis, without Slack. For post-mortems, and for the
 * night Slack itself is down. Read-only: it never appends, renders into Slack or queues anything.
 * `--markdown` also reads the alerts open now (src/watch-store/open-alerts.ts): the post-mortem
 * lists those on the incident's machines.
 */
import { EnvSchema } from '../config/env.ts';
import { IncidentLog } from '../incident/log.ts';
import { connectRedis } from '../redis/connection.ts';
import { incidentListLine, renderTimeline } from '../incident/timeline.ts';
import { loadInventoryFile } from '../config/load-inventory.ts';
import { findMachine, listMachines, type Machine } from '../config/machines.ts';
import { closest } from '../config/suggest.ts';
import { readHistory } from '../incident/history.ts';
import { renderIncidentMarkdown } from '../render/incident-markdown.ts';
import { readOpenAlerts } from '../watch-store/open-alerts.ts';

const ReadEnv = EnvSchema.pick({
  REDIS_URL: true,
  REDIS_SENTINELS: true,
  REDIS_SENTINEL_NAME: true,
  GPU_MEDIC_PREFIX: true,
});
const INCIDENT_ID = /^inc_[a-z0-9_]+$/;
const MACHINE = /^[a-z0-9][a-z0-9._-]{0,62}$/;

export interface IncidentsIo {
  env: Record<string, string | undefined>;
  out: NodeJS.WritableStream;
  err: NodeJS.WritableStream;
}

const USAGE =
  'usage: gpu-medic incidents [--limit N]   |   gpu-medic incident <inc_id> [--json|--markdown]   |   gpu-medic history <machine> [--limit N]\n';

/** Exit codes: 0 shown; 1 not found or Redis unreachable; 2 bad arguments or settings. */
export async function runIncidentsCommand(
  sub: 'incidents' | 'incident' | 'history',
  args: string[],
  io: IncidentsIo,
): Promise<number> {
  const env = ReadEnv.safeParse(io.env);
  if (!env.success) {
    io.err.write(`gpu-medic ${sub}: ${env.error.issues.map((i) => `${i.path.join('.')} ${i.message}`).join('; ')}\n`);
    return 2;
  }
  let limit = 20;
  let format: 'text' | 'json' | 'markdown' = 'text';
  let id: string | null = null;
  for (let i = 0; i < args.length; i++) {
    const a = args[i] ?? '';
    if ((sub === 'incidents' || sub === 'history') && a === '--limit') {
      const n = Number(args[++i]);
      if (!Number.isInteger(n) || n < 1 || n > 1000) {
        io.err.write(`gpu-medic ${sub}: --limit takes a whole number from 1 to 1000\n${USAGE}`);
        return 2;
      }
      limit = n;
    } else if (sub === 'incident' && (a === '--json' || a === '--markdown')) {
      const f = a === '--json' ? 'json' : 'markdown';
      if (format !== 'text' && format !== f) {
        io.err.write(`gpu-medic incident: --json and --markdown are two different outputs; choose one\n${USAGE}`);
        return 2;
      }
      format = f;
    } else if ((sub === 'incident' || sub === 'history') && id === null && !a.startsWith('-')) id = a;
    else {
      io.err.write(`gpu-medic ${sub}: unexpected argument ${JSON.stringify(a.slice(0, 80))}\n${USAGE}`);
      return 2;
    }
  }
  if (sub === 'incident' && (id === null || !INCIDENT_ID.test(id))) {
    io.err.write(
      `gpu-medic incident: ${id === null ? 'which incident?' : `${JSON.stringify(id.slice(0, 80))} is not an incident id (they look like inc_20261130_031245_ab12)`}\n${USAGE}`,
    );
    return 2;
  }

  let machine: Machine | null = null;
  let containers: string[] = [];
  if (sub === 'history') {
    const t = (id ?? '').toLowerCase();
    if (!MACHINE.test(t)) {
      io.err.write(
        `gpu-medic history: ${id === null ? 'which machine?' : `${JSON.stringify(t.slice(0, 80))} is not a machine name`}\n${USAGE}`,
      );
      return 2;
    }
    // The inventory says which containers run on a host (their incidents touched it).
    const path = io.env.GPU_MEDIC_INVENTORY || './inventory.yaml';
    const inv = await loadInventoryFile(path);
    if (!inv.inventory) {
      io.err.write(
        `gpu-medic history: inventory ${path} has problems:\n${inv.problems.map((p) => `  - ${p.at}: ${p.message}`).join('\n')}\n`,
      );
      return 2;
    }
    machine = findMachine(inv.inventory, t);
    const all = listMachines(inv.inventory);
    if (!machine) {
      const guess = closest(
        t,
        all.map((m) => m.id),
      );
      io.err.write(
        `gpu-medic history: the inventory (${path}) has no machine ${t}${guess ? `; did you mean ${guess}?` : ''}\n`,
      );
      return 1;
    }
    const hostId = machine.id;
    containers =
      machine.kind === 'host' ? all.flatMap((m) => (m.kind === 'container' && m.hostId === hostId ? [m.id] : [])) : [];
  }

  // Fail fast and plainly when Redis is not there: no retry loop, no offline queue.
  // With REDIS_SENTINELS, the primary the sentinels name (after a failover: the new one).
  const redis = connectRedis(env.data, {
    lazyConnect: true,
    connectTimeout: 3000,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
    sentinelRetryStrategy: () => null,
  });
  redis.on('error', () => undefined);
  try {
    try {
      await redis.connect();
    } catch (e) {
      io.err.write(
        `gpu-medic ${sub}: cannot reach Redis at ${redactUrl(env.data.REDIS_URL)}: ${e instanceof Error ? e.message : String(e)}\n`,
      );
      return 1;
    }
    const log = new IncidentLog(redis, env.data.GPU_MEDIC_PREFIX);
    if (sub === 'incidents') {
      const ids = await log.recent(limit);
      if (ids.length === 0) {
        io.out.write(`no incidents under prefix ${env.data.GPU_MEDIC_PREFIX}\n`);
        return 0;
      }
      for (const i of ids) {
        const meta = await log.meta(i);
        io.out.write(meta ? `${incidentListLine(meta, await log.events(i))}\n` : `${i}  (no metadata)\n`);
      }
      return 0;
    }
    if (sub === 'history' && machine) {
      const r = await readHistory(log, { target: machine, containers, limit });
      if (r.items.length === 0)
        io.out.write(
          `no incident touched ${machine.id}${containers.length > 0 ? ' or its containers' : ''} under prefix ${env.data.GPU_MEDIC_PREFIX}\n`,
        );
      for (const item of r.items) {
        const via = item.via ? `  (container ${item.via} on ${machine.id})` : '';
        io.out.write(
          item.meta
            ? `${incidentListLine(item.meta, item.events)}${via}\n`
            : `${item.id}  ${item.at}  (its record is gone from the log)\n`,
        );
      }
      if (r.more) io.out.write(`… older incidents exist: --limit ${Math.min(1000, limit * 2)}\n`);
      if (r.fallback)
        io.out.write(
          `(also searched ${r.fallback.complete ? 'the' : 'the newest'} ${r.fallback.scanned} incidents logged before the per-machine index${r.fallback.before ? ` began at ${r.fallback.before}` : ''}${r.fallback.complete ? '' : '; older ones were not searched'})\n`,
        );
      return 0;
    }
    const incident = id ?? '';
    const meta = await log.meta(incident);
    if (!meta) {
      io.err.write(
        `gpu-medic incident: no incident ${incident} under prefix ${env.data.GPU_MEDIC_PREFIX}; \`gpu-medic incidents\` lists the recent ones\n`,
      );
      return 1;
    }
    const events = await log.events(incident);
    // The post-mortem says which alerts were still open on the incident's machines, not "nothing left to do".
    const openAlerts = format === 'markdown' ? await readOpenAlerts(redis, env.data.GPU_MEDIC_PREFIX) : [];
    io.out.write(
      format === 'json'
        ? `${JSON.stringify({ meta, events }, null, 2)}\n`
        : format === 'markdown'
          ? renderIncidentMarkdown(meta, events, { openAlerts })
          : renderTimeline(meta, events),
    );
    return 0;
  } finally {
    redis.disconnect();
  }
}

/** A Redis URL may carry a password: never print it. */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(REDIS_URL)';
  }
}
