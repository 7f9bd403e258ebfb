import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IncidentLog } from '../../src/incident/log.ts';
import { TargetLock } from '../../src/incident/target-lock.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { SnoozeStore } from '../../src/watch-store/snooze-store.ts';
import { alertIncidentId } from '../../src/watchdog/alert-id.ts';
import type { Alert } from '../../src/watchdog/judge.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { blockActionPayload, sendInteraction, staticSelectPayload } from '../harness/slack/signed-request.ts';
import { startStack, type Stack } from '../harness/stack.ts';

const ALERTS = 'C0ALERTS01';
const ALICE = 'U0ALICE001'; // on call, allowed
const BOB = 'U0BOB00001'; // allowed, approver
const CAROL = 'U0CAROL001'; // not on GPU_MEDIC_ALLOWED_USERS

interface Element {
  type: string;
  action_id: string;
  value?: string;
  options?: Array<{ text: { text: string }; value: string }>;
}
interface Block {
  type: string;
  block_id?: string;
  elements?: Element[];
}
const elementsOf = (m: StoredMessage | undefined): Element[] =>
  ((m?.blocks ?? []) as Block[]).filter((b) => b.type === 'actions').flatMap((b) => b.elements ?? []);
const actionsBlockId = (m: StoredMessage): string =>
  ((m.blocks ?? []) as Block[]).find((b) => b.type === 'actions')?.block_id ?? 'actions';
const shown = (m: StoredMessage | undefined): string => `${m?.text ?? ''}\n${JSON.stringify(m?.blocks ?? [])}`;

