/**
 * Requests an attacker or a confused client could send, all through the real Bolt HTTP receiver:
 * forged signature, stale timestamp, body altered after signing, a replayed (correctly signed)
 * request, also after a bot restart; tampered Approve/Deny clicks; users and channels outside the
 * policy. Each must be refused with nothing queued and nothing run.
 */
import { Writable } from 'node:stream';
import { Queue } from 'bullmq';
import { ApprovalStore } from '../../../src/approval/approval-store.ts';
import { startBot } from '../../../src/bot.ts';
import type { AnyLoggedEvent } from '../../../src/incident/all-events.ts';
import { IncidentLog } from '../../../src/incident/log.ts';
import { APPROVE_ACTION_ID, DENY_ACTION_ID } from '../../../src/render/unstick.ts';
import { createLogger } from '../../../src/logger.ts';
import { queueName } from '../../../src/queue/jobs.ts';
import { REPLAYED_TEXT } from '../../../src/slack/replay-guard.ts';
import {
  blockActionPayload,
  postSigned,
  sendInteraction,
  sendSlashCommand,
  slackSignature,
} from '../../harness/slack/signed-request.ts';
import { keysOf, startStack, type Stack } from '../../harness/stack.ts';
import { commandsOutsideTemplates } from '../lib/allow-list.ts';
import { secretLeaks } from '../lib/artefacts.ts';
import { checker, emptyFigures, pollUntil, sleep, type Figures } from '../lib/figures.ts';

const OPS = 'C0ONCALL01';
const REQUESTER = 'U0REQUEST1';
const APPROVER = 'U0APPROVE1';
const STRANGER = 'U0STRANGER';
const MACHINES = ['kpro5', 'ct129'];

export interface RequestsOptions {
  /** Rounds of forged / stale / altered / replayed slash commands. */
  rounds: number;
}

export function startRequestsStack(): Promise<Stack> {
  return startStack({
    fleet: { hosts: [{ id: 'kpro5', gpus: 2 }], containers: [{ id: 'ct129', vmid: 129, host: 'kpro5' }] },
    env: {
      GPU_MEDIC_ALLOWED_CHANNELS: OPS,
      GPU_MEDIC_ALLOWED_USERS: `${REQUESTER},${APPROVER}`,
      GPU_MEDIC_APPROVERS: APPROVER,
    },
  });
}

function form(text: string, responseUrl: string, user = REQUESTER, channel = OPS): string {
  const f = new URLSearchParams();
  for (const [k, v] of Object.entries({
    token: 'deprecated-verification-token',
    team_id: 'T0FAKE0001',
    channel_id: channel,
    user_id: user,
    command: '/gpu',
    text,
    api_app_id: 'A0FAKEAPP1',
    response_url: responseUrl,
    trigger_id: `${Date.now()}.1.${Math.random().toString(16).slice(2)}`,
  }))
    f.set(k, v);
  return f.toString();
}

/** Incident metas and job hashes only (rendering bookkeeping of earlier incidents may still change). */
async function openedKeys(s: Stack): Promise<string[]> {
  return (await keysOf(s.redis, s.prefix)).filter(
    (k) => k.endsWith(':meta') || /:site-[^:]+:inc_[a-z0-9_]+-[a-z0-9_-]+$/.test(k),
  );
}

const incidents = (s: Stack): Promise<number> => s.redis.zcard(`${s.prefix}:incidents`);
const ackText = (json: unknown): string =>
  typeof json === 'object' && json !== null && 'text' in json ? String((json as { text: unknown }).text) : '';
const isEphemeral = (json: unknown): boolean =>
  typeof json === 'object' && json !== null && (json as { response_type?: unknown }).response_type === 'ephemeral';

