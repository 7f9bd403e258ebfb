import { findMachine, listMachines, type Machine } from '../src/config/machines.ts';
import { closest } from '../src/config/suggest.ts';
import { code } from '../src/render/escape.ts';
import { nameField, type CommandDeps, type SlashInput } from './deps.ts';
import { readOnlyIncident } from './read-only-incident.ts';
import { QUEUE_DOWN } from './status.ts';

/**
 * `/gpu doctor [machine|all]`, for admins (GPU_MEDIC_ADMINS, as `/gpu help` and .env.example say):
 * validate, open an incident, enqueue one read-only doctor job per site. The worker, which holds
 * the SSH key, runs the checks; the table arrives in the thread.
 */
export async function doctorCommand(target: string, input: SlashInput, deps: CommandDeps): Promise<string> {
  if (!(deps.policy.admins ?? []).includes(input.userId))
    return ":no_entry: `/gpu doctor` is for gpu-medic admins only (GPU_MEDIC_ADMINS, by Slack user ID). Nothing was queued. An admin can run it, or run `gpu-medic doctor` as the worker's user where the worker runs.";
  let machines: Machine[];
  if (target === 'all') {
    machines = listMachines(deps.inventory);
    if (machines.length === 0)
      return 'The inventory has no machines yet, so there is nothing to check. Nothing was queued.';
  } else {
    const m = findMachine(deps.inventory, target);
    if (!m) {
      const guess = closest(
        target,
        listMachines(deps.inventory).map((x) => x.id),
      );
      return `:question: No machine called "${target}"${guess ? `; did you mean ${code(guess)}?` : '.'} Nothing was queued. \`/gpu doctor all\` checks every machine.`;
    }
    machines = [m];
  }
  const { meta, bySite } = readOnlyIncident('doctor', machines, input, deps);
  const id = meta.id;
  try {
    // One round trip, all or nothing: the incident, its `requested` event and one job per site.
    await deps.dispatcher.enqueueAll(
      [...bySite].map(([site, ids]) => ({
        site,
        data: { kind: 'doctor', incidentId: id, machines: ids },
        jobId: `${id}-doctor-${site}`,
      })),
      (m) => deps.log.openIn(m, meta, { type: 'requested', at: meta.createdAt, ...nameField(input.userName) }),
    );
  } catch (e) {
    deps.logger.error({ err: e, incident: id }, 'could not queue doctor');
    return QUEUE_DOWN;
  }
  deps.logger.info({ incident: id, targets: meta.targets, user: input.userId }, 'doctor queued');
  const what = target === 'all' ? `all ${machines.length} machines` : code(target);
  return `:stethoscope: Checking ${what} (read-only: nothing is signalled or reset); the table will appear in a thread in this channel (incident ${code(id)}).`;
}
