/**
 * The contract between the watchdog (in the workers, which hold the SSH key) and the bot: each alert is an
 * incident of kind `alert` in the durable log, opened by the worker for GPU_MEDIC_ALERTS_CHANNEL, and
 * rendered by the bot's outbox as ONE top-level message that is edited in place as these events arrive.
 *
 * - One incident per alert episode: the id is derived from the alert's key and the time the
 *   condition was first seen (`alertIncidentId`, alert-id.ts), so a worker that restarts between storing the
 *   watch state and appending the event re-derives the same incident, never a second one.
 * - meta: `kind: 'alert'`, `requester: 'watchdog'`, `channel`: the alerts channel,
 *   `targets: [machineId]`, `text`: the alert key (for the record), `reason: null`.
 * - Events: `alert_raised` once, `alert_updated` when what it says changes, `alert_cleared` once,
 *   `alert_snoozed` when someone snoozes its machine or GPU, `alert_action` when someone clicks its
 *   Status or Unstick button (the incident that click opened).
 */
import type { Alert } from './judge.ts';

/**
 * What Alertmanager said of an alert (src/alertmanager/), carried by its alert_raised / _updated /
 * _cleared events beside the Alert it maps to (whose key is `alertmanager:<fingerprint>`). Data only:
 * every string is rendered escaped, and none reaches a machine.
 */
export interface ExternalAlert {
  alertname: string;
  fingerprint: string;
  /** The alert's `generatorURL` when it is an http(s) URL. */
  generatorURL: string | null;
  /** Its labels (bounded): the matchers of the silence a Snooze creates. */
  labels: Record<string, string>;
  /** Why it matched no machine of the inventory (so it has no buttons); null when it did. */
  unmatched: string | null;
}

/**
 * One incident may hold several members of one condition (src/watchdog/condition.ts): watchdog
 * alerts by their key, Alertmanager alerts (with `external`) by `alertmanager:<fingerprint>`; the
 * message is cleared once every member that was raised is cleared (src/watchdog/alert-state.ts).
 */
export type AlertEvent =
  | { type: 'alert_raised'; at: string; alert: Alert; external?: ExternalAlert }
  | { type: 'alert_updated'; at: string; alert: Alert; external?: ExternalAlert }
  | { type: 'alert_cleared'; at: string; alert: Alert; external?: ExternalAlert }
  /** `scope`: `machineId` or `machineId/gpuIndex`; `until`: ISO time the snooze ends. */
  | { type: 'alert_snoozed'; at: string; by: string; scope: string; until: string }
  /**
   * A click on Status, Unstick or Snooze: the incident it opened, or why it was refused (`refused`: an
   * AlertActionRefusal). A Snooze that went through is its `alert_snoozed`. `target`: the machine the
   * click acted on (for Unstick on a host alert, the container chosen).
   */
  | {
      type: 'alert_action';
      at: string;
      by: string;
      action: 'status' | 'unstick' | 'snooze';
      incidentId: string | null;
      refused: string | null;
      target?: string;
    };

/** Why a click on a live alert was refused (alert_action.refused). */
export type AlertActionRefusal =
  | 'policy'
  | 'target_locked'
  | 'queue_unavailable'
  | 'not_a_container'
  | 'unknown_machine';

/** Who opens alert incidents (IncidentMeta.requester). */
export const WATCHDOG_REQUESTER = 'watchdog';
/** The requester of an alert incident Alertmanager opened. */
export const ALERTMANAGER_REQUESTER = 'alertmanager';

/** Slack action ids of an alert message's buttons; each button's `value` is the alert's incident id only. */
export const ALERT_STATUS_ACTION_ID = 'gpu_alert_status';
export const ALERT_UNSTICK_ACTION_ID = 'gpu_alert_unstick';
export const ALERT_SNOOZE_1H_ACTION_ID = 'gpu_alert_snooze_1h';
export const ALERT_SNOOZE_1D_ACTION_ID = 'gpu_alert_snooze_1d';
/** The same for the alert's GPU (`machineId/gpuIndex`), shown when the alert has one. */
export const ALERT_SNOOZE_GPU_1H_ACTION_ID = 'gpu_alert_snooze_gpu_1h';
export const ALERT_SNOOZE_GPU_1D_ACTION_ID = 'gpu_alert_snooze_gpu_1d';
/**
 * A host alert's Unstick: a static_select of the host's containers (unstick works on containers);
 * each option's value is `<alert incident id>|<container id>`, checked against the inventory on click.
 */
export const ALERT_UNSTICK_PICK_ACTION_ID = 'gpu_alert_unstick_pick';