/** Forged, stale, altered, replayed slash commands; a replay after a bot restart. */
export async function signedRequestFaults(s: Stack, o: RequestsOptions): Promise<Figures> {
  const f = emptyFigures();
  const check = checker(f);
  f.runs++;
  for (let i = 0; i < o.rounds; i++) {
    const fields = {
      text: 'status kpro5',
      user_id: REQUESTER,
      channel_id: OPS,
      response_url: s.slack.newResponseUrl(),
    };
    const before = await incidents(s);
    const forged = await sendSlashCommand(s.eventsUrl, 'not-the-signing-secret', fields);
    const stale = await sendSlashCommand(s.eventsUrl, s.signingSecret, fields, {
      timestampSec: Math.floor(Date.now() / 1000) - 6 * 60,
    });
    const altered = await sendSlashCommand(s.eventsUrl, s.signingSecret, fields, {
      mutateBodyAfterSigning: (b) => b.replace('kpro5', 'ct129'),
    });
    const noSig = await postSigned(s.eventsUrl, s.signingSecret, form('status kpro5', fields.response_url), {
      signature: '',
    });
    f.faultsInjected += 4;
    f.badInputsTried += 4;
    check(forged.status === 401, `round ${i}: forged signature answered ${forged.status}, not 401`);
    check(stale.status === 401, `round ${i}: stale timestamp answered ${stale.status}, not 401`);
    check(altered.status === 401, `round ${i}: body altered after signing answered ${altered.status}, not 401`);
    check(noSig.status === 401, `round ${i}: empty signature answered ${noSig.status}, not 401`);
    check((await incidents(s)) === before, `round ${i}: a refused request opened an incident`);

    // The same signed bytes twice: the first is served, the second refused before any listener.
    const ts = Math.floor(Date.now() / 1000);
    const body = form('status kpro5', s.slack.newResponseUrl());
    const first = await postSigned(s.eventsUrl, s.signingSecret, body, { timestampSec: ts });
    const replay = await postSigned(s.eventsUrl, s.signingSecret, body, { timestampSec: ts });
    f.faultsInjected++;
    f.badInputsTried++;
    f.ackMs.push(first.elapsedMs, replay.elapsedMs);
    check(
      first.status === 200 && /incident `inc_/.test(ackText(first.json)),
      `round ${i}: the original request was not served: ${first.status} ${first.body.slice(0, 200)}`,
    );
    check(
      replay.status === 401 ||
        (replay.status === 200 && isEphemeral(replay.json) && ackText(replay.json) === REPLAYED_TEXT),
      `round ${i}: a replayed request was not refused: ${replay.status} ${replay.body.slice(0, 200)}`,
    );
    check((await incidents(s)) === before + 1, `round ${i}: the replay opened a second incident`);
  }

  // A replay must stay refused after the bot restarts: the record lives in Redis, not in memory.
  const ts = Math.floor(Date.now() / 1000);
  const body = form('status kpro5', s.slack.newResponseUrl());
  const first = await postSigned(s.eventsUrl, s.signingSecret, body, { timestampSec: ts });
  check(first.status === 200, `restart: original answered ${first.status}`);
  const before = await incidents(s);
  const sink = new Writable({ write: (_c, _e, cb) => cb() });
  const bot2 = await startBot(s.env, s.inventory, createLogger({ name: 'bot2', level: 'silent', destination: sink }));
  try {
    const replay = await postSigned(`http://127.0.0.1:${bot2.port}/slack/events`, s.signingSecret, body, {
      timestampSec: ts,
    });
    f.faultsInjected++;
    f.badInputsTried++;
    check(
      replay.status === 401 || (replay.status === 200 && ackText(replay.json) === REPLAYED_TEXT),
      `restart: a replay to a restarted bot was not refused: ${replay.status} ${replay.body.slice(0, 200)}`,
    );
    check((await incidents(s)) === before, 'restart: the replay opened an incident');
  } finally {
    await bot2.stop();
  }
  return f;
}

/** Slash commands from a channel or a user the policy does not allow. */
export async function policyFaults(s: Stack): Promise<Figures> {
  const f = emptyFigures();
  const check = checker(f);
  f.runs++;
  const before = await openedKeys(s);
  const logBefore = s.logText().split('request refused by policy').length;
  const cases = [
    { user: REQUESTER, channel: 'C0RANDOM99', why: 'channel' },
    { user: STRANGER, channel: OPS, why: 'user' },
    { user: STRANGER, channel: 'C0RANDOM99', why: 'both' },
  ];
  for (const c of cases) {
    for (const text of ['status kpro5', 'unstick ct129 please', 'status all']) {
      const r = await s.slash(text, { user: c.user, channel: c.channel });
      f.badInputsTried++;
      f.ackMs.push(r.elapsedMs);
      check(
        r.status === 200 && isEphemeral(r.json) && /Refused/.test(r.ackText) && /Nothing was queued/.test(r.ackText),
        `policy (${c.why}) "${text}": not refused: ${r.ackText}`,
      );
      check(r.incidentId === null, `policy (${c.why}) "${text}": an incident was opened`);
    }
  }
  await sleep(200);
  check(
    JSON.stringify(await openedKeys(s)) === JSON.stringify(before),
    'policy: a refused command opened an incident or queued a job',
  );
  const logged = s.logText().split('request refused by policy').length - logBefore;
  check(logged === 9, `policy: ${logged} refusals logged, expected 9`);
  return f;
}

