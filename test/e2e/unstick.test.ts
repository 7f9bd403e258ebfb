import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blockActionPayload, sendInteraction } from '../harness/slack/signed-request.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { startStack, type Stack } from '../harness/stack.ts';

const OPS = 'C0ONCALL01';
const ALICE = 'U0ALICE001'; // on call, requests
const BOB = 'U0BOB00001'; // approver
const CAROL = 'U0CAROL001'; // neither

interface Button {
  action_id: string;
  value: string;
}

function buttonsOf(m: StoredMessage | undefined): Button[] {
  const out: Button[] = [];
  for (const b of (m?.blocks ?? []) as Array<{
    type: string;
    elements?: Array<{ type: string; action_id?: string; value?: string }>;
  }>)
    if (b.type === 'actions')
      for (const e of b.elements ?? [])
        if (e.type === 'button' && e.action_id && e.value) out.push({ action_id: e.action_id, value: e.value });
  return out;
}

describe('/gpu unstick end to end through Slack (real Redis, sshd, namespaces, Bolt; fake Slack)', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 4 }],
        containers: [
          { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
          { id: 'ct130', vmid: 130, host: 'kpro5' },
        ],
      },
      env: {
        GPU_MEDIC_APPROVERS: BOB,
        GPU_MEDIC_TERM_GRACE_SEC: '1',
        GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5',
        GPU_MEDIC_POLL_MS: '300',
      },
      // The container login is not root, so processes of other users there need the host (S3).
      tweakInventory: (inv) => {
        const c = inv.containers.find((x) => x.id === 'ct129');
        if (c) c.user = 'fleetuser';
      },
    });
  });
  afterAll(async () => {
    await s?.stop();
  });

  const click = async (user: string, card: StoredMessage, b: Button) =>
    sendInteraction(
      s.eventsUrl,
      s.signingSecret,
      blockActionPayload({
        user,
        channel: OPS,
        messageTs: card.ts,
        threadTs: card.thread_ts ?? card.ts,
        actionId: b.action_id,
        value: b.value,
        responseUrl: s.slack.newResponseUrl(),
      }),
    );
  const lastResponseText = () => String(s.slack.responses().at(-1)?.body.text ?? '');

  it('S3: the container cannot stop it → card → requester and bystander refused → a second person approves → host kill of exactly that PID → Recovered', async () => {
    const holder = await s.fleet.spawnHolder('ct129', {
      gpus: [
        { index: 0, mib: 96413 },
        { index: 2, mib: 96417 },
      ],
      title: 'sglang::scheduler_TP0',
    });
    const monitor = await s.fleet.spawnBystander('ct129', { title: 'python3 monitor.py' });
    const other = await s.fleet.spawnHolder('ct130', { gpus: [{ index: 3, mib: 20000 }], title: 'python3 train.py' });
    const r = await s.slash('unstick ct129 hicache overcommit', { user: ALICE });
    expect(r.status).toBe(200);
    expect(r.ackText).toMatch(/Unsticking `ct129`/);
    const id = String(r.incidentId);

    const second = await s.slash('unstick ct129', { user: CAROL });
    expect(second.ackText).toMatch(new RegExp(`already being worked on \\(incident \`${id}\`, by <@${ALICE}>`));

    const withCard = await s.threadOf(id, { timeoutMs: 30000, done: (t) => t.some((m) => buttonsOf(m).length === 2) });
    const card = withCard.find((m) => buttonsOf(m).length === 2);
    if (!card) throw new Error('no card');
    expect(card.text).toContain(String(holder.hostPid));
    expect(card.text).toMatch(new RegExp(`host KILL \\d+ ${holder.hostPid} ${holder.startTime} `));
    const approve = buttonsOf(card).find((b) => b.action_id === 'gpu_approve');
    if (!approve) throw new Error('no approve button');
    expect(approve.value).toMatch(/^apr_/);

    expect((await click(ALICE, card, approve)).status).toBe(200);
    await s.slack.waitFor(() => lastResponseText().includes('second person'), 5000);
    expect((await click(CAROL, card, approve)).status).toBe(200);
    await s.slack.waitFor(() => lastResponseText().includes('not on the approvers list'), 5000);
    expect(s.fleet.signals().filter((x) => x.signal === 'SIGKILL')).toEqual([]);

    expect((await click(BOB, card, approve)).status).toBe(200);
    await s.slack.waitFor(() => lastResponseText().includes('Approved'), 5000);
    expect((await click(BOB, card, approve)).status).toBe(200);
    await s.slack.waitFor(() => lastResponseText().includes('Already approved'), 5000);

    const done = await s.threadOf(id, {
      timeoutMs: 30000,
      done: (t) => t.some((m) => /Recovered/.test(m.text)) && /Recovered|done/i.test(t[0]?.text ?? ''),
    });
    expect(s.fleet.gpuMemory('kpro5').map((g) => g.usedMiB)).toEqual([0, 0, 0, 20000]);
    const killed = s.fleet.signals().filter((x) => x.signal === 'SIGKILL');
    expect(killed.map((x) => x.hostPid)).toEqual([holder.hostPid]);
    const touched = new Set(s.fleet.signals().map((x) => x.hostPid));
    expect(touched.has(monitor.hostPid)).toBe(false);
    expect(touched.has(other.hostPid)).toBe(false);
    const updatedCard = done.find((m) => m.ts === card.ts);
    expect(buttonsOf(updatedCard)).toEqual([]);
    expect(updatedCard?.text).toContain(`<@${BOB}>`);
    // The lock is released with the incident: a new unstick is accepted.
    const again = await s.slash('unstick ct129', { user: ALICE });
    expect(again.ackText).toMatch(/Unsticking `ct129`/);
    await s.threadOf(String(again.incidentId), {
      timeoutMs: 30000,
      done: (t) => /done|Nothing|Recovered|stuck/i.test(t.map((m) => m.text).join(' ')) && t.length > 2,
    });
  });

  it('S2 via pct exec: holders the container can stop are signalled from the container, no approval, Recovered', async () => {
    const a = await s.fleet.spawnHolder('ct130', { gpus: [{ index: 1, mib: 96413 }], title: 'sglang::scheduler_TP0' });
    const b = await s.fleet.spawnHolder('ct130', {
      gpus: [{ index: 2, mib: 96417 }],
      title: 'sglang::scheduler_TP1',
      ignoreTerm: true,
    });
    const before = s.fleet.signals().length;
    const r = await s.slash('unstick ct130', { user: ALICE });
    const t = await s.threadOf(String(r.incidentId), {
      timeoutMs: 40000,
      done: (th) => th.some((m) => /Recovered/.test(m.text)),
    });
    expect(t.some((m) => buttonsOf(m).length > 0)).toBe(false);
    const sig = s.fleet.signals().slice(before);
    expect(sig.filter((x) => x.hostPid === a.hostPid).map((x) => x.signal)).toEqual(['SIGTERM']);
    expect(sig.filter((x) => x.hostPid === b.hostPid).map((x) => x.signal)).toEqual(['SIGTERM', 'SIGKILL']);
    // Every process signalled is a GPU holder of ct130 (the first test left one there, on GPU 3).
    const ct130 = new Set(
      s.fleet
        .processes()
        .filter((p) => p.machine === 'ct130')
        .map((p) => p.hostPid),
    );
    expect(sig.every((x) => ct130.has(x.hostPid))).toBe(true);
    expect(s.fleet.gpuMemory('kpro5')[3]?.usedMiB).toBe(0);
    expect(s.fleet.gpuMemory('kpro5')[1]?.usedMiB).toBe(0);
    expect(s.fleet.gpuMemory('kpro5')[2]?.usedMiB).toBe(0);
    expect(s.fleet.commandLog('ct130').some((c) => /nvidia-smi (-r|--gpu-reset)/.test(c.cmd))).toBe(false);
  });
});
