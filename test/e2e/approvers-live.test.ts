/**
 * A removed approver cannot approve: approvers are checked when they click, against the bot's live
 * configuration as well as the list frozen into the card. Real Bolt HTTP receiver (signed requests), real
 * Redis, real sshd fleet, fake Slack. The worker still lists DAVE (it froze him into the card); the bot's
 * live GPU_MEDIC_APPROVERS no longer does (he was removed and the bot restarted with the new list).
 */
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blockActionPayload, sendInteraction } from '../harness/slack/signed-request.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { startStack, type Stack } from '../harness/stack.ts';
import { ApprovalStore } from '../../src/approval/approval-store.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { queueName } from '../../src/queue/jobs.ts';

const OPS = 'C0ONCALL01';
const ALICE = 'U0ALICE001';
const BOB = 'U0BOB00001';
const DAVE = 'U0DAVE0001';

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

type Ev<T extends AnyLoggedEvent['type']> = Extract<AnyLoggedEvent, { type: T }>;
const ofType = <T extends AnyLoggedEvent['type']>(ev: readonly AnyLoggedEvent[], t: T): Array<Ev<T>> =>
  ev.filter((e): e is Ev<T> => e.type === t);

describe('an approver removed from the live configuration cannot decide a card that still lists them', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2 }],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      env: {
        GPU_MEDIC_APPROVERS: `${BOB},${DAVE}`,
        GPU_MEDIC_TERM_GRACE_SEC: '1',
        GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5',
        GPU_MEDIC_POLL_MS: '300',
      },
      botEnv: { GPU_MEDIC_APPROVERS: BOB },
      tweakInventory: (inv) => {
        const c = inv.containers.find((x) => x.id === 'ct129');
        if (c) c.user = 'fleetuser';
      },
    });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  }, 60_000);

  it('DAVE (frozen on the card, removed live) is refused with a reason and an approval_refused entry; nothing runs; BOB then approves and the kill runs once', async () => {
    const holder = await s.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 50_000 }],
      title: 'sglang::scheduler_TP0',
    });
    const r = await s.slash('unstick ct129', { user: ALICE });
    const id = String(r.incidentId);
    const t = await s.threadOf(id, { timeoutMs: 30_000, done: (th) => th.some((m) => buttonsOf(m).length === 2) });
    const card = t.find((m) => buttonsOf(m).length === 2);
    const approve = buttonsOf(card).find((b) => b.action_id === 'gpu_approve');
    if (!card || !approve) throw new Error('no card');
    const approvals = new ApprovalStore(s.redis, s.prefix);
    // The card froze the worker's list, DAVE included.
    expect((await approvals.get(approve.value.split('.')[0] ?? ''))?.approvers).toEqual([BOB, DAVE]);

    const click = (user: string) =>
      sendInteraction(
        s.eventsUrl,
        s.signingSecret,
        blockActionPayload({
          user,
          channel: OPS,
          messageTs: card.ts,
          threadTs: card.thread_ts ?? card.ts,
          actionId: approve.action_id,
          value: approve.value,
          responseUrl: s.slack.newResponseUrl(),
        }),
      );
    const n = s.slack.responses().length;
    expect((await click(DAVE)).status).toBe(200);
    const answer = await s.slack.waitFor(
      () =>
        s.slack
          .responses()
          .slice(n)
          .map((x) => String(x.body.text ?? ''))[0] ?? null,
      10_000,
    );
    expect(answer).toMatch(/no longer on the approvers list/);
    expect(answer).toMatch(/Nothing was run/);
    const log = new IncidentLog(s.redis, s.prefix);
    const refused = ofType(await log.events(id), 'approval_refused');
    expect(refused.map((e) => [e.by, e.reason])).toEqual([[DAVE, 'not_approver']]);
    expect(s.logText()).toMatch(/approval click refused/);
    expect((await approvals.get(approve.value.split('.')[0] ?? ''))?.state).toBe('pending');
    const q = new Queue(queueName('default'), { connection: s.redis, prefix: s.prefix });
    expect(await q.getJob(`${id}-decision-${approve.value.split('.')[0]}`)).toBeUndefined();
    await q.close();
    expect(s.fleet.signals().filter((x) => x.hostPid === holder.hostPid)).toEqual([]);
    expect(ofType(await log.events(id), 'approval_decided')).toEqual([]);

    expect((await click(BOB)).status).toBe(200);
    await s.threadOf(id, { timeoutMs: 30_000, done: (th) => /Recovered/.test(th[0]?.text ?? '') });
    expect(
      s.fleet
        .signals()
        .filter((x) => x.hostPid === holder.hostPid)
        .map((x) => x.signal),
    ).toEqual(['SIGKILL']);
    const ev = await log.events(id);
    expect(ofType(ev, 'approval_decided').map((e) => e.by)).toEqual([BOB]);
  }, 120_000);
});
