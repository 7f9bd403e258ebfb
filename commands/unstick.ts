import { findMachine, listMachines, requestWhere } from '../src/config/machines.ts';
import { nearCertainTypo } from '../src/config/suggest.ts';
import type { IncidentMeta } from '../src/incident/events.ts';
import { nameField, type CommandDeps, type SlashInput } from './deps.ts';
import { QUEUE_DOWN, type Started } from './status.ts';
import { code, codeLine, mention, text } from '../src/render/escape.ts';

function hhmm(iso: string): string {
  return `${iso.slice(11, 16)} UTC`;
}

/** `/gpu unstick <container> [reason]`: lock the target, open an incident, enqueue the (non-retried) job. */
export async function unstickCommand(
  target: string,
  reason: string | null,
  input: SlashInput,
  deps: CommandDeps,
): Promise<string> {
  return (await startUnstick(target, reason, input, deps)).text;
}

/** The whole of `/gpu unstick` after policy (also run by an alert's Unstick button, the clicker as requester). */
export async function startUnstick(
  target: string,
  reason: string | null,
  input: SlashInput,
  deps: CommandDeps,
): Promise<Started> {
  const m = findMachine(deps.inventory, target);
  if (!m) {
    // A destructive command proposes only a near-certain typo, never merely the closest other container.
    const guess = nearCertainTypo(
      target,
      listMachines(deps.inventory)
        .filter((x) => x.kind === 'container')
        .map((x) => x.id),
    );
    const text = guess
      ? `:question: I don't know a container called ${code(target)}; did you mean ${code(guess)}? Nothing was done: run \`/gpu unstick ${codeLine(guess)}\` if so.`
      : `:question: I don't know a container called ${code(target)}. Nothing was done. \`/gpu status all\` lists every machine.`;
    return { text, incidentId: null, refused: 'unknown_machine' };
  }
  if (m.kind !== 'container')
    return {
      text: `:information_source: ${code(target)} is a Proxmox host. \`unstick\` works on a container (e.g. \`/gpu unstick ct129\`): it stops exactly the processes holding that container's GPUs. Nothing was done. \`/gpu status ${codeLine(target)}\` shows who holds its GPUs.`,
      incidentId: null,
      refused: 'not_a_container',
    };
  const id = deps.newIncidentId();
  const now = deps.now().toISOString();
  try {
    const got = await deps.lock.acquire(m.id, { incidentId: id, requester: input.userId, since: now }, deps.lockTtlMs);
    if (!got.ok) {
      const h = got.holder;
      return {
        text: `:lock: ${code(m.id)} is already being worked on${h ? ` (incident ${code(h.incidentId)}, by ${mention(h.requester)} since ${text(hhmm(h.since))})` : ''}. Nothing was done. \`/gpu status ${m.id}\` still works; follow that incident's thread.`,
        incidentId: null,
        refused: 'target_locked',
      };
    }
  } catch (e) {
    deps.logger.error({ err: e, incident: id }, 'could not take the target lock');
    return { text: QUEUE_DOWN, incidentId: null, refused: 'queue_unavailable' };
  }
  const meta: IncidentMeta = {
    id,
    kind: 'unstick',
    requester: input.userId,
    channel: input.channelId,
    targets: [m.id],
    text: input.text.slice(0, 500),
    reason,
    createdAt: now,
  };
  try {
    // Who asked, for which target, where and when, signed: tier 1 runs on this alone, so it must not be
    // forgeable.
    const request = deps.signer.request(
      {
        incidentId: id,
        target: m.id,
        ...requestWhere(m),
        requester: input.userId,
        channel: input.channelId,
      },
      Date.parse(now),
    );
    // One round trip after the lock, all or nothing: the signed incident, its `requested` event, its job.
    await deps.dispatcher.enqueueAll(
      [{ site: m.site, data: { kind: 'unstick', incidentId: id, machineId: m.id }, jobId: `${id}-unstick` }],
      (tx) => deps.log.openIn(tx, meta, { type: 'requested', at: now, ...nameField(input.userName) }, request),
    );
  } catch (e) {
    deps.logger.error({ err: e, incident: id }, 'could not queue unstick');
    await deps.lock.release(m.id, id).catch(() => undefined);
    return { text: QUEUE_DOWN, incidentId: null, refused: 'queue_unavailable' };
  }
  deps.logger.info({ incident: id, target: m.id, user: input.userId }, 'unstick queued');
  return {
    text: `:ambulance: Unsticking ${code(m.id)}: before snapshot, diagnosis and container-level steps follow in a thread in this channel (incident ${code(id)}). Host-level kills will need a second approver.`,
    incidentId: id,
    refused: null,
  };
}