interface Card {
  incidentId: string;
  approval: string;
  ts: string;
}

/** An unstick incident with a pending host-level approval card, as the worker would leave it. */
async function seedCard(s: Stack, o: { expired?: boolean } = {}): Promise<Card> {
  const log = new IncidentLog(s.redis, s.prefix);
  const store = new ApprovalStore(s.redis, s.prefix);
  const now = Date.now();
  const incidentId = `inc_fault_${Math.random().toString(36).slice(2, 10)}`;
  await log.create({
    id: incidentId,
    kind: 'unstick',
    requester: REQUESTER,
    channel: OPS,
    targets: ['ct129'],
    text: 'unstick ct129',
    reason: null,
    createdAt: new Date(now).toISOString(),
  });
  const a = await store.create({
    incidentId,
    stepId: 'host_kill-fault',
    planHash: 'h-fault',
    requester: REQUESTER,
    approvers: [APPROVER],
    now: o.expired ? now - 20 * 60_000 : now,
    expiresAt: o.expired ? now - 5 * 60_000 : now + 15 * 60_000,
  });
  const ts = s.slack.seedUserMessage({ channel: OPS, user: 'U0FAKEBOT1', text: `approval card ${a.id}` });
  await log.setSlackRef(incidentId, `approval:${a.id}`, { ts, hash: 'card' });
  return { incidentId, approval: a.id, ts };
}