describe('alert message and its buttons through the real Bolt receiver (real Redis, sshd fleet; fake Slack)', () => {
  let s: Stack;
  let log: IncidentLog;
  let seq = 0;

  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2 }],
        containers: [
          { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
          { id: 'ct130', vmid: 130, host: 'kpro5' },
        ],
      },
      // ct129's login is not root, so a root holder there needs a host-level step (a second person).
      tweakInventory: (inv) => {
        const c = inv.containers.find((x) => x.id === 'ct129');
        if (c) c.user = 'fleetuser';
      },
      // The alerts channel for the bot only: these alerts are opened by the test, as the watchdog would, and no watch round runs.
      botEnv: { GPU_MEDIC_ALERTS_CHANNEL: ALERTS },
      env: {
        GPU_MEDIC_ALLOWED_USERS: `${ALICE},${BOB}`,
        GPU_MEDIC_APPROVERS: `${ALICE},${BOB}`,
        GPU_MEDIC_TERM_GRACE_SEC: '1',
        GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5',
      },
    });
    log = new IncidentLog(s.redis, s.prefix);
  });
  afterAll(async () => {
    await s?.stop();
  });

  /** Opens an alert incident the way the watchdog does: meta for the alerts channel, then alert_raised. */
  async function raise(
    machineId: string,
    kind: Alert['kind'],
    gpu: number | null,
    sentence: string,
  ): Promise<{ id: string; alert: Alert }> {
    const since = Date.now() - 60_000 - seq++;
    const alert: Alert = {
      key: `${machineId}/${kind}/${seq}`,
      kind,
      machineId,
      gpu,
      since,
      raisedAt: since,
      sentence,
      lastSeenAt: since,
    };
    const id = alertIncidentId(alert);
    const meta: IncidentMeta = {
      id,
      kind: 'alert',
      requester: 'watchdog',
      channel: ALERTS,
      targets: [machineId],
      text: alert.key,
      reason: null,
      createdAt: new Date(since).toISOString(),
    };
    await log.create(meta);
    await log.append(id, { type: 'alert_raised', at: new Date().toISOString(), alert });
    return { id, alert };
  }

  const messageOf = (id: string): StoredMessage | undefined =>
    s.slack.messages(ALERTS).find((m) => JSON.stringify(m.blocks ?? []).includes(id));
  const waitMessage = (id: string, ok: (m: StoredMessage) => boolean = () => true): Promise<StoredMessage> =>
    s.slack.waitFor(() => {
      const m = messageOf(id);
      return m && ok(m) ? m : null;
    }, 20_000);

  /** Clicks a button of the message as `user`; returns the ephemeral answer. */
  async function click(user: string, m: StoredMessage, actionId: string, value?: string): Promise<string> {
    const el = elementsOf(m).find((e) => e.action_id === actionId);
    const responseUrl = s.slack.newResponseUrl();
    const r = await sendInteraction(
      s.eventsUrl,
      s.signingSecret,
      blockActionPayload({
        user,
        channel: ALERTS,
        messageTs: m.ts,
        actionId,
        value: value ?? el?.value ?? '',
        blockId: actionsBlockId(m),
        responseUrl,
        messageText: m.text,
        messageBlocks: m.blocks ?? [],
      }),
    );
    expect(r.status).toBe(200);
    const answer = await s.slack.waitFor(() => s.slack.responses().find((p) => p.url === responseUrl), 20_000);
    return String(answer.body.text ?? '');
  }

  /** Picks an option of the message's Unstick list as `user`; returns the ephemeral answer. */
  async function pick(user: string, m: StoredMessage, option: { text: string; value: string }): Promise<string> {
    const responseUrl = s.slack.newResponseUrl();
    const r = await sendInteraction(
      s.eventsUrl,
      s.signingSecret,
      staticSelectPayload({
        user,
        channel: ALERTS,
        messageTs: m.ts,
        actionId: 'gpu_alert_unstick_pick',
        blockId: actionsBlockId(m),
        selected: option,
        placeholder: 'Unstick a container…',
        responseUrl,
        messageText: m.text,
        messageBlocks: m.blocks ?? [],
      }),
    );
    expect(r.status).toBe(200);
    const answer = await s.slack.waitFor(() => s.slack.responses().find((p) => p.url === responseUrl), 20_000);
    return String(answer.body.text ?? '');
  }

  const incidentIn = (answer: string): string => {
    const m = /incident `(inc_[a-z0-9_]+)`/.exec(answer);
    if (!m?.[1]) throw new Error(`no incident in ${answer}`);
    return m[1];
  };
  const actionsOf = async (id: string) => (await log.events(id)).filter((e) => e.type === 'alert_action');

  it('an alert incident renders ONE top-level message in the alerts channel; an update edits that same message', async () => {
    const { id, alert } = await raise('ct129', 'ram_high', null, 'host RAM 94 % used (422 of 449 GiB).');
    const first = await waitMessage(id);
    expect(first.thread_ts).toBeUndefined();
    expect(shown(first)).toContain('Host RAM 94 % used (422 of 449 GiB).');
    expect(elementsOf(first).map((e) => e.action_id)).toEqual([
      'gpu_alert_status',
      'gpu_alert_unstick',
      'gpu_alert_snooze_1h',
      'gpu_alert_snooze_1d',
    ]);

    await log.append(id, {
      type: 'alert_updated',
      at: new Date().toISOString(),
      alert: { ...alert, sentence: 'host RAM 98 % used (440 of 449 GiB).' },
    });
    const edited = await waitMessage(id, (m) => shown(m).includes('Host RAM 98 % used'));
    expect(edited.ts).toBe(first.ts);
    expect(edited.history).toHaveLength(1);
    expect(s.slack.messages(ALERTS).filter((m) => JSON.stringify(m.blocks ?? []).includes(id))).toHaveLength(1);
  });

  it('clear edits the same message: "Cleared at …", what it said kept, no buttons; a click on it then changes nothing', async () => {
    const { id, alert } = await raise('ct130', 'ram_high', null, 'host RAM 97 % used (436 of 449 GiB).');
    const first = await waitMessage(id);
    const asPosted = structuredClone(first);
    await log.append(id, { type: 'alert_cleared', at: new Date().toISOString(), alert });
    const cleared = await waitMessage(id, (m) => m.text.includes('Cleared at'));
    expect(cleared.ts).toBe(first.ts);
    expect(shown(cleared)).toContain('It said: Host RAM 97 % used (436 of 449 GiB).');
    expect(elementsOf(cleared)).toEqual([]);

    const before = { incidents: await log.recent(1000), events: (await log.events(id)).length };
    // Slack may still deliver a click on the message as it was before the edit.
    const answer = await click(ALICE, asPosted, 'gpu_alert_status');
    expect(answer).toMatch(/^:white_check_mark: This alert cleared at \d\d:\d\d UTC\. Nothing was done\./);
    expect(await log.recent(1000)).toEqual(before.incidents);
    expect((await log.events(id)).length).toBe(before.events);
  });

  it('Status opens a status thread in the alerts channel as the clicker, and the alert says so', async () => {
    const { id } = await raise(
      'ct129',
      'holder_stuck',
      0,
      'host PID 4242 holds 96,413 MiB on GPU 0 and is a zombie (Z): it is dead, but its memory is not yet released.',
    );
    const m = await waitMessage(id);
    const answer = await click(ALICE, m, 'gpu_alert_status');
    expect(answer).toMatch(/^:mag: Reading `ct129`/);
    const statusId = incidentIn(answer);
    const meta = await log.meta(statusId);
    expect(meta).toMatchObject({ kind: 'status', requester: ALICE, channel: ALERTS, targets: ['ct129'] });
    const thread = await s.threadOf(statusId, { channel: ALERTS, timeoutMs: 40_000, done: (t) => t.length > 1 });
    expect(thread[1]?.text).toContain('ct129');
    expect(await actionsOf(id)).toMatchObject([
      { action: 'status', by: ALICE, incidentId: statusId, refused: null, target: 'ct129' },
    ]);
    await waitMessage(id, (x) => shown(x).includes(`Status \`ct129\` by <@${ALICE}>`) && shown(x).includes(statusId));
  });

  it('Unstick on a container alert opens an unstick incident on that container requested by the clicker', async () => {
    const { id } = await raise(
      'ct129',
      'holder_stuck',
      0,
      'host PID 4243 holds 1,024 MiB on GPU 0 and is in uninterruptible sleep (D): signals wait until the kernel call returns.',
    );
    const m = await waitMessage(id);
    const answer = await click(BOB, m, 'gpu_alert_unstick');
    expect(answer).toMatch(/^:ambulance: Unsticking `ct129`/);
    const unstickId = incidentIn(answer);
    expect(await log.meta(unstickId)).toMatchObject({
      kind: 'unstick',
      requester: BOB,
      channel: ALERTS,
      targets: ['ct129'],
    });
    expect(await actionsOf(id)).toMatchObject([
      { action: 'unstick', by: BOB, incidentId: unstickId, refused: null, target: 'ct129' },
    ]);
    await s.threadOf(unstickId, { channel: ALERTS, timeoutMs: 40_000, done: (t) => t.length > 1 });
    await s.quiet({ timeoutMs: 40_000 });
  });

  it('on a host alert the Unstick list offers its containers; picking one opens an unstick of that container requested by the clicker', async () => {
    const { id } = await raise(
      'kpro5',
      'ghost_memory',
      1,
      'GPU 1: 96,413 MiB in use that no process on the host holds.',
    );
    const m = await waitMessage(id);
    const select = elementsOf(m).find((e) => e.type === 'static_select');
    expect(select?.options?.map((o) => o.value)).toEqual([`${id}|ct129`, `${id}|ct130`]);
    const option = select?.options?.[1];
    if (!option) throw new Error('no option');
    const answer = await pick(ALICE, m, { text: option.text.text, value: option.value });
    expect(answer).toMatch(/^:ambulance: Unsticking `ct130`/);
    const unstickId = incidentIn(answer);
    expect(await log.meta(unstickId)).toMatchObject({
      kind: 'unstick',
      requester: ALICE,
      channel: ALERTS,
      targets: ['ct130'],
    });
    expect(await actionsOf(id)).toMatchObject([
      { action: 'unstick', by: ALICE, incidentId: unstickId, target: 'ct130' },
    ]);
    await s.threadOf(unstickId, { channel: ALERTS, timeoutMs: 40_000, done: (t) => t.length > 1 });
    await s.quiet({ timeoutMs: 40_000 });
  });

  it('Unstick keeps the target lock rule: while another unstick holds the container, the click is refused with who holds it, and nothing opens', async () => {
    const { id } = await raise(
      'ct130',
      'holder_stuck',
      0,
      'host PID 4244 holds 2,048 MiB on GPU 0 and is a zombie (Z): it is dead, but its memory is not yet released.',
    );
    const m = await waitMessage(id);
    const lock = new TargetLock(s.redis, s.prefix);
    const held = await lock.acquire(
      'ct130',
      { incidentId: 'inc_20261201_000000_held01', requester: BOB, since: new Date().toISOString() },
      60_000,
    );
    expect(held.ok).toBe(true);
    try {
      const before = await log.recent(1000);
      expect(await click(ALICE, m, 'gpu_alert_unstick')).toMatch(
        new RegExp(
          `^:lock: \`ct130\` is already being worked on \\(incident \`inc_20261201_000000_held01\`, by <@${BOB}>`,
        ),
      );
      expect(await log.recent(1000)).toEqual(before);
      expect((await actionsOf(id)).map((e) => [e.action, e.by, e.refused, e.incidentId])).toEqual([
        ['unstick', ALICE, 'target_locked', null],
      ]);
    } finally {
      await lock.release('ct130', 'inc_20261201_000000_held01');
    }
  });

  it('a user the policy does not allow is refused on every button, with nothing queued, locked or snoozed; the refusal is recorded', async () => {
    const { id } = await raise(
      'kpro5',
      'ghost_memory',
      0,
      'GPU 0: 2,048 MiB in use that no process on the host holds.',
    );
    const m = await waitMessage(id);
    const before = await log.recent(1000);
    expect(await click(CAROL, m, 'gpu_alert_status')).toMatch(
      /^:no_entry: Refused: you are not on the list of people who may use gpu-medic\. Nothing was done or queued\./,
    );
    expect(await pick(CAROL, m, { text: 'ct129', value: `${id}|ct129` })).toMatch(/^:no_entry: Refused/);
    expect(await click(CAROL, m, 'gpu_alert_snooze_1d')).toMatch(/^:no_entry: Refused/);
    await s.quiet();
    expect(await log.recent(1000)).toEqual(before);
    expect(await new SnoozeStore(s.redis, s.prefix).active(Date.now())).not.toHaveProperty('kpro5');
    expect(await s.redis.exists(`${s.prefix}:lock:ct129`)).toBe(0);
    expect((await actionsOf(id)).map((e) => [e.action, e.by, e.refused, e.incidentId])).toEqual([
      ['status', CAROL, 'policy', null],
      ['unstick', CAROL, 'policy', null],
      ['snooze', CAROL, 'policy', null],
    ]);
  });

  it('Snooze writes the store for the machine (1 h) and the GPU (1 day) and edits the message to say until when and by whom', async () => {
    const { id } = await raise(
      'kpro5',
      'xid',
      1,
      'Xid 79 on PCI 0000:02:00 (GPU 1): GPU has fallen off the bus; a reset will not help: reboot the host.',
    );
    const m = await waitMessage(id);
    const t0 = Date.now();
    expect(await click(ALICE, m, 'gpu_alert_snooze_1h')).toMatch(/^:zzz: `kpro5` is snoozed until /);
    expect(await click(BOB, m, 'gpu_alert_snooze_gpu_1d')).toMatch(/^:zzz: GPU 1 of `kpro5` is snoozed until /);
    const active = await new SnoozeStore(s.redis, s.prefix).active(Date.now());
    expect(active.kpro5).toBeGreaterThanOrEqual(t0 + 3_600_000 - 1000);
    expect(active.kpro5).toBeLessThanOrEqual(Date.now() + 3_600_000);
    expect(active['kpro5/1']).toBeGreaterThanOrEqual(t0 + 86_400_000 - 1000);
    const edited = await waitMessage(id, (x) => shown(x).includes(`by <@${BOB}>`));
    expect(edited.ts).toBe(m.ts);
    expect(shown(edited)).toMatch(
      new RegExp(`all of \`kpro5\` snoozed until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC by <@${ALICE}>`),
    );
    expect(shown(edited)).toMatch(
      new RegExp(`GPU 1 of \`kpro5\` snoozed until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC by <@${BOB}>`),
    );
  });

  it("forged values change nothing: an unknown or malformed id, another incident's id, another alert's id on this message, a container of no such host", async () => {
    const a = await raise('ct129', 'ram_high', null, 'host RAM 95 % used (427 of 449 GiB).');
    const b = await raise('kpro5', 'ram_high', null, 'host RAM 95 % used (427 of 449 GiB).');
    const ma = await waitMessage(a.id);
    const mb = await waitMessage(b.id);
    const status = await s.slash('status kpro5', { user: ALICE, channel: ALERTS });
    const otherIncident = String(status.incidentId);
    await s.quiet();
    const snapshot = async () => ({
      incidents: await log.recent(1000),
      a: (await log.events(a.id)).length,
      b: (await log.events(b.id)).length,
      snoozes: await new SnoozeStore(s.redis, s.prefix).active(Date.now()),
    });
    const before = await snapshot();
    expect(await click(ALICE, ma, 'gpu_alert_status', 'inc_alert_00000000000000000000')).toMatch(
      /^:question: This alert does not exist/,
    );
    expect(await click(ALICE, ma, 'gpu_alert_unstick', 'inc_alert_../../x')).toMatch(
      /^:question: This alert does not exist/,
    );
    expect(await click(ALICE, ma, 'gpu_alert_snooze_1d', otherIncident)).toMatch(
      /^:question: This alert does not exist/,
    );
    expect(await click(ALICE, ma, 'gpu_alert_snooze_1d', b.id)).toMatch(
      /^:no_entry: This button does not belong to that alert's message\. Nothing was done\./,
    );
    expect(await pick(ALICE, mb, { text: 'ct999', value: `${b.id}|ct999` })).toMatch(
      /^:no_entry: That choice is not a container of this alert's host\. Nothing was done\./,
    );
    expect(await pick(ALICE, mb, { text: 'kpro5', value: `${b.id}|kpro5` })).toMatch(
      /^:no_entry: That choice is not a container/,
    );
    // ct129 is a container, but its alert has no GPU: no GPU snooze.
    expect(await click(ALICE, ma, 'gpu_alert_snooze_gpu_1h', a.id)).toMatch(
      /^:no_entry: This alert is not about one GPU/,
    );
    await s.quiet();
    expect(await snapshot()).toEqual(before);
  });
  // Last: the card leaves its reminder and escalation jobs delayed (they post nothing once it is decided), which s.quiet() would wait out.
  it('the clicker of Unstick is its requester for the approval too: they cannot approve its host-level step, a second approver can', async () => {
    const holder = await s.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 30_000 }],
      title: 'sglang::scheduler_TP0',
    });
    const { id } = await raise(
      'ct129',
      'holder_stuck',
      0,
      `host PID ${holder.hostPid} holds 30,000 MiB on GPU 0 and is in uninterruptible sleep (D): signals wait until the kernel call returns.`,
    );
    const m = await waitMessage(id);
    const unstickId = incidentIn(await click(ALICE, m, 'gpu_alert_unstick'));
    const withCard = await s.threadOf(unstickId, {
      channel: ALERTS,
      timeoutMs: 60_000,
      done: (t) => t.some((x) => elementsOf(x).some((e) => e.action_id === 'gpu_approve')),
    });
    const card = withCard.find((x) => elementsOf(x).some((e) => e.action_id === 'gpu_approve'));
    if (!card) throw new Error('no card');
    const approve = elementsOf(card).find((e) => e.action_id === 'gpu_approve');
    const approveAs = async (user: string): Promise<string> => {
      const responseUrl = s.slack.newResponseUrl();
      await sendInteraction(
        s.eventsUrl,
        s.signingSecret,
        blockActionPayload({
          user,
          channel: ALERTS,
          messageTs: card.ts,
          threadTs: card.thread_ts ?? card.ts,
          actionId: 'gpu_approve',
          value: approve?.value ?? '',
          responseUrl,
        }),
      );
      return String(
        (await s.slack.waitFor(() => s.slack.responses().find((p) => p.url === responseUrl), 20_000)).body.text ?? '',
      );
    };
    expect(await approveAs(ALICE)).toMatch(/You asked for this unstick, so you can't approve its host-level step/);
    expect(s.fleet.signals().filter((x) => x.hostPid === holder.hostPid && x.signal === 'SIGKILL')).toEqual([]);
    expect(await approveAs(BOB)).toMatch(/^:white_check_mark: Approved/);
    await s.threadOf(unstickId, {
      channel: ALERTS,
      timeoutMs: 60_000,
      done: (t) => t.some((x) => /Recovered/.test(x.text)),
    });
    expect(
      s.fleet
        .signals()
        .filter((x) => x.signal === 'SIGKILL')
        .map((x) => x.hostPid),
    ).toContain(holder.hostPid);
  });
});
