import type { AccessPolicy } from '../src/approval/policy.ts';
import type { Inventory } from '../src/config/inventory.ts';
import type { IncidentLog } from '../src/incident/log.ts';
import type { Logger } from '../src/logger.ts';
import type { Dispatcher } from '../src/queue/dispatcher.ts';

export interface CommandDeps {
  inventory: Inventory;
  log: IncidentLog;
  dispatcher: Dispatcher;
  policy: AccessPolicy;
  now(): Date;
  newIncidentId(): string;
  logger: Logger;
}

export interface SlashInput {
  text: string;
  userId: string;
  channelId: string;
}
