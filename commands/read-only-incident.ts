import type { Machine } from '../src/config/machines.ts';
import type { IncidentKind, IncidentMeta } from '../src/incident/events.ts';
import type { CommandDeps, SlashInput } from './deps.ts';

/** A read-only incident (status, doctor) over `machines`, and its machine ids grouped by site queue. */
export function readOnlyIncident(
  kind: IncidentKind,
  machines: readonly Machine[],
  input: SlashInput,
  deps: CommandDeps,
): { meta: IncidentMeta; bySite: Map<string, string[]> } {
  const meta: IncidentMeta = {
    id: deps.newIncidentId(),
    kind,
    requester: input.userId,
    channel: input.channelId,
    targets: machines.map((m) => m.id),
    text: input.text.slice(0, 500),
    reason: null,
    createdAt: deps.now().toISOString(),
  };
  const bySite = new Map<string, string[]>();
  for (const m of machines) bySite.set(m.site, [...(bySite.get(m.site) ?? []), m.id]);
  return { meta, bySite };
}
