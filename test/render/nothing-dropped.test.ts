/**
 * Nothing the thread is about is dropped without saying so, since a reader cannot ask for what is not shown.
 * Every message is posted to the fake Slack Web API, which refuses what Slack refuses (50 blocks,
 * 3,000-character sections, one table, …), so "it fits" is checked by the same rules as in production.
 */
import { WebClient } from '@slack/web-api';
import type { types } from '@slack/bolt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GIB, type MachineSnapshot } from '../../src/gpu/snapshot.ts';
import type { IncidentMeta, LoggedEvent } from '../../src/incident/events.ts';
import type { UnstickLoggedEvent } from '../../src/incident/unstick-events.ts';
import type { Step, StepTarget } from '../../src/plan/unstick-plan.ts';
import { renderIncident, type MessageView } from '../../src/render/status.ts';
import { APPROVE_ACTION_ID, approvalCardFits, renderUnstick, splitForCards } from '../../src/render/unstick.ts';
import { silentSlackLogger } from '../harness/slack/silent-logger.ts';
import { startFakeSlack, type FakeSlack } from '../harness/slack/fake-slack-api.ts';

const AT = '2026-11-30T09:20:00.000Z';
const INC = 'inc_20261130_092000_k3x9q2';
const APR = 'apr_Qm9vYmFyYmF6cXV4MTIzNA';
const C = 'C0GPUOPS01';

let fake: FakeSlack;
let client: WebClient;
beforeAll(async () => {
  fake = await startFakeSlack();
  client = new WebClient(fake.botToken, {
    slackApiUrl: fake.apiUrl,
    logger: silentSlackLogger,
    retryConfig: { retries: 0 },
  });
});
afterAll(async () => {
  await fake.close();
});

/** Posts every view as Slack would receive it; rejects if Slack would refuse one. */
async function post(views: readonly MessageView[]): Promise<void> {
  for (const v of views) await client.chat.postMessage({ channel: C, text: v.text, blocks: v.blocks });
}

/** Every string a reader can see in the blocks (section, context, table cells, a rich_text section as one line). */
function visible(v: MessageView): string {
  const out: string[] = [];
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) n.forEach(walk);
    else if (n !== null && typeof n === 'object') {
      const o = n as Record<string, unknown>;
      if (o.type === 'rich_text_section' && Array.isArray(o.elements)) {
        out.push(
          o.elements
            .map((e: { type?: string; text?: string; user_id?: string; name?: string }) =>
              e.type === 'user' ? `<@${e.user_id}>` : e.type === 'emoji' ? `:${e.name}:` : (e.text ?? ''),
            )
            .join(''),
        );
        return;
      }
      if (typeof o.text === 'string') out.push(o.text);
      Object.values(o).forEach(walk);
    }
  };
  walk(v.blocks);
  return out.join('\n');
}

const unstickMeta: IncidentMeta = {
  id: INC,
  kind: 'unstick',
  requester: 'U0REQUEST',
  channel: C,
  targets: ['ct129'],
  text: '',
  reason: null,
  createdAt: AT,
};

function target(i: number): StepTarget {
  return {
    hostPid: 800_000 + i,
    containerPid: 100 + i,
    startTimeTicks: 40_000_000 + i,
    cmdline: `python3 -m sglang.launch_server --model-path /models/deepseek-v3 --tp 8 --rank ${i} --host 0.0.0.0 --port ${30_000 + i}`,
    pidNs: 'pid:[4026532845]',
    gpus: [{ index: i % 8, hostIndex: i % 8, uuid: `GPU-${i % 8}`, usedMiB: 9_000 }],
    hostOnlyWhy: `it runs as uid ${1000 + i} and container commands run as uid 0 (a long enough reason to take some room)`,
  };
}

