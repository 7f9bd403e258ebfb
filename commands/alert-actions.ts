import type { App, BlockAction, ButtonAction, StaticSelectAction } from '@slack/bolt';
import { canRequest } from '../src/approval/policy.ts';
import { findMachine } from '../src/config/machines.ts';
import { code, codeLine } from '../src/render/escape.ts';
import {
  ALERT_SNOOZE_1D_ACTION_ID,
  ALERT_SNOOZE_1H_ACTION_ID,
  ALERT_SNOOZE_GPU_1D_ACTION_ID,
  ALERT_SNOOZE_GPU_1H_ACTION_ID,
  ALERT_STATUS_ACTION_ID,
  ALERT_UNSTICK_ACTION_ID,
  ALERT_UNSTICK_PICK_ACTION_ID,
  type AlertActionRefusal,
} from '../src/watchdog/alert-events.ts';
import { alertEpisode } from '../src/watchdog/alert-state.ts';
import type { CommandDeps } from './deps.ts';
import { startStatus } from './status.ts';
import { startUnstick } from './unstick.ts';

export type AlertButton =
  | 'status'
  | 'unstick'
  | 'unstick_pick'
  | 'snooze_1h'
  | 'snooze_1d'
  | 'snooze_gpu_1h'
  | 'snooze_gpu_1d';

/** One click on an alert message, as Slack sent it: nothing in it is trusted but the shape. */
export interface AlertClick {
  button: AlertButton;
  /** The button's value (the alert's incident id), or the picked option's (`<id>|<container>`). */
  value: string;
  user: string;
  /** The clicker's Slack user name; an incident the click opens records it as its requester's. */
  userName?: string | undefined;
  channel: string | null;
  messageTs: string | null;
}

const ALERT_ID = /^inc_alert_[0-9a-f]{20}$/;
const HOUR = 3_600_000;
const SNOOZE: Partial<Record<AlertButton, { ms: number; gpu: boolean; words: string }>> = {
  snooze_1h: { ms: HOUR, gpu: false, words: '1 h' },
  snooze_1d: { ms: 24 * HOUR, gpu: false, words: '1 day' },
  snooze_gpu_1h: { ms: HOUR, gpu: true, words: '1 h' },
  snooze_gpu_1d: { ms: 24 * HOUR, gpu: true, words: '1 day' },
};

const UNKNOWN =
  ':question: This alert does not exist (any more). Nothing was done. `/gpu status <machine>` reads a machine now.';
const NOT_THIS_MESSAGE = ":no_entry: This button does not belong to that alert's message. Nothing was done.";
const hhmm = (ms: number): string => `${new Date(ms).toISOString().slice(11, 16)} UTC`;
const stamp = (ms: number): string => `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;

/**
 * One click on an alert's Status, Unstick or Snooze. Only the alert's incident id is taken from
 * the click, and checked: the machine comes from the stored meta, the GPU from the stored events,
 * a picked container must be one of that host's in the inventory. A click on an unknown, foreign
 * or cleared alert changes nothing; every other click is recorded on the alert (alert_action, or
 * alert_snoozed) and runs with every rule of the slash command, the clicker as requester.
 */
async function handleAlertClick(click: AlertClick, deps: CommandDeps): Promise<string> {
  const sep = click.value.lastIndexOf('|');
  const id = click.button === 'unstick_pick' && sep > 0 ? click.value.slice(0, sep) : click.value;
  const picked = click.button === 'unstick_pick' && sep > 0 ? click.value.slice(sep + 1) : null;
  if (!ALERT_ID.test(id)) return UNKNOWN;
  const meta = await deps.log.meta(id);
  if (meta?.kind !== 'alert') return UNKNOWN;
  // The id is not secret: a tampered payload could carry another alert's id on this message.
  const parent = (await deps.log.slackRefs(id)).get('parent');
  if (click.channel !== meta.channel || !parent || click.messageTs !== parent.ts) return NOT_THIS_MESSAGE;
  const { alert, clearedAt, external } = alertEpisode(await deps.log.events(id));
  if (!alert) return UNKNOWN;
  const machineId = meta.targets[0] ?? '';
  if (clearedAt !== null)
    return `:white_check_mark: This alert cleared at ${hhmm(clearedAt)}. Nothing was done. \`/gpu status ${codeLine(machineId)}\` reads ${code(machineId)} now.`;

  const snooze = SNOOZE[click.button];
  const action: 'status' | 'unstick' | 'snooze' = click.button === 'status' ? 'status' : snooze ? 'snooze' : 'unstick';
  let target = machineId;
  if (action === 'unstick') {
    const m = findMachine(deps.inventory, machineId);
    if (click.button === 'unstick_pick') {
      const c = picked === null ? null : findMachine(deps.inventory, picked);
      if (m?.kind !== 'host' || !c || c.kind !== 'container' || c.hostId !== m.id)
        return ":no_entry: That choice is not a container of this alert's host. Nothing was done.";
      target = c.id;
    } else if (m && m.kind !== 'container')
      return `:no_entry: ${code(machineId)} is a host: pick one of its containers in the alert's Unstick list. Nothing was done.`;
  }
  if (snooze?.gpu && alert.gpu === null)
    return ':no_entry: This alert is not about one GPU, so there is no GPU to snooze. Nothing was done.';
  const at = deps.now().toISOString();
  const record = (incidentId: string | null, refused: AlertActionRefusal | null) =>
    deps.log.append(id, { type: 'alert_action', at, by: click.user, action, incidentId, refused, target });

  if (!findMachine(deps.inventory, machineId)) {
    await record(null, 'unknown_machine');
    return `:question: ${code(machineId)} is no longer in gpu-medic's inventory. Nothing was done.`;
  }
  const allowed = canRequest(deps.policy, click.user, meta.channel);
  if (!allowed.ok) {
    deps.logger.warn({ user: click.user, channel: meta.channel, alert: id, action }, 'alert click refused by policy');
    await record(null, 'policy');
    return `:no_entry: Refused: ${allowed.reason}. Nothing was done or queued. Ask the gpu-medic admins to add you or this channel.`;
  }

  if (snooze) {
    const scope = snooze.gpu ? `${machineId}/${alert.gpu}` : machineId;
    const until = await deps.snoozes.snooze(scope, deps.now().getTime() + snooze.ms);
    await deps.log.append(id, {
      type: 'alert_snoozed',
      at,
      by: click.user,
      scope,
      until: new Date(until).toISOString(),
    });
    const what = snooze.gpu ? `GPU ${alert.gpu} of ${code(machineId)}` : code(machineId);
    const silenced = external && deps.silence ? await silenceOf(external.labels, until, click.user, id, deps) : '';
    return `:zzz: ${what} is snoozed until ${stamp(until)}${until > deps.now().getTime() + snooze.ms ? ' (an earlier, longer snooze is kept)' : ''}: the watchdog raises no new alert there until then.${silenced} Nothing was signalled or reset; this message stays as it is and still says when the condition clears.`;
  }
  const channel = deps.alertsChannel ?? meta.channel;
  const input = { userId: click.user, userName: click.userName, channelId: channel };
  const started =
    action === 'status'
      ? await startStatus(machineId, { ...input, text: `status ${machineId}` }, deps)
      : await startUnstick(
          target,
          `from the watchdog alert ${id} on ${machineId}`,
          { ...input, text: `unstick ${target}` },
          deps,
        );
  await record(started.incidentId, started.refused);
  return started.text;
}

