import { findMachine, listMachines, type Machine } from '../src/config/machines.ts';
import { closest } from '../src/config/suggest.ts';
import { isCodedError } from '../src/errors.ts';
import { nameField, type CommandDeps, type SlashInput } from './deps.ts';
import { readOnlyIncident } from './read-only-incident.ts';
import { code } from '../src/render/escape.ts';

export const QUEUE_DOWN =
  ':warning: The work queue (Redis) is not answering, so nothing was done and nothing was queued. Try again in a minute; if it persists, check the Redis behind gpu-medic.';

/** What starting a command did: the answer, and the incident it opened or why it opened none. */
export interface Started {
  text: string;
  incidentId: string | null;
  refused: 'unknown_machine' | 'not_a_container' | 'target_locked' | 'queue_unavailable' | null;
}

/** `/gpu status <target|all>`: validate, open an incident, enqueue one read-only job per site. */
export async function statusCommand(target: string, input: SlashInput, deps: CommandDeps): Promise<string> {
  return (await startStatus(target, input, deps)).text;
}

/** The whole of `/gpu status` after policy (also run by an alert's Status button). */
export async function startStatus(target: string, input: SlashInput, deps: CommandDeps): Promise<Started> {
  let machines: Machine[];
  if (target === 'all') {
    machines = listMachines(deps.inventory);
    if (machines.length === 0)
      return {
        text: 'The inventory has no machines yet, so there is nothing to read. Nothing was queued.',
        incidentId: null,
        refused: 'unknown_machine',
      };
  } else {
    const m = findMachine(deps.inventory, target);
    if (!m) {
      const guess = closest(
        target,
        listMachines(deps.inventory).map((x) => x.id),
      );
      return {
        text: `:question: I don't know a machine called ${code(target)}${guess ? `; did you mean ${code(guess)}?` : '.'} Nothing was queued. \`/gpu status all\` lists every machine.`,
        incidentId: null,
        refused: 'unknown_machine',
      };
    }
    machines = [m];
  }
  const { meta, bySite } = readOnlyIncident(target === 'all' ? 'status_all' : 'status', machines, input, deps);
  const id = meta.id;
  try {
    // One round trip, all or nothing: the incident, its `requested` event and one job per site.
    await deps.dispatcher.enqueueAll(
      [...bySite].map(([site, ids]) => ({
        site,
        data: { kind: 'status', incidentId: id, machines: ids },
        jobId: `${id}-${site}`,
      })),
      (m) => deps.log.openIn(m, meta, { type: 'requested', at: meta.createdAt, ...nameField(input.userName) }),
    );
  } catch (e) {
    deps.logger.error({ err: e, incident: id, code: isCodedError(e) ? e.code : 'internal' }, 'could not queue status');
    return { text: QUEUE_DOWN, incidentId: null, refused: 'queue_unavailable' };
  }
  deps.logger.info({ incident: id, targets: meta.targets, user: input.userId }, 'status queued');
  const what = target === 'all' ? `all ${machines.length} machines` : code(target);
  return {
    text: `:mag: Reading ${what}; the table will appear in a thread in this channel (incident ${code(id)}).`,
    incidentId: id,
    refused: null,
  };
}