function hostKillOf(targets: StepTarget[]): Step {
  const pids = targets.map((t) => String(t.hostPid));
  return {
    id: 'host_kill-3f9a0c1b2d4e',
    tier: 2,
    kind: 'host_kill',
    machineId: 'kpro5',
    targets,
    gpus: [],
    commands: [
      {
        role: 'read_procs',
        on: 'host',
        argv: ['cat', ...pids],
        display: `cat ${pids.map((p) => `/proc/${p}/stat`).join(' ')}`,
        when: 'always',
        timeoutMs: 15_000,
      },
      {
        role: 'kill',
        on: 'host',
        argv: ['kill', '-s', 'KILL', ...pids],
        display: `kill -s KILL ${pids.join(' ')}`,
        when: 'still_matching',
        timeoutMs: 15_000,
      },
    ],
    explanation: 'Only the host can stop these processes.',
    graceMs: 10_000,
    releaseTimeoutMs: 90_000,
    pollIntervalMs: 3_000,
  };
}
const hostKill = (n: number): Step => hostKillOf(Array.from({ length: n }, (_, i) => target(i)));

function cardEvents(step: Step): UnstickLoggedEvent[] {
  return [
    { type: 'requested', at: AT, id: '1-0' },
    {
      type: 'approval_requested',
      at: AT,
      approvalId: APR,
      stepId: step.id,
      expiresAt: AT,
      planHash: 'h',
      step,
      host: 'kpro5',
      vmid: 129,
      id: '1-1',
    },
  ];
}

const hasApprove = (v: MessageView | undefined): boolean =>
  (v?.blocks ?? []).some(
    (b) =>
      b.type === 'actions' &&
      (b as types.ActionsBlock).elements.some((e) => e.type === 'button' && e.action_id === APPROVE_ACTION_ID),
  );

