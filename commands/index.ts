import type { App } from '@slack/bolt';
import { canRequest } from '../src/approval/policy.ts';
import { registerAlertActions } from './alert-actions.ts';
import { registerApprovalActions } from './approval-actions.ts';
import type { CommandDeps, SlashInput } from './deps.ts';
import { HELP_TEXT, parseCommandText } from './parse-text.ts';
import { doctorCommand } from './doctor.ts';
import { historyCommand } from './history.ts';
import { statusCommand } from './status.ts';
import { unstickCommand } from './unstick.ts';

/** Every slash command ends here: one ephemeral answer, and at most one incident. */
export async function handleSlash(input: SlashInput, deps: CommandDeps): Promise<string> {
  const cmd = parseCommandText(input.text);
  if (cmd.kind === 'help') return HELP_TEXT;
  if (cmd.kind === 'invalid') return `:question: ${cmd.message}. Nothing was queued. Try \`/gpu help\`.`;
  const allowed = canRequest(deps.policy, input.userId, input.channelId);
  if (!allowed.ok) {
    deps.logger.warn({ user: input.userId, channel: input.channelId }, 'request refused by policy');
    return `:no_entry: Refused: ${allowed.reason}. Nothing was queued. Ask the gpu-medic admins to add you or this channel.`;
  }
  switch (cmd.kind) {
    case 'status':
      return statusCommand(cmd.target, input, deps);
    case 'unstick':
      return unstickCommand(cmd.target, cmd.reason, input, deps);
    case 'doctor':
      return doctorCommand(cmd.target, input, deps);
    case 'history':
      return historyCommand(cmd.target, cmd.limit, cmd.cappedFrom, input, deps);
  }
}

export function registerCommands(app: App, deps: CommandDeps): void {
  app.command('/gpu', async ({ command, ack }) => {
    let text: string;
    try {
      text = await handleSlash(
        {
          text: command.text ?? '',
          userId: command.user_id,
          userName: command.user_name,
          channelId: command.channel_id,
        },
        deps,
      );
    } catch (err) {
      deps.logger.error({ err }, 'slash command failed');
      text =
        ":warning: Something went wrong on gpu-medic's side; nothing was queued. Try again, and tell the gpu-medic admins if it repeats.";
    }
    await ack({ response_type: 'ephemeral', text });
  });
  registerApprovalActions(app, deps);
  registerAlertActions(app, deps);
}