/** Tampered Approve/Deny clicks through the receiver: each refused with a reason, nothing runs, the log records it. */
export async function interactionFaults(s: Stack): Promise<Figures> {
  const f = emptyFigures();
  const check = checker(f);
  f.runs++;
  const a = await seedCard(s);
  const b = await seedCard(s);
  const old = await seedCard(s, { expired: true });
  // Status jobs queued by earlier steps may still be running; only what starts after this point counts.
  await s.quiet();
  const commandsBefore = MACHINES.map((m) => s.fleet.commandLog(m).length);
  const click = async (
    card: Card,
    o: { user: string; value?: string; action?: string; secret?: string; ts?: number; noAnswer?: boolean },
  ) => {
    const responseUrl = s.slack.newResponseUrl();
    const payload = blockActionPayload({
      user: o.user,
      channel: OPS,
      messageTs: card.ts,
      actionId: o.action ?? APPROVE_ACTION_ID,
      value: o.value ?? card.approval,
      responseUrl,
    });
    const r = await sendInteraction(
      s.eventsUrl,
      o.secret ?? s.signingSecret,
      payload,
      o.ts !== undefined ? { timestampSec: o.ts } : {},
    );
    f.badInputsTried++;
    f.faultsInjected++;
    const answer = o.noAnswer
      ? null
      : await pollUntil(() => s.slack.responses().find((x) => x.url === responseUrl), 5000);
    return { r, answer, responseUrl };
  };
  const cases: Array<{
    name: string;
    card: Card;
    user: string;
    value?: string;
    action?: string;
    expect: RegExp;
    reason: string;
    logs: Card;
  }> = [
    {
      name: 'approval id of another incident',
      card: a,
      user: APPROVER,
      value: b.approval,
      expect: /does not belong/,
      reason: 'approval_not_found',
      logs: b,
    },
    {
      name: 'user not in the approvers list',
      card: a,
      user: STRANGER,
      expect: /not on the approvers list/,
      reason: 'not_approver',
      logs: a,
    },
    {
      name: 'the requester approving',
      card: a,
      user: REQUESTER,
      expect: /second person must/,
      reason: 'self_approval',
      logs: a,
    },
    {
      name: 'the requester denying via the Deny button',
      card: a,
      user: REQUESTER,
      action: DENY_ACTION_ID,
      expect: /second person must/,
      reason: 'self_approval',
      logs: a,
    },
    {
      name: 'a click after expiry',
      card: old,
      user: APPROVER,
      expect: /expired/,
      reason: 'approval_expired',
      logs: old,
    },
  ];
  for (const c of cases) {
    const before = (await new IncidentLog(s.redis, s.prefix).events(c.logs.incidentId)).length;
    const { r, answer } = await click(c.card, {
      user: c.user,
      ...(c.value ? { value: c.value } : {}),
      ...(c.action ? { action: c.action } : {}),
    });
    check(r.status === 200, `${c.name}: receiver answered ${r.status}`);
    check(
      answer !== null &&
        answer.body.response_type === 'ephemeral' &&
        c.expect.test(String(answer.body.text)) &&
        /Nothing was run/.test(String(answer.body.text)),
      `${c.name}: answer was ${JSON.stringify(answer?.body.text)}`,
    );
    const events: AnyLoggedEvent[] = await new IncidentLog(s.redis, s.prefix).events(c.logs.incidentId);
    const refused = events.slice(before).filter((e) => e.type === 'approval_refused');
    check(
      refused.length === 1 &&
        JSON.stringify(refused[0]).includes(c.reason) &&
        JSON.stringify(refused[0]).includes(c.user),
      `${c.name}: incident log recorded ${JSON.stringify(events.slice(before))}`,
    );
  }
  // Forged and replayed clicks never reach the handler: nothing recorded for them, nothing decided.
  const evBefore = (await new IncidentLog(s.redis, s.prefix).events(a.incidentId)).length;
  const forged = await click(a, { user: APPROVER, secret: 'forged-secret-000', noAnswer: true });
  check(forged.r.status === 401, `forged click answered ${forged.r.status}`);
  const payload = blockActionPayload({
    user: STRANGER,
    channel: OPS,
    messageTs: a.ts,
    actionId: APPROVE_ACTION_ID,
    value: a.approval,
    responseUrl: s.slack.newResponseUrl(),
  });
  const body = new URLSearchParams({ payload: JSON.stringify(payload) }).toString();
  const ts = Math.floor(Date.now() / 1000);
  const one = await postSigned(s.eventsUrl, s.signingSecret, body, {
    timestampSec: ts,
    signature: slackSignature(s.signingSecret, ts, body),
  });
  const two = await postSigned(s.eventsUrl, s.signingSecret, body, { timestampSec: ts });
  f.badInputsTried += 2;
  f.faultsInjected += 2;
  check(one.status === 200 && two.status === 200, `replayed click: ${one.status}/${two.status}`);
  await sleep(300);
  const replayEvents = (await new IncidentLog(s.redis, s.prefix).events(a.incidentId)).slice(evBefore);
  check(
    replayEvents.length === 1,
    `replayed click: ${replayEvents.length} events recorded for one click and its replay (expected 1)`,
  );
  const replayAnswers = s.slack.responses().filter((x) => x.body.text === REPLAYED_TEXT);
  check(replayAnswers.length >= 1, 'replayed click: no "already received" answer');

  // Nothing decided, nothing queued, nothing ran.
  const store = new ApprovalStore(s.redis, s.prefix);
  for (const c of [a, b, old]) {
    const got = await store.get(c.approval);
    check(
      got !== null && got.state !== 'approved' && got.state !== 'denied',
      `approval ${c.approval} is ${got?.state}`,
    );
  }
  const queue = new Queue(queueName('default'), { connection: s.redis, prefix: s.prefix });
  const jobs = await queue.getJobs(['waiting', 'active', 'delayed', 'completed', 'failed']);
  await queue.close();
  check(!jobs.some((j) => j.data && (j.data as { kind?: string }).kind === 'decision'), 'a decision job was queued');
  const ranAfter = MACHINES.flatMap((m, i) =>
    s.fleet
      .commandLog(m)
      .slice(commandsBefore[i])
      .map((e) => `${m}: ${e.cmd}`),
  );
  check(
    ranAfter.length === 0,
    `a command ran on the fleet after a tampered click: ${JSON.stringify(ranAfter.slice(0, 5))}`,
  );
  return f;
}

/** Secrets and templates over the whole run of this stack. */
export async function finalChecks(
  s: Stack,
  machines: readonly string[],
  extra: Record<string, string> = {},
): Promise<Figures> {
  const f = emptyFigures();
  const check = checker(f);
  const leaks = await secretLeaks(s, extra);
  check(leaks.length === 0, `secrets leaked: ${leaks.join('; ')}`);
  const outside = commandsOutsideTemplates(s.fleet, machines);
  f.badInputsReachedShell += outside.length;
  check(outside.length === 0, `commands outside the templates ran: ${JSON.stringify(outside.slice(0, 5))}`);
  return f;
}

export const REQUEST_MACHINES = MACHINES;

/**
 * Request time both ways (Slack: |now − X-Slack-Request-Timestamp| ≤ 5 minutes). A correctly signed
 * request dated outside the window, in the past or in the FUTURE, gets the answer a stale one gets
 * (HTTP 401, empty body) and opens nothing; so does a fresh request to a bot whose own clock is off
 * by an hour either way (the clock is injected into a second bot on the same Redis). A request dated
 * inside the window is served, and its replay record lives at least until the request could no
 * longer be accepted (ts + 300 s by the bot's clock), so the same bytes are refused for as long as
 * they could otherwise run.
 */
