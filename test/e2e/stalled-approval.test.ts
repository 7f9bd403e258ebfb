/**
 * Approvals that don't stall, end to end: real Bolt HTTP receiver (signed requests), real Redis
 * and BullMQ delayed jobs, real sshd fleet, fake Slack. Cards live 15 s (reminder at 7.5 s) and
 * escalate to ERIN after 5 s (the bot's own settings, as short as they go without racing a click:
 * ERIN's approval after the escalation still has 10 s before the expiry). On ct129, ERIN's click before the escalation is refused and runs
 * nothing; the escalation reply pings her; her click after it runs the host kill. On ct130 nobody
 * decides: the reminder is posted once, and at expiry the card and the thread tell ALICE that
 * nothing ran, what is still held and who can act.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blockActionPayload, sendInteraction } from '../harness/slack/signed-request.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { startStack, type Stack } from '../harness/stack.ts';
import { ApprovalStore } from '../../src/approval/approval-store.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';

const OPS = 'C0ONCALL01';
const ALICE = 'U0ALICE001';
const BOB = 'U0BOB00001';
const ERIN = 'U0ERIN0001';

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
const all = (m: StoredMessage): string => `${m.text} ${JSON.stringify(m.blocks ?? [])}`;

// The two cards are on separate containers and wait on real timers (5 s escalation, 15 s
// expiry): they run side by side on the one stack.
describe.concurrent('a card nobody decides in time reminds, escalates and expires with advice', () => {
  let s: Stack;
  /** The bot's clock runs this far from the wall clock: a click "before the escalation" is timed, not raced. */
  let botOffsetMs = 0;
  const botNow = (): number => Date.now() + botOffsetMs;
  beforeAll(async () => {
    s = await startStack({
      botNow,
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2 }],
        containers: [
          { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
          { id: 'ct130', vmid: 130, host: 'kpro5', ownAddress: true },
        ],
      },
      env: {
        GPU_MEDIC_APPROVERS: BOB,
        GPU_MEDIC_ESCALATION_APPROVERS: ERIN,
        GPU_MEDIC_ESCALATE_AFTER_SEC: '5',
        GPU_MEDIC_APPROVAL_TTL_SEC: '15',
        GPU_MEDIC_TERM_GRACE_SEC: '1',
        GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5',
        GPU_MEDIC_POLL_MS: '300',
      },
      // The container logins are fleetuser: root's GPU jobs inside need the host (S3).
      tweakInventory: (inv) => {
        for (const c of inv.containers) c.user = 'fleetuser';
      },
    });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  }, 60_000);

  const cardOf = (t: StoredMessage[]) => t.find((m) => buttonsOf(m).length === 2);
  /** Clicks Approve and returns the answer posted to that click's own response_url. */
  const click = async (
    user: string,
    card: StoredMessage,
    value: string,
  ): Promise<{ status: number; answer: string }> => {
    const responseUrl = s.slack.newResponseUrl();
    const res = await sendInteraction(
      s.eventsUrl,
      s.signingSecret,
      blockActionPayload({
        user,
        channel: OPS,
        messageTs: card.ts,
        threadTs: card.thread_ts ?? card.ts,
        actionId: 'gpu_approve',
        value,
        responseUrl,
      }),
      { timestampSec: Math.floor(botNow() / 1000) },
    );
    const answer = await s.slack.waitFor(
      () => s.slack.responses().find((x) => x.url === responseUrl)?.body.text ?? null,
      15_000,
    );
    return { status: res.status, answer: String(answer) };
  };

  it('the escalation approver is refused before the escalation, pinged at it, and her approval then runs the host kill once', async () => {
    const holder = await s.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 50_000 }],
      title: 'sglang::scheduler_TP0',
    });
    const id = String((await s.slash('unstick ct129', { user: ALICE })).incidentId);
    const t = await s.threadOf(id, { timeoutMs: 60_000, done: (th) => cardOf(th) !== undefined });
    const card = cardOf(t);
    const value = buttonsOf(card).find((b) => b.action_id === 'gpu_approve')?.value ?? '';
    if (!card) throw new Error('no card');
    const approval = await new ApprovalStore(s.redis, s.prefix).get(value.split('.')[0] ?? '');
    expect(approval?.escalation?.approvers).toEqual([ERIN]);
    expect(all(card)).toContain('escalates to <@U0ERIN0001> at');

    // Her click reaches the bot one second after the card was posted (on the bot's clock), however
    // long this machine took to get here: before the 5 s escalation.
    if (!approval) throw new Error('no approval');
    botOffsetMs = approval.createdAt + 1000 - Date.now();
    const { status, answer: early } = await click(ERIN, card, value).finally(() => {
      botOffsetMs = 0;
    });
    expect(status).toBe(200);
    expect(early).toMatch(/escalation group.*may decide it from \d\d:\d\d UTC on/);
    expect(early).toMatch(/Nothing was run/);
    expect(s.fleet.signals().filter((x) => x.hostPid === holder.hostPid)).toEqual([]);

    const escalated = await s.threadOf(id, {
      timeoutMs: 60_000,
      done: (th) => th.some((m) => /Escalated/.test(m.text)),
    });
    const ping = escalated.find((m) => /Escalated/.test(m.text));
    expect(ping?.text).toContain(`<@${ERIN}>`);
    expect(ping?.text).toContain('you may now approve or deny it too');
    // The card itself now says how long is left, as of the escalation.
    expect(all(escalated.find((m) => m.ts === card.ts) ?? card)).toMatch(
      /as of \d\d:\d\d UTC: (\d+ min|less than a minute) left/,
    );

    const approved = await click(ERIN, card, value);
    expect(approved.status).toBe(200);
    expect(approved.answer).toMatch(/^:white_check_mark: Approved/);
    await s.threadOf(id, { timeoutMs: 60_000, done: (th) => /Recovered/.test(th[0]?.text ?? '') });
    expect(
      s.fleet
        .signals()
        .filter((x) => x.hostPid === holder.hostPid)
        .map((x) => x.signal),
    ).toEqual(['SIGKILL']);
    const ev = await new IncidentLog(s.redis, s.prefix).events(id);
    expect(ofType(ev, 'approval_decided').map((e) => e.by)).toEqual([ERIN]);
    expect(ofType(ev, 'approval_refused').map((e) => [e.by, e.reason])).toEqual([[ERIN, 'escalation_not_due']]);
  }, 180_000);

  it('undecided: one reminder at half its time, then the expiry tells the requester what is still held and who can act; nothing runs', async () => {
    const holder = await s.fleet.spawnHolder('ct130', {
      gpus: [{ index: 1, mib: 40_000 }],
      title: 'python3 -m vllm.entrypoints.openai.api_server',
    });
    const id = String((await s.slash('unstick ct130', { user: ALICE })).incidentId);
    const t = await s.threadOf(id, {
      timeoutMs: 60_000,
      done: (th) =>
        th.some((m) => /Expired/.test(all(m))) &&
        th.some((m) => /What now:.*\d/.test(m.text) && /host PID/.test(m.text)),
    });
    const reminders = t.filter((m) => /Reminder/.test(m.text));
    expect(reminders).toHaveLength(1);
    expect(reminders[0]?.text).toContain(`<@${BOB}>`);
    // Half of 15 s is past the 5 s escalation: the reminder pings the escalation group as well.
    expect(reminders[0]?.text).toContain(`<@${ERIN}>`);
    const expiry = t.find((m) => /expired at \d\d:\d\d UTC with no decision/.test(m.text));
    expect(expiry?.text).toContain(`<@${ALICE}>`);
    expect(expiry?.text).toContain('nothing from it was run');
    expect(expiry?.text).toContain(`host PID ${holder.hostPid}`);
    expect(expiry?.text).toMatch(/an approver \(.*<@U0BOB00001>.*<@U0ERIN0001>.*\) can answer the card/);
    const card = t.find((m) => /Expired/.test(all(m)));
    expect(buttonsOf(card)).toEqual([]);
    expect(s.fleet.signals().filter((x) => x.hostPid === holder.hostPid)).toEqual([]);
    const ev = await new IncidentLog(s.redis, s.prefix).events(id);
    expect(ofType(ev, 'approval_reminded')).toHaveLength(1);
    expect(ofType(ev, 'approval_escalated')).toHaveLength(1);
    expect(ofType(ev, 'approval_expired')).toHaveLength(1);
  }, 180_000);
});
