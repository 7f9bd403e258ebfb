#!/usr/bin/env node
/**
 * Entry point: `bot`, `worker`, `start` (both in one process), `config check`, `parse`,
 * `incidents` / `incident <id> [--json|--markdown]` / `history <machine>` (the durable log, read
 * without Slack), `health` (the healthcheck),
 * `doctor [machine|all]` (read-only check of what every machine needs).
 * Each subcommand is loaded lazily so that `parse` never loads Slack or SSH code.
 */
import type { Role } from './config/env.ts';
import type { Logger } from './logger.ts';
import type { Metrics } from './metrics/metrics.ts';

const [sub, ...rest] = process.argv.slice(2);

/** The role whose settings a subcommand may take from .env; null for `parse`, which reads none. */
function settingsRole(): Role | null {
  if (sub === 'bot' || sub === 'worker' || sub === 'start') return sub;
  if (sub === 'config')
    return rest[1] === 'bot' || rest[1] === 'worker'
      ? rest[1]
      : rest[1] === undefined || rest[1] === 'start'
        ? 'start'
        : 'worker';
  // health and incidents read Redis and file settings only: never a Slack secret.
  return sub === 'parse' ? null : 'worker';
}

/**
 * A local .env fills in what the environment does not already set (compose and systemd pass
 * settings directly). Only the running role's settings are taken from it: a worker started next
 * to a .env that also holds the Slack tokens never has them in its environment or memory.
 */
async function loadDotEnv(): Promise<void> {
  const role = settingsRole();
  if (role === null) return;
  const { readEnvFile } = await import('./config/dotenv.ts');
  const { envFileKeyFilter } = await import('./config/check.ts');
  const file = readEnvFile('.env', envFileKeyFilter(role));
  if (!file) return;
  for (const [k, v] of Object.entries(file.values)) if (process.env[k] === undefined) process.env[k] = v;
  // Reported with the other problems by checkConfig (never the line itself: it may hold a secret).
  for (const n of file.badLines)
    envFileProblems.push(`.env line ${n} is not KEY=value (no spaces in the key, "#" for a comment); it was not used`);
}

/** Problems found in ./.env before any setting was parsed. */
const envFileProblems: string[] = [];

