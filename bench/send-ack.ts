/**
 * One signed slash command for the ack figures (run.ts, ack-builds.ts). A kept-alive connection
 * that the bot closed as idle (Node's 5 s keep-alive timeout) just as the client reused it fails
 * with "other side closed" before the request reached the bot; on a loaded machine that race hit
 * one request in a few thousand and failed the whole figure. Such a request is sent again once,
 * and timed from the first attempt, so the retry counts against the ack.
 */
import {
  type SignedResponse,
  type SlashCommandFields,
  sendSlashCommand,
} from '../test/harness/slack/signed-request.ts';

export async function sendAck(
  url: string,
  secret: string,
  fields: SlashCommandFields,
  timeoutMs = 30_000,
): Promise<SignedResponse> {
  const t0 = performance.now();
  try {
    return await sendSlashCommand(url, secret, fields, { timeoutMs });
  } catch (e) {
    if (!(e instanceof Error && /other side closed/.test(String(e.cause)))) throw e;
    const r = await sendSlashCommand(url, secret, fields, { timeoutMs });
    return { ...r, elapsedMs: performance.now() - t0 };
  }
}