describe('an approval card lists every target it approves', () => {
  it('40 targets (far past one 3,000-character section): every host PID, cmdline and the whole kill command are on the card, and Slack accepts it', async () => {
    const step = hostKill(40);
    const views = renderUnstick(unstickMeta, cardEvents(step));
    const card = views.find((v) => v.key === `approval:${APR}`);
    if (!card) throw new Error('no card');
    await post(views);
    const shown = visible(card);
    for (const t of step.targets) {
      expect(shown).toContain(`host PID ${t.hostPid} · container PID ${t.containerPid}`);
      expect(shown).toContain(t.cmdline);
    }
    // The kill command, continued over blocks if need be, still names every PID once.
    const killed = [...shown.matchAll(/kill -s KILL ([\d \\\n`]+)/g)].flatMap(
      (m) => (m[1] ?? '').match(/\d{6}/g) ?? [],
    );
    expect(killed.sort()).toEqual(step.targets.map((t) => String(t.hostPid)).sort());
    expect(hasApprove(card)).toBe(true);
    expect(approvalCardFits(step, 'kpro5', 129)).toBe(true);
    // The fallback text says what it leaves out instead of stopping mid-list.
    expect(card.text).toMatch(/… \d+ more lines in the card above$|host PID \*800039\*/);
  });

  it('a step too big for one Slack message gets a card without an Approve button that says why, and nothing can be approved unseen', async () => {
    const step = hostKill(600);
    expect(approvalCardFits(step, 'kpro5', 129)).toBe(false);
    const views = renderUnstick(unstickMeta, cardEvents(step));
    const card = views.find((v) => v.key === `approval:${APR}`);
    await post(views);
    expect(hasApprove(card)).toBe(false);
    expect(visible(card ?? { key: '', placement: 'reply', text: '', blocks: [] })).toMatch(
      /600 processes.*more than one Slack message can show.*cannot be approved.*Nothing from this card will run/s,
    );
  });

  it('splitForCards cuts a step into batches that each fit one card, one GPU per card when a GPU fits, losing and repeating no target', () => {
    const step = hostKill(400);
    const fits = (ts: readonly StepTarget[]): boolean => approvalCardFits(hostKillOf([...ts]), 'kpro5', 129);
    const batches = splitForCards(step.targets, fits);
    expect(batches.length).toBeGreaterThan(1);
    expect(batches.every(fits)).toBe(true);
    expect(
      batches
        .flat()
        .map((t) => t.hostPid)
        .sort(),
    ).toEqual(step.targets.map((t) => t.hostPid).sort());
    // 50 targets per GPU fit one card here, so each GPU's targets are on exactly one card.
    expect(fits(step.targets.filter((t) => t.gpus[0]?.index === 0))).toBe(true);
    for (let g = 0; g < 8; g++) expect(batches.filter((b) => b.some((t) => t.gpus[0]?.index === g))).toHaveLength(1);
    // A batch that fits as a whole is not split.
    expect(splitForCards(step.targets.slice(0, 5), fits)).toEqual([step.targets.slice(0, 5)]);
    expect(splitForCards([], fits)).toEqual([]);
  });
});

describe('step and summary messages list every process they signalled', () => {
  it('200 signalled processes: each host PID is in the step message and in the summary, and Slack accepts both', async () => {
    const step = hostKill(200);
    const events: UnstickLoggedEvent[] = [
      { type: 'requested', at: AT, id: '1-0' },
      {
        type: 'step_started',
        at: AT,
        stepId: step.id,
        kind: step.kind,
        tier: 2,
        machineId: 'kpro5',
        explanation: step.explanation,
        id: '1-1',
      },
      ...step.commands.map(
        (c, i): UnstickLoggedEvent => ({
          type: 'command',
          at: AT,
          stepId: step.id,
          role: c.role,
          on: 'host',
          record: { machineId: 'kpro5', command: c.display, code: 0, signal: null, durationMs: 100, timedOut: false },
          id: `1-2${i}`,
        }),
      ),
      ...step.targets.map(
        (t, i): UnstickLoggedEvent => ({
          type: 'signalled',
          at: AT,
          stepId: step.id,
          hostPid: t.hostPid,
          containerPid: t.containerPid,
          signal: 'KILL',
          cmdline: t.cmdline,
          result: 'sent',
          reason: null,
          id: `1-3${i}`,
        }),
      ),
      {
        type: 'step_finished',
        at: AT,
        stepId: step.id,
        outcome: 'done',
        durationMs: 1_000,
        message: 'done',
        id: '1-4',
      },
      { type: 'finished', at: AT, outcome: 'ok', durationMs: 2_000, id: '1-5' },
    ];
    const views = renderUnstick(unstickMeta, events);
    await post(views);
    const stepView = views.find((v) => v.key === `step:${step.id}`);
    const summary = views.find((v) => v.key === 'summary');
    for (const t of step.targets) {
      expect(visible(stepView ?? views[0] ?? { key: '', placement: 'reply', text: '', blocks: [] })).toContain(
        `(host PID ${t.hostPid})`,
      );
      expect(visible(summary ?? views[0] ?? { key: '', placement: 'reply', text: '', blocks: [] })).toContain(
        `(host PID ${t.hostPid})`,
      );
    }
    expect(summary?.text).toMatch(/… \d+ more lines in the message$/);
  });
});

function busy(machineId: string, gpus: number, perGpu: number): MachineSnapshot {
  return {
    machineId,
    view: 'host',
    takenAt: AT,
    gpus: Array.from({ length: gpus }, (_, index) => ({
      index,
      name: 'NVIDIA H200',
      busId: null,
      uuid: `GPU-${index}`,
      memoryUsedMiB: 96_000,
      memoryTotalMiB: 143_771,
      utilizationPct: 97,
    })),
    processes: Array.from({ length: gpus * perGpu }, (_, i) => ({
      gpuIndex: i % gpus,
      gpuUuid: `GPU-${i % gpus}`,
      pid: 700_000 + i,
      type: 'C',
      name: `/usr/bin/python3.11 -m vllm.entrypoints.openai.api_server worker-${i}`,
      usedMiB: 8_000,
    })),
    holders: [],
    kernelMounts: [],
    ram: { totalBytes: 2_000 * GIB, usedBytes: 300 * GIB, availableBytes: null },
    gpuError: null,
  };
}

describe('tables say "+N more" and the full list is reachable in the thread', () => {
  it('8 GPUs × 12 processes: each cell that cannot show all says +N more, and a follow-up message lists every process', async () => {
    const s = busy('kpro5', 8, 12);
    const meta: IncidentMeta = {
      id: INC,
      kind: 'status',
      requester: 'U0REQUEST',
      channel: C,
      targets: ['kpro5'],
      text: '',
      reason: null,
      createdAt: AT,
    };
    const events: LoggedEvent[] = [
      { type: 'requested', at: AT, id: '1-0' },
      { type: 'snapshot', at: AT, label: 'status', snapshot: s, commands: [], id: '1-1' },
    ];
    const views = renderIncident(meta, events);
    await post(views);
    const table = views.find((v) => v.key === 'ev:1-1')?.blocks.find((b) => b.type === 'table') as
      | { rows: Array<Array<{ text: string }>> }
      | undefined;
    const cells = (table?.rows ?? []).slice(1).map((r) => r[4]?.text ?? '');
    expect(cells).toHaveLength(8);
    for (const [gpu, c] of cells.entries()) {
      const listed = (c.match(/\b7\d{5}\b/g) ?? []).length;
      if (listed < 12) expect(c).toMatch(new RegExp(`\\+${12 - listed} more$`));
      expect(c).not.toMatch(/…$/);
      expect(c).toContain(String(700_000 + gpu));
    }
    // The text fallback says, for every GPU, how many processes it does not show.
    const fallback = views.find((v) => v.key === 'ev:1-1')?.text ?? '';
    const rowsOfText = fallback.split('\n').filter((l) => /^\s*\d+\s+NVIDIA H200/.test(l));
    expect(rowsOfText).toHaveLength(8);
    for (const l of rowsOfText) expect(l).toMatch(/\+\d+ more|12 processes/);
    // Every process, with its full name, is in the thread.
    const all = views.map(visible).join('\n');
    for (const p of s.processes) expect(all).toContain(`${p.pid}`);
    for (const p of s.processes) expect(all).toContain(p.name ?? '');
  });
});

describe('a failed fuser is shown with its error', () => {
  it('container view: the fuser error is in the thread, and the flag does not point at holders that are not there', async () => {
    const s: MachineSnapshot = {
      ...busy('ct129', 2, 0),
      view: 'container',
      holders: [],
      holdersError: 'fuser: Specified filename /dev/nvidia* does not exist.',
    };
    const meta: IncidentMeta = {
      id: INC,
      kind: 'status',
      requester: 'U0REQUEST',
      channel: C,
      targets: ['ct129'],
      text: '',
      reason: null,
      createdAt: AT,
    };
    const views = renderIncident(meta, [
      { type: 'requested', at: AT, id: '1-0' },
      { type: 'snapshot', at: AT, label: 'status', snapshot: s, commands: [], id: '1-1' },
    ]);
    await post(views);
    const reply = views.find((v) => v.key === 'ev:1-1');
    for (const shown of [reply?.text ?? '', visible(reply ?? { key: '', placement: 'reply', text: '', blocks: [] })]) {
      expect(shown).toContain(
        'fuser could not list the device holders: fuser: Specified filename /dev/nvidia∗ does not exist.',
      );
      expect(shown).not.toContain('see holders below');
      // One warning for every GPU with memory and no process listed, not one per GPU, so the thread stays
      // short.
      expect(shown).toMatch(/GPUs 0, 1: 96,000 and 96,000 MiB in use and no process listed .*holders are unknown/);
    }
  });
});

describe('status all over more machines than one table holds', () => {
  it('250 machines, 60 unreachable: every machine has a row in some summary table and every error its line; Slack accepts each message', async () => {
    const ids = Array.from({ length: 250 }, (_, i) => `kpro${String(i).padStart(3, '0')}`);
    const meta: IncidentMeta = {
      id: INC,
      kind: 'status_all',
      requester: 'U0REQUEST',
      channel: C,
      targets: ids,
      text: '',
      reason: null,
      createdAt: AT,
    };
    const events: LoggedEvent[] = [{ type: 'requested', at: AT, id: '1-0' }];
    ids.forEach((m, i) => {
      if (i % 4 === 1 && i < 240)
        events.push({
          type: 'machine_error',
          at: AT,
          machineId: m,
          code: 'connect_failed',
          message: `connect ECONNREFUSED 10.0.${i}.5:22 (a long enough reason to fill the line)`,
          commands: [],
          id: `2-${i}`,
        });
      else
        events.push({ type: 'snapshot', at: AT, label: 'status', snapshot: busy(m, 8, 1), commands: [], id: `2-${i}` });
    });
    const views = renderIncident(meta, events);
    await post(views);
    const tableRows = views.flatMap((v) =>
      v.blocks
        .filter((b) => b.type === 'table')
        .flatMap((b) => (b as { rows: Array<Array<{ text: string }>> }).rows.slice(1)),
    );
    expect(tableRows.map((r) => r[0]?.text).sort()).toEqual([...ids].sort());
    const shown = views.map(visible).join('\n');
    for (let i = 1; i < 240; i += 4) expect(shown).toContain(`10.0.${i}.5:22`);
  });
});