export async function clockSkewFaults(s: Stack): Promise<Figures & { skewedRefused: number; skewedSent: number }> {
  const f = { ...emptyFigures(), skewedRefused: 0, skewedSent: 0 };
  const check = checker(f);
  f.runs++;
  const a = await seedCard(s);
  const clickBody = (): string =>
    new URLSearchParams({
      payload: JSON.stringify(
        blockActionPayload({
          user: APPROVER,
          channel: OPS,
          messageTs: a.ts,
          actionId: APPROVE_ACTION_ID,
          value: a.approval,
          responseUrl: s.slack.newResponseUrl(),
        }),
      ),
    }).toString();
  const nowSec = (): number => Math.floor(Date.now() / 1000);
  const refusedLikeStale = async (what: string, url: string, body: string, tsSec: number): Promise<void> => {
    const incBefore = await incidents(s);
    const evBefore = (await new IncidentLog(s.redis, s.prefix).events(a.incidentId)).length;
    const r = await postSigned(url, s.signingSecret, body, { timestampSec: tsSec });
    f.skewedSent++;
    f.faultsInjected++;
    f.badInputsTried++;
    const ok = check(
      r.status === 401 && r.body === '',
      `${what}: answered ${r.status} ${r.body.slice(0, 200)} (a stale request gets 401 with no body)`,
    );
    if (ok) f.skewedRefused++;
    check((await incidents(s)) === incBefore, `${what}: opened an incident`);
    check(
      (await new IncidentLog(s.redis, s.prefix).events(a.incidentId)).length === evBefore,
      `${what}: the click reached the approval handler`,
    );
  };

  // The bot's clock is right; the request says it was sent an hour, a day ahead, or an hour ago.
  for (const [label, skew] of [
    ['one hour ahead', 3600],
    ['one day ahead', 86_400],
    ['301 s ahead', 301],
    ['one hour ago', -3600],
  ] as const) {
    await refusedLikeStale(
      `slash command dated ${label}`,
      s.eventsUrl,
      form('status kpro5', s.slack.newResponseUrl()),
      nowSec() + skew,
    );
    await refusedLikeStale(`Approve click dated ${label}`, s.eventsUrl, clickBody(), nowSec() + skew);
  }

  // The bot's own clock runs an hour behind (requests look an hour ahead) or ahead (they look stale).
  const sink = new Writable({ write: (_c, _e, cb) => cb() });
  for (const [label, skewMs] of [
    ['an hour behind', -3_600_000],
    ['an hour ahead', 3_600_000],
  ] as const) {
    const bot = await startBot(
      s.env,
      s.inventory,
      createLogger({ name: 'skewed-bot', level: 'silent', destination: sink }),
      { now: () => Date.now() + skewMs },
    );
    try {
      const url = `http://127.0.0.1:${bot.port}/slack/events`;
      await refusedLikeStale(
        `fresh slash command to a bot whose clock runs ${label}`,
        url,
        form('status kpro5', s.slack.newResponseUrl()),
        nowSec(),
      );
      await refusedLikeStale(`fresh Approve click to a bot whose clock runs ${label}`, url, clickBody(), nowSec());
    } finally {
      await bot.stop();
    }
  }

  // Inside the window (290 s ahead): served once; the record outlives the window; the replay is refused.
  const ts = nowSec() + 290;
  const body = form('status kpro5', s.slack.newResponseUrl());
  const before = await incidents(s);
  const first = await postSigned(s.eventsUrl, s.signingSecret, body, { timestampSec: ts });
  check(
    first.status === 200 && /incident `inc_/.test(ackText(first.json)),
    `a request dated 290 s ahead (inside the window) was not served: ${first.status} ${first.body.slice(0, 200)}`,
  );
  const key = `${s.prefix}:replay:${ts}:${slackSignature(s.signingSecret, ts, body)}`;
  const pttl = await s.redis.pttl(key);
  const mustLiveMs = (ts + 300) * 1000 - Date.now();
  check(
    pttl >= mustLiveMs,
    `the replay record of a request dated 290 s ahead expires in ${pttl} ms, but the request stays acceptable for ${mustLiveMs} ms more`,
  );
  const replay = await postSigned(s.eventsUrl, s.signingSecret, body, { timestampSec: ts });
  f.faultsInjected++;
  f.badInputsTried++;
  check(
    replay.status === 200 && ackText(replay.json) === REPLAYED_TEXT,
    `replay of a request dated 290 s ahead: ${replay.status} ${replay.body.slice(0, 200)}`,
  );
  check(
    (await incidents(s)) === before + 1,
    'the request dated 290 s ahead and its replay opened other than one incident',
  );
  return f;
}
