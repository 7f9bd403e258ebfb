import type { ApprovalStore } from '../src/approval/approval-store.ts';
import type { BotSigner } from '../src/auth/signed-jobs.ts';
import type { AccessPolicy } from '../src/approval/policy.ts';
import type { Inventory } from '../src/config/inventory.ts';
import type { IncidentLog } from '../src/incident/log.ts';
import type { TargetLock } from '../src/incident/target-lock.ts';
import type { Logger } from '../src/logger.ts';
import type { Dispatcher } from '../src/queue/dispatcher.ts';
import type { SnoozeStore } from '../src/watch-store/snooze-store.ts';

export interface CommandDeps {
  inventory: Inventory;
  log: IncidentLog;
  dispatcher: Dispatcher;
  policy: AccessPolicy;
  now(): Date;
  newIncidentId(): string;
  logger: Logger;
  lock: TargetLock;
  approvals: ApprovalStore;
  /** How long an unstick may hold its target: approval wait plus the steps. */
  lockTtlMs: number;
  /** Where watchdog alerts are posted (GPU_MEDIC_ALERTS_CHANNEL); an alert's Status and Unstick open their threads there. Null: not set. */
  alertsChannel: string | null;
  /** Snoozes written by the alerts' Snooze buttons, read by the watchdog. */
  snoozes: SnoozeStore;
  /** Signs every unstick request (slash command or alert click) with the bot's key: a worker acts on nothing else. */
  signer: BotSigner;
  /**
   * GPU_MEDIC_ALERTMANAGER_URL set: Snooze on an Alertmanager alert also silences it there, for its
   * labels, until `untilMs`; resolves with the silence id. Absent: no silences.
   */
  silence?: (
    labels: Readonly<Record<string, string>>,
    untilMs: number,
    by: string,
    incidentId: string,
  ) => Promise<string>;
}

export interface SlashInput {
  text: string;
  userId: string;
  /** The Slack user name the payload carried (`user_name`, or `user.username` of a click); recorded for the post-mortem. */
  userName?: string | undefined;
  channelId: string;
}

/**
 * A Slack user name as a log field: `{ name }` when the payload carried one, else nothing. Kept as
 * data (every renderer escapes it), cut to 80 characters; no Slack call and no scope is needed.
 */
export function nameField(name: string | undefined): { name?: string } {
  return typeof name === 'string' && name !== '' ? { name: name.slice(0, 80) } : {};
}
