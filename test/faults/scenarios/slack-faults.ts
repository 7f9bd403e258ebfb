/**
 * Slack answering 429 (with Retry-After) and 5xx in bursts, then unreachable for a while, while
 * incidents keep arriving: after it recovers, every thread message is there exactly once, in
 * order (the thread equals the rendered incident log).
 */
import { startStack } from '../../harness/stack.ts';
import { checker, emptyFigures, mergeFigures, sleep, type Figures } from '../lib/figures.ts';
import { parentPosts, settleThread } from '../lib/threads.ts';
import { finalChecks } from './requests.ts';

export interface SlackFaultOptions {
  /** Incidents per phase (429 bursts, 5xx bursts, outage). */
  incidentsPerPhase: number;
  /** Failed calls per burst. */
  burst: number;
  /** How long Slack is unreachable. */
  outageMs: number;
  /** Bound on the wait for threads after recovery. */
  settleMs: number;
}

const MACHINES = ['kpro5', 'kpro7', 'ct129'];
const TEXTS = ['status kpro5', 'status kpro7', 'status ct129', 'status all'];

export async function slackFaults(o: SlackFaultOptions): Promise<Figures> {
  let f = emptyFigures();
  const check = checker(f);
  const s = await startStack({
    fleet: {
      hosts: [
        { id: 'kpro5', gpus: 2 },
        { id: 'kpro7', gpus: 1 },
      ],
      containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
    },
  });
  try {
    const ids: string[] = [];
    const fire = async (n: number): Promise<void> => {
      for (let i = 0; i < n; i++) {
        const r = await s.slash(TEXTS[i % TEXTS.length] ?? 'status kpro5');
        f.ackMs.push(r.elapsedMs);
        if (check(r.incidentId !== null, `not queued: ${r.ackText}`) && r.incidentId) ids.push(r.incidentId);
      }
    };
    // Phase 1: 429 bursts with Retry-After on posts and updates.
    f.runs++;
    s.slack.failNext('chat.postMessage', o.burst, { status: 429, retryAfterSec: 1 });
    s.slack.failNext('chat.update', o.burst, { status: 429, retryAfterSec: 1 });
    f.faultsInjected += 2 * o.burst;
    await fire(o.incidentsPerPhase);
    // Phase 2: 5xx bursts on any method.
    f.runs++;
    for (const status of [500, 502, 503] as const) s.slack.failNext('*', o.burst, { status });
    f.faultsInjected += 3 * o.burst;
    await fire(o.incidentsPerPhase);
    // Phase 3: Slack unreachable, incidents keep coming, then it is back.
    f.runs++;
    s.slack.setUnreachable(true);
    f.faultsInjected++;
    const downAt = Date.now();
    await fire(o.incidentsPerPhase);
    await sleep(Math.max(0, o.outageMs - (Date.now() - downAt)));
    s.slack.setUnreachable(false);
    const upAt = Date.now();
    for (const id of ids) {
      const v = await settleThread(s, id, Math.max(1000, o.settleMs - (Date.now() - upAt)));
      if (!v.eventsComplete) f.eventsLost++;
      const dupParents = Math.max(0, parentPosts(s, id) - 1);
      f.messagesLost += v.messagesOff + dupParents;
      check(
        v.eventsComplete && v.threadExact && dupParents === 0,
        `incident ${id}: ${v.detail}; parent posted ${parentPosts(s, id)} times`,
      );
    }
    f.recoverMs.push(Date.now() - upAt);
    // Re-rendering everything (as a restarted bot would) posts nothing new.
    const posts = s.slack.calls('chat.postMessage').filter((c) => c.status === 200).length;
    for (const id of ids) await s.bot.outbox.sync(id);
    const again = s.slack.calls('chat.postMessage').filter((c) => c.status === 200).length;
    f.messagesLost += again - posts;
    check(again === posts, `re-rendering posted ${again - posts} messages again`);
    check(
      s.slack.calls().some((c) => c.status === 429) && s.slack.calls().some((c) => c.status >= 500),
      'the faults were not actually served',
    );
    f = mergeFigures(f, await finalChecks(s, MACHINES));
  } finally {
    await s.stop();
  }
  return f;
}
