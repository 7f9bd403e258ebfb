import { findMachine, listMachines } from '../src/config/machines.ts';
import { closest } from '../src/config/suggest.ts';
import { isCodedError } from '../src/errors.ts';
import { readHistory } from '../src/incident/history.ts';
import { summarizeIncident } from '../src/incident/incident-summary.ts';
import { code } from '../src/render/escape.ts';
import { renderHistory } from '../src/render/history.ts';
import type { CommandDeps, SlashInput } from './deps.ts';
import { HISTORY_MAX } from './parse-text.ts';

const LOG_DOWN =
  ':warning: The incident log (Redis) is not answering, so no history could be read. Nothing was done. Try again in a minute; if it persists, check the Redis behind gpu-medic.';

/**
 * `/gpu history <machine> [N]`: the last N incidents that touched the machine, from the durable log,
 * answered only to the asker. Read-only: it opens no incident, queues no job and reaches no machine.
 */
export async function historyCommand(
  target: string,
  limit: number,
  cappedFrom: number | null,
  input: SlashInput,
  deps: CommandDeps,
): Promise<string> {
  const m = findMachine(deps.inventory, target);
  if (!m) {
    const guess = closest(
      target,
      listMachines(deps.inventory).map((x) => x.id),
    );
    return `:question: I don't know a machine called ${code(target)}${guess ? `; did you mean ${code(guess)}?` : '.'} Nothing was read. \`/gpu status all\` lists every machine.`;
  }
  const containers =
    m.kind === 'host'
      ? listMachines(deps.inventory).flatMap((x) => (x.kind === 'container' && x.hostId === m.id ? [x.id] : []))
      : [];
  try {
    const r = await readHistory(deps.log, { target: m, containers, limit });
    deps.logger.info({ target: m.id, user: input.userId, shown: r.items.length }, 'history read');
    return renderHistory({
      target: { id: m.id, kind: m.kind },
      containers,
      limit,
      cappedFrom,
      max: HISTORY_MAX,
      more: r.more,
      scan: r.fallback,
      entries: r.items.map((i) => ({
        id: i.id,
        at: i.at,
        via: i.via,
        summary: i.meta ? summarizeIncident(i.meta, i.events) : null,
      })),
    });
  } catch (e) {
    deps.logger.error({ err: e, target: m.id, code: isCodedError(e) ? e.code : 'internal' }, 'could not read history');
    return LOG_DOWN;
  }
}