async function run(role: Role): Promise<number> {
  const { checkConfig, formatReport } = await import('./config/check.ts');
  const { loadInventoryFile } = await import('./config/load-inventory.ts');
  const { createLogger } = await import('./logger.ts');
  // The same report as `config check <role>`: every problem at once.
  const report = await checkConfig(process.env, role, loadInventoryFile, envFileProblems);
  const { env } = report;
  const inventory = report.inventory;
  if (!env || !inventory) {
    process.stderr.write(formatReport(report, `gpu-medic ${role}: cannot start`));
    return 2;
  }
  const logger = createLogger({ name: `gpu-medic-${role}`, level: env.LOG_LEVEL });
  const { startHeartbeat } = await import('./health/heartbeat.ts');
  const { defaultHealthFile } = await import('./health/report.ts');
  const stops: Array<() => Promise<void>> = [];
  const checks: Record<string, () => Promise<string | null>> = {};
  const name = (part: string, check: string): string => (role === 'start' ? `${part}.${check}` : check);
  // One registry per process: `start` serves the bot's and the worker's metrics on one port.
  const metrics =
    env.GPU_MEDIC_METRICS_PORT === undefined
      ? undefined
      : await startMetrics(env.GPU_MEDIC_METRICS_BIND, env.GPU_MEDIC_METRICS_PORT, role, logger, stops);
  if (metrics) {
    // Every documented label set at 0 from the start, so an alert on increase() fires on the first event.
    const { zeroSeries } = await import('./metrics/zero-series.ts');
    const { listMachines } = await import('./config/machines.ts');
    const endpoints = listMachines(inventory).filter((m) => m.kind === 'host' || m.ownAddress);
    zeroSeries(metrics, { machines: endpoints.map((m) => m.id) });
  }
  if (role === 'bot' || role === 'start') {
    const { startBot } = await import('./bot.ts');
    // The bot never gets SSH key paths it could open; it only needs machine ids and sites.
    const bot = await startBot(env, inventory, logger, metrics ? { metrics } : {});
    stops.push(() => bot.stop());
    for (const [k, c] of Object.entries(bot.health())) checks[name('bot', k)] = c;
  }
  if (role === 'worker' || role === 'start') {
    const { startWorkerProcess } = await import('./worker-process.ts');
    const workerEnv = {
      ...env,
      SLACK_BOT_TOKEN: undefined,
      SLACK_APP_TOKEN: undefined,
      SLACK_SIGNING_SECRET: undefined,
    };
    const w = await startWorkerProcess(workerEnv, inventory, logger, metrics);
    stops.push(() => w.close());
    for (const [k, c] of Object.entries(w.health())) checks[name('worker', k)] = c;
  }
  // Stopped first: a process on its way down must not look healthy.
  const heartbeat = startHeartbeat({
    file: env.GPU_MEDIC_HEALTH_FILE || defaultHealthFile(role),
    role,
    intervalMs: env.GPU_MEDIC_HEALTH_INTERVAL_SEC * 1000,
    checks,
    logger: logger.child({ component: 'health' }),
  });
  stops.unshift(() => heartbeat.stop());
  await new Promise<void>((resolve) => {
    const stop = (): void => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  logger.info('shutting down');
  for (const s of stops) await s();
  return 0;
}

async function startMetrics(
  host: string,
  port: number,
  role: Role,
  logger: Logger,
  stops: Array<() => Promise<void>>,
): Promise<Metrics> {
  const { createMetrics } = await import('./metrics/metrics.ts');
  const { startMetricsServer } = await import('./metrics/server.ts');
  const { collectDefaultMetrics, Registry } = await import('prom-client');
  const { peakMemoryGauge } = await import('./metrics/peak-memory.ts');
  const registry = new Registry();
  registry.setDefaultLabels({ role });
  collectDefaultMetrics({ register: registry, prefix: 'gpu_medic_' });
  peakMemoryGauge(registry, 'gpu_medic_');
  const metrics = createMetrics(registry);
  const server = await startMetricsServer({ registry, host, port, logger: logger.child({ component: 'metrics' }) });
  stops.push(() => server.close());
  return metrics;
}

async function main(): Promise<number> {
  await loadDotEnv();
  switch (sub) {
    case 'parse': {
      const { runParseCommand } = await import('./cli/parse-command.ts');
      return runParseCommand(rest, { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr });
    }
    case 'config': {
      if (rest[0] !== 'check') break;
      const { runConfigCheck } = await import('./cli/config-check.ts');
      return runConfigCheck(rest.slice(1), process.env, process.stdout, envFileProblems);
    }
    case 'health': {
      const { runHealthCommand } = await import('./cli/health-command.ts');
      return runHealthCommand(rest, process.env, process.stdout);
    }
    case 'incidents':
    case 'incident':
    case 'history': {
      const { runIncidentsCommand } = await import('./cli/incidents-command.ts');
      return runIncidentsCommand(sub, rest, { env: process.env, out: process.stdout, err: process.stderr });
    }
    case 'doctor': {
      const { runDoctorCommand } = await import('./cli/doctor-command.ts');
      return runDoctorCommand(rest, { env: process.env, out: process.stdout, err: process.stderr });
    }
    case 'bot':
    case 'worker':
    case 'start':
      return run(sub);
  }
  process.stderr.write(
    `usage: gpu-medic <bot|worker|start|config check [bot|worker|start]|parse [--json] FILE|-|incidents [--limit N]|incident ID [--json|--markdown]|history MACHINE [--limit N]|health [bot|worker|start]|doctor [machine|all] [--json]>\n`,
  );
  return 2;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`gpu-medic: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
