/**
 * "Every thread message arrives exactly once, in order": the Slack thread of an incident must be
 * exactly what the renderer makes of its log (parent first, replies in log order), with no
 * duplicate post; "nothing lost": every target of an acknowledged incident has its result event.
 */
import type { AnyLoggedEvent } from '../../../src/incident/all-events.ts';
import { IncidentLog } from '../../../src/incident/log.ts';
import { renderThread } from '../../../src/render/thread.ts';
import type { Stack } from '../../harness/stack.ts';
import { pollUntil } from './figures.ts';

export interface ThreadVerdict {
  /** Every target has a snapshot or a machine_error in the log. */
  eventsComplete: boolean;
  /** Slack thread equals the rendered log: same messages, same order, none twice. */
  threadExact: boolean;
  /** Messages expected and missing, plus extra (duplicate) ones. */
  messagesOff: number;
  detail: string;
}

function results(events: readonly AnyLoggedEvent[]): Set<string> {
  const got = new Set<string>();
  for (const e of events) {
    if (e.type === 'snapshot') got.add(e.snapshot.machineId);
    if (e.type === 'machine_error') got.add(e.machineId);
  }
  return got;
}

export async function judgeThread(
  s: Pick<Stack, 'redis' | 'prefix' | 'slack'>,
  incidentId: string,
): Promise<ThreadVerdict> {
  const log = new IncidentLog(s.redis, s.prefix);
  const meta = await log.meta(incidentId);
  if (!meta) return { eventsComplete: false, threadExact: false, messagesOff: 1, detail: 'no incident meta (lost)' };
  const events = await log.events(incidentId);
  const got = results(events);
  const eventsComplete = meta.targets.every((t) => got.has(t));
  const views = renderThread(meta, events);
  const parent = s.slack.messages(meta.channel).filter((m) => JSON.stringify(m.blocks ?? []).includes(incidentId));
  if (parent.length !== 1 || !parent[0])
    return {
      eventsComplete,
      threadExact: false,
      messagesOff: views.length + Math.max(0, parent.length - 1),
      detail: `${parent.length} parents in the channel`,
    };
  const thread = s.slack.thread(meta.channel, parent[0].ts);
  const want = views.map((v) => v.text);
  const have = thread.map((m) => m.text);
  // Parent first, then replies in the order the log has them.
  const expected = [want[0] ?? '', ...views.filter((v) => v.placement === 'reply').map((v) => v.text)];
  const threadExact = JSON.stringify(have) === JSON.stringify(expected);
  let off = Math.abs(have.length - expected.length);
  if (!threadExact && off === 0) off = expected.filter((t, i) => have[i] !== t).length;
  return {
    eventsComplete,
    threadExact,
    messagesOff: off,
    detail: threadExact
      ? eventsComplete
        ? 'ok'
        : `thread matches its log, but no result in the log for ${JSON.stringify(meta.targets.filter((t) => !got.has(t)))}`
      : `expected ${JSON.stringify(expected.map((t) => t.slice(0, 60)))}, Slack has ${JSON.stringify(have.map((t) => t.slice(0, 60)))}`,
  };
}

/** Waits (bounded) until the incident is complete and rendered, then judges it. */
export async function settleThread(s: Stack, incidentId: string, timeoutMs: number): Promise<ThreadVerdict> {
  const ok = await pollUntil(
    async () => {
      const v = await judgeThread(s, incidentId);
      const dirty = (await s.redis.sismember(`${s.prefix}:dirty`, incidentId)) === 1;
      return v.eventsComplete && v.threadExact && !dirty ? v : null;
    },
    timeoutMs,
    100,
  );
  return ok ?? judgeThread(s, incidentId);
}

/** Parent posts per incident among successful chat.postMessage calls (a duplicate parent is a lost message too). */
export function parentPosts(s: Stack, incidentId: string): number {
  return s.slack
    .calls('chat.postMessage')
    .filter(
      (c) =>
        c.status === 200 &&
        (c.response as { ok?: boolean } | null)?.ok === true &&
        JSON.stringify(c.body.blocks ?? '').includes(incidentId),
    ).length;
}