/** The Alertmanager silence of a snooze, in words for the answer; a failure is said, and the snooze stands. */
async function silenceOf(
  labels: Readonly<Record<string, string>>,
  until: number,
  by: string,
  id: string,
  deps: CommandDeps,
): Promise<string> {
  try {
    const sid = (await deps.silence?.(labels, until, by, id)) ?? '';
    return ` Alertmanager silences this alert (its labels) until then too: silence ${code(sid)}.`;
  } catch (err) {
    deps.logger.warn({ err, alert: id }, 'alert snooze: the Alertmanager silence could not be created');
    return ' The Alertmanager silence could not be created (Alertmanager did not take it): Alertmanager keeps notifying, and this message stays one message.';
  }
}

const BUTTONS: ReadonlyArray<[string, AlertButton]> = [
  [ALERT_STATUS_ACTION_ID, 'status'],
  [ALERT_UNSTICK_ACTION_ID, 'unstick'],
  [ALERT_SNOOZE_1H_ACTION_ID, 'snooze_1h'],
  [ALERT_SNOOZE_1D_ACTION_ID, 'snooze_1d'],
  [ALERT_SNOOZE_GPU_1H_ACTION_ID, 'snooze_gpu_1h'],
  [ALERT_SNOOZE_GPU_1D_ACTION_ID, 'snooze_gpu_1d'],
];

export function registerAlertActions(app: App, deps: CommandDeps): void {
  const run = async (
    body: BlockAction,
    button: AlertButton,
    value: string,
    respond: (m: { response_type: 'ephemeral'; replace_original: false; text: string }) => Promise<unknown>,
  ): Promise<void> => {
    let text: string;
    try {
      text = await handleAlertClick(
        {
          button,
          value,
          user: body.user.id,
          userName: body.user.username ?? body.user.name,
          channel: body.channel?.id ?? body.container?.channel_id ?? null,
          messageTs: body.message?.ts ?? body.container?.message_ts ?? null,
        },
        deps,
      );
    } catch (err) {
      deps.logger.error({ err }, 'alert click failed');
      text =
        ':warning: gpu-medic could not handle this click (queue unavailable?). Nothing was done. Try again in a minute.';
    }
    await respond({ response_type: 'ephemeral', replace_original: false, text });
  };
  for (const [actionId, button] of BUTTONS)
    app.action<BlockAction<ButtonAction>>(
      { type: 'block_actions', action_id: actionId },
      async ({ ack, body, action, respond }) => {
        await ack();
        await run(body, button, String(action.value ?? ''), respond);
      },
    );
  app.action<BlockAction<StaticSelectAction>>(
    { type: 'block_actions', action_id: ALERT_UNSTICK_PICK_ACTION_ID },
    async ({ ack, body, action, respond }) => {
      await ack();
      await run(body, 'unstick_pick', String(action.selected_option?.value ?? ''), respond);
    },
  );
}
