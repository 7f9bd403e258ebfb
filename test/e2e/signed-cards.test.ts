/**
 * What the approver saw is what runs, whoever writes Redis. The bot draws every card from the plan
 * the worker signed (src/slack/card-plans.ts), never from the stream's copy of the step; a card
 * whose signed plan was altered is not drawn (no buttons); a click whose card named another plan
 * than the one on record decides nothing. Real bot, worker, fleet, Redis; fake Slack.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AnyEvent, AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { blockActionPayload, sendInteraction } from '../harness/slack/signed-request.ts';
import { startStack, type Stack } from '../harness/stack.ts';
import { IncidentLog } from '../../src/incident/log.ts';

const OPS = 'C0ONCALL01';
const ALICE = 'U0ALICE001';
const BOB = 'U0BOB00001';

function buttonsOf(m: StoredMessage | undefined): Array<{ action_id: string; value: string }> {
  const out: Array<{ action_id: string; value: string }> = [];
  for (const b of (m?.blocks ?? []) as Array<{
    type: string;
    elements?: Array<{ type: string; action_id?: string; value?: string }>;
  }>)
    if (b.type === 'actions')
      for (const e of b.elements ?? [])
        if (e.type === 'button' && e.action_id && e.value) out.push({ action_id: e.action_id, value: e.value });
  return out;
}

describe('cards are drawn from the worker-signed plan only', () => {
  let s: Stack;
  let log: IncidentLog;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 4 }],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      env: {
        GPU_MEDIC_APPROVERS: BOB,
        GPU_MEDIC_TERM_GRACE_SEC: '1',
        GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5',
        GPU_MEDIC_POLL_MS: '300',
      },
      tweakInventory: (inv) => {
        const c = inv.containers.find((x) => x.id === 'ct129');
        if (c) c.user = 'fleetuser';
      },
    });
    log = new IncidentLog(s.redis, s.prefix);
  });
  afterAll(async () => {
    await s?.stop();
  });

  async function rewrite(id: string, edit: (e: AnyLoggedEvent) => AnyLoggedEvent): Promise<void> {
    const events = await log.events(id);
    await s.redis.del(`${s.prefix}:inc:${id}:events`);
    for (const e of events) {
      const { id: _eid, ...rest } = edit(e);
      await log.append(id, rest as AnyEvent);
    }
  }

  /** Until the outbox has rendered everything appended to the incident. */
  async function rendered(id: string): Promise<void> {
    const deadline = Date.now() + 10_000;
    while ((await s.redis.sismember(`${s.prefix}:dirty`, id)) === 1) {
      if (Date.now() > deadline) throw new Error('the outbox did not render the incident');
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it('a rewritten step in the stream is not shown; an altered signed plan shows no buttons; a click naming another plan decides nothing', async () => {
    const holder = await s.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 30_000 }],
      title: 'sglang::scheduler_TP0',
    });
    const victim = await s.fleet.spawnBystander('kpro5', { title: 'nvidia-persistenced --user nvidia' });
    const r = await s.slash('unstick ct129', { user: ALICE });
    const id = String(r.incidentId);
    const thread = await s.threadOf(id, { timeoutMs: 30000, done: (t) => t.some((m) => buttonsOf(m).length === 2) });
    const card = thread.find((m) => buttonsOf(m).length === 2);
    if (!card) throw new Error('no card');
    const approve = buttonsOf(card).find((b) => b.action_id === 'gpu_approve');
    // The button carries the approval id and the signed plan's digest.
    expect(approve?.value).toMatch(/^apr_[A-Za-z0-9_-]{22}\.[0-9a-f]{64}$/);
    const cardNow = (): StoredMessage | undefined =>
      s.slack.thread(OPS, card.thread_ts ?? card.ts).find((m) => m.ts === card.ts);

    // A: the stream's step names the victim; the signed plan is intact. The card keeps the signed plan.
    await rewrite(id, (e) =>
      e.type === 'approval_requested'
        ? {
            ...e,
            step: {
              ...e.step,
              targets: e.step.targets.map((t) => ({ ...t, hostPid: victim.hostPid, cmdline: victim.cmdline })),
            },
          }
        : e,
    );
    await rendered(id);
    expect(cardNow()?.text).toContain(String(holder.hostPid));
    expect(cardNow()?.text).not.toContain(String(victim.hostPid));

    // B: the signed plan itself altered in the stream: the bot refuses to draw it; no buttons.
    await rewrite(id, (e) =>
      e.type === 'approval_requested' && e.seal
        ? { ...e, seal: { ...e.seal, body: e.seal.body.replaceAll(String(holder.hostPid), String(victim.hostPid)) } }
        : e,
    );
    await s.slack.waitFor(() => (/was not shown/.test(cardNow()?.text ?? '') ? true : null), 10_000);
    expect(buttonsOf(cardNow())).toEqual([]);
    expect(cardNow()?.text).not.toContain(String(victim.hostPid));

    // C: the approval's stored plan replaced as well; the old button (genuine digest) is clicked.
    const key = `${s.prefix}:approval:${approve?.value.split('.')[0]}`;
    const body = (await s.redis.hget(key, 'sealBody')) ?? '';
    await s.redis.hset(key, 'sealBody', body.replaceAll(String(holder.hostPid), String(victim.hostPid)));
    await sendInteraction(
      s.eventsUrl,
      s.signingSecret,
      blockActionPayload({
        user: BOB,
        channel: OPS,
        messageTs: card.ts,
        threadTs: card.thread_ts ?? card.ts,
        actionId: 'gpu_approve',
        value: approve?.value ?? '',
        responseUrl: s.slack.newResponseUrl(),
      }),
    );
    await s.slack.waitFor(
      () => (/does not belong/.test(String(s.slack.responses().at(-1)?.body.text ?? '')) ? true : null),
      5000,
    );
    // Refused by the bot before anything was stored or queued: the approval still waits, nothing was signalled.
    expect(await s.redis.hget(key, 'state')).toBe('pending');
    expect(s.fleet.signals().filter((x) => x.hostPid === victim.hostPid || x.hostPid === holder.hostPid)).toEqual([]);
  }, 90_000);
});
