import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Redis } from 'ioredis';
import type { Env } from '../config/env.ts';
import type { Inventory } from '../config/inventory.ts';
import type { Logger } from '../logger.ts';
import { AlertmanagerStore } from './alert-store.ts';
import { namedMachines } from './map.ts';
import { createSilence, silenceRequest } from './silences.ts';
import { ALERTMANAGER_PATH, alertmanagerHandler, startAlertmanagerServer } from './receiver.ts';

/**
 * The receiver as the bot runs it, from the settings: nothing when GPU_MEDIC_ALERTMANAGER_TOKEN is
 * unset; a route on the bot's own HTTP server in HTTP mode; a port of its own in Socket Mode (or
 * whenever GPU_MEDIC_ALERTMANAGER_PORT is set). The bot's one hook: `route` before it starts,
 * `start` after, `stop` with it.
 */
export interface AlertmanagerReceiver {
  /** For the bot's HTTP receiver (Bolt's customRoutes), when it is served there. */
  route: { path: string; method: string[]; handler: (req: IncomingMessage, res: ServerResponse) => void } | null;
  /** Opens its own port, when it has one; returns it (null: served on the bot's port, or not at all). */
  start(): Promise<number | null>;
  stop(): Promise<void>;
}

export function alertmanagerReceiver(
  env: Env,
  inventory: Inventory,
  redis: Redis,
  logger: Logger,
  now: () => number = Date.now,
): AlertmanagerReceiver {
  const token = env.GPU_MEDIC_ALERTMANAGER_TOKEN;
  const channel = env.GPU_MEDIC_ALERTS_CHANNEL;
  if (!token || !channel) return { route: null, start: async () => null, stop: async () => undefined };
  const store = new AlertmanagerStore(redis, env.GPU_MEDIC_PREFIX, channel);
  const rename: Record<string, string> = {};
  for (const pair of env.GPU_MEDIC_ALERTMANAGER_RENAME) {
    const i = pair.lastIndexOf('=');
    rename[pair.slice(0, i)] = pair.slice(i + 1);
  }
  const handler = alertmanagerHandler({
    token,
    record: (m, at) => store.record(m, at),
    machines: namedMachines(inventory),
    mapping: {
      machineLabels: env.GPU_MEDIC_ALERTMANAGER_MACHINE_LABELS,
      uuidLabel: env.GPU_MEDIC_ALERTMANAGER_UUID_LABEL,
      gpuLabel: env.GPU_MEDIC_ALERTMANAGER_GPU_LABEL,
      rename,
    },
    now,
    logger,
  });
  const ownPort = env.GPU_MEDIC_MODE === 'socket' || env.GPU_MEDIC_ALERTMANAGER_PORT !== undefined;
  let server: { port: number; close(): Promise<void> } | null = null;
  return {
    route: ownPort ? null : { path: ALERTMANAGER_PATH, method: ['POST'], handler },
    async start() {
      if (!ownPort) return null;
      server = await startAlertmanagerServer({
        host: env.GPU_MEDIC_ALERTMANAGER_BIND,
        port: env.GPU_MEDIC_ALERTMANAGER_PORT ?? 0,
        handler,
        logger,
      });
      return server.port;
    },
    async stop() {
      await server?.close();
      server = null;
    },
  };
}

/** The Snooze buttons' silence, when GPU_MEDIC_ALERTMANAGER_URL is set (the commands' `silence` dep). */
export function silencesOf(
  env: Env,
  now: () => number = Date.now,
): {
  silence?: (
    labels: Readonly<Record<string, string>>,
    untilMs: number,
    by: string,
    incidentId: string,
  ) => Promise<string>;
} {
  const url = env.GPU_MEDIC_ALERTMANAGER_URL;
  if (!url) return {};
  return { silence: (labels, untilMs, by, id) => createSilence(url, silenceRequest(labels, now(), untilMs, by, id)) };
}
