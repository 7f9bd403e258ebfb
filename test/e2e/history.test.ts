/**
 * `/gpu history` end to end: real unstick and status runs on the fleet (real sshd, namespaces,
 * holder processes), then history asked through the real Bolt receiver with signed requests.
 * History answers only to the asker, from the log, and touches nothing.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IncidentLog } from '../../src/incident/log.ts';
import { execMain } from '../harness/dist.ts';
import { blockActionPayload, sendInteraction } from '../harness/slack/signed-request.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { keysOf, startStack, type Stack } from '../harness/stack.ts';
import { listMachines } from '../../src/config/machines.ts';

const OPS = 'C0ONCALL01';
const ALICE = 'U0ALICE001';
const BOB = 'U0BOB00001';

function approveButton(m: StoredMessage | undefined): { action_id: string; value: string } | null {
  for (const b of (m?.blocks ?? []) as Array<{
    type: string;
    elements?: Array<{ type: string; action_id?: string; value?: string }>;
  }>)
    if (b.type === 'actions')
      for (const e of b.elements ?? [])
        if (e.action_id === 'gpu_approve' && e.value) return { action_id: e.action_id, value: e.value };
  return null;
}

describe('/gpu history through Slack after real unstick and status runs', () => {
  let s: Stack;
  let hostKillId = '';
  let containerId = '';
  let statusId = '';

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
      // ct129's login is not root: its root-owned holder can only be stopped from the host, after an approval.
      tweakInventory: (inv) => {
        const c = inv.containers.find((x) => x.id === 'ct129');
        if (c) c.user = 'fleetuser';
      },
    });
    // 1. ct129: a host-level kill approved by Bob.
    await s.fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 40_000 }], title: 'sglang::scheduler_TP0' });
    const u = await s.slash('unstick ct129 hung rank', { user: ALICE });
    hostKillId = String(u.incidentId);
    const withCard = await s.threadOf(hostKillId, {
      timeoutMs: 40000,
      done: (t) => t.some((m) => approveButton(m) !== null),
    });
    const card = withCard.find((m) => approveButton(m) !== null);
    const b = approveButton(card);
    if (!card || !b) throw new Error('no approval card');
    await sendInteraction(
      s.eventsUrl,
      s.signingSecret,
      blockActionPayload({
        user: BOB,
        channel: OPS,
        messageTs: card.ts,
        threadTs: card.thread_ts ?? card.ts,
        actionId: b.action_id,
        value: b.value,
        responseUrl: s.slack.newResponseUrl(),
      }),
    );
    await s.threadOf(hostKillId, { timeoutMs: 40000, done: (t) => /Recovered/.test(t[0]?.text ?? '') });
    // 2. ct130 (pct exec): SIGTERM to both holders, SIGKILL to the one that ignores it.
    await s.fleet.spawnHolder('ct130', { gpus: [{ index: 1, mib: 30_000 }], title: 'sglang::scheduler_TP0' });
    await s.fleet.spawnHolder('ct130', {
      gpus: [{ index: 2, mib: 30_000 }],
      title: 'sglang::scheduler_TP1',
      ignoreTerm: true,
    });
    const c = await s.slash('unstick ct130', { user: ALICE });
    containerId = String(c.incidentId);
    await s.threadOf(containerId, { timeoutMs: 40000, done: (t) => /Recovered/.test(t[0]?.text ?? '') });
    // 3. A status read of the host.
    const st = await s.slash('status kpro5', { user: BOB });
    statusId = String(st.incidentId);
    await s.threadOf(statusId, { timeoutMs: 30000 });
  }, 180_000);
  afterAll(async () => {
    await s?.stop();
  });

  const lines = (t: string) => t.split('\n').filter((l) => l.startsWith('• '));

  it("a host's history: its own status read and both containers' unsticks, newest first, each line saying when, who, what ran, the verdict and MiB freed", async () => {
    const r = await s.slash('history kpro5', { user: ALICE });
    expect(r.status).toBe(200);
    expect((r.json as { response_type?: string }).response_type).toBe('ephemeral');
    const ls = lines(r.ackText);
    expect(ls).toHaveLength(3);
    expect(ls[0]).toMatch(
      new RegExp(
        `^• \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC · <@${BOB}> · status of \`kpro5\` · read only · finished \\(ok\\) · \`${statusId}\`$`,
      ),
    );
    expect(ls[1]).toContain(
      `<@${ALICE}> · unstick of \`ct130\` (a container on \`kpro5\`) · SIGTERM 2, SIGKILL 1 (container) · *Recovered*, 60,000 MiB freed · \`${containerId}\``,
    );
    expect(ls[2]).toContain(`<@${ALICE}> · unstick of \`ct129\` (a container on \`kpro5\`) ·`);
    expect(ls[2]).toContain(
      `SIGKILL 1 (host, approved by <@${BOB}>) · *Recovered*, 40,000 MiB freed · \`${hostKillId}\``,
    );
    expect(r.ackText).toContain("with its containers' (they ran on it)");
  });

  it("a container's history is its own incidents only; N limits it and says older ones exist", async () => {
    const r = await s.slash('history ct130');
    expect(lines(r.ackText).map((l) => /`(inc_[a-z0-9_]+)`$/.exec(l)?.[1])).toEqual([containerId]);
    const one = await s.slash('history kpro5 1');
    expect(lines(one.ackText)).toHaveLength(1);
    expect(one.ackText).toContain('Older incidents exist: `/gpu history kpro5 25`');
    const capped = await s.slash('history kpro5 100');
    expect(capped.ackText).toContain('You asked for 100; history shows at most 25 here');
    expect(lines(capped.ackText)).toHaveLength(3);
  });

  it('history is read-only and answers only the asker: no incident, no job, no command on any machine, no channel message', async () => {
    const keys = await keysOf(s.redis, s.prefix);
    const logs = listMachines(s.inventory).map((m) => s.fleet.commandLog(m.id).length);
    const posted = s.slack.messages(OPS).length;
    for (const text of ['history kpro5', 'history ct129 25', 'history ct12', 'history', 'history ct129 0'])
      await s.slash(text, { user: ALICE });
    // History answers in its ack: anything it queued or wrote would be there by now (each slash above was acked).
    expect(await keysOf(s.redis, s.prefix)).toEqual(keys);
    expect(listMachines(s.inventory).map((m) => s.fleet.commandLog(m.id).length)).toEqual(logs);
    expect(s.slack.messages(OPS)).toHaveLength(posted);
  });

  it('bad input gets a clear answer: an unknown machine with a did-you-mean, a missing machine, a bad count', async () => {
    expect((await s.slash('history ct12')).ackText).toBe(
      ":question: I don't know a machine called `ct12`; did you mean `ct129`? Nothing was read. `/gpu status all` lists every machine.",
    );
    expect((await s.slash('history')).ackText).toContain('`history` needs a machine');
    expect((await s.slash('history ct129 lots')).ackText).toContain(
      '"lots" is not a number of incidents; give 1 to 25',
    );
  });

  /** The real entry point in its own process, as an operator runs it. */
  async function cli(
    args: string[],
    extraEnv: Record<string, string> = {},
  ): Promise<{ code: number; out: string; err: string }> {
    try {
      const r = await execMain(args, {
        env: { ...process.env, REDIS_URL: s.env.REDIS_URL, GPU_MEDIC_PREFIX: s.prefix, ...extraEnv },
        cwd: process.cwd(),
      });
      return { code: 0, out: r.stdout, err: r.stderr };
    } catch (e) {
      const x = e as { code?: number; stdout?: string; stderr?: string };
      return { code: x.code ?? -1, out: x.stdout ?? '', err: x.stderr ?? '' };
    }
  }

  it('incident <id> --markdown: the recorded host-kill unstick as a post-mortem: summary, one timeline row per event, the literal commands fenced, what to follow up', async () => {
    const events = await new IncidentLog(s.redis, s.prefix).events(hostKillId);
    const r = await cli(['incident', hostKillId, '--markdown']);
    expect(r).toMatchObject({ code: 0, err: '' });
    const lines = r.out.split('\n');
    expect(lines[0]).toBe(`# Incident ${hostKillId.replace(/_/g, '\\_')}: unstick of ct129, Recovered`);
    for (const row of [
      '| Target | `ct129` |',
      // People (not ids) by the Slack name their payloads carried (the harness sends the id in lower case),
      // ids in footnotes.
      `| Requester | \`@${ALICE.toLowerCase()}\`[^1] |`,
      `| Approver | \`@${BOB.toLowerCase()}\`[^2] |`,
      '| Reason | hung rank |',
      '| Verdict | Recovered |',
      '| Memory freed | 40,000 MiB |',
    ])
      expect(lines).toContain(row);
    expect(lines.find((l) => l.startsWith('| What ran |'))).toContain(
      `SIGKILL 1 (host, approved by \`@${BOB.toLowerCase()}\`[^2])`,
    );
    expect(lines).toContain(`[^1]: \`@${ALICE.toLowerCase()}\` is Slack user \`${ALICE}\`.`);
    expect(lines).toContain(`[^2]: \`@${BOB.toLowerCase()}\` is Slack user \`${BOB}\`.`);
    const t = lines.indexOf('| Time (UTC) | What happened |');
    expect(lines.slice(t + 2).findIndex((l) => !l.startsWith('| '))).toBe(events.length);
    expect(r.out).toMatch(/## GPUs before\n\n### `ct129`/);
    // Each machine's last reading after (the final state); the unstick read "after" once per step.
    const after = r.out.slice(r.out.indexOf('## GPUs after'), r.out.indexOf('## Per GPU'));
    expect(after.match(/^### .*$/gm)).toEqual([
      expect.stringMatching(/^### `ct129`, container view/),
      expect.stringMatching(/^### `kpro5`, host view/),
    ]);
    expect(after).not.toMatch(/\| 40,000 \|/);
    // Every command the incident ran, exactly as sent over SSH, as the body of its own code block.
    const sent = events.flatMap((e) =>
      e.type === 'command'
        ? [e.record.command]
        : e.type === 'snapshot' || e.type === 'machine_error'
          ? e.commands.map((c) => c.command)
          : [],
    );
    expect(sent.some((c) => /KILL/.test(c))).toBe(true);
    for (const c of sent) expect(r.out).toContain(`\`\`\`sh\n${c}\n\`\`\``);
    expect(r.out).toContain('## What to follow up\n\n- ');
  });

  it('history <machine> --limit N in the CLI lists what the Slack answer counts as "+N more", with the same ids and containers', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gpu-medic-history-'));
    try {
      const inv = join(dir, 'inventory.yaml');
      await writeFile(inv, JSON.stringify(s.fleet.inventory()));
      const r = await cli(['history', 'kpro5', '--limit', '100'], { GPU_MEDIC_INVENTORY: inv });
      expect(r).toMatchObject({ code: 0, err: '' });
      const out = r.out.trimEnd().split('\n');
      expect(out.map((l) => l.split(' ')[0])).toEqual([statusId, containerId, hostKillId]);
      expect(out[1]).toMatch(/unstick +ct130 .*Recovered \(finished ok\) {2}\(container ct130 on kpro5\)$/);
      const unknown = await cli(['history', 'kpro55'], { GPU_MEDIC_INVENTORY: inv });
      expect(unknown.code).toBe(1);
      expect(unknown.err).toContain('has no machine kpro55; did you mean kpro5?');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    const both = await cli(['incident', hostKillId, '--json', '--markdown']);
    expect(both.code).toBe(2);
    expect(both.err).toContain('--json and --markdown are two different outputs; choose one');
  });
});
