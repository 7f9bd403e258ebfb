/**
 * Load: a burst of slash commands at once (each acked, inside Slack's 3 s when asked; p50/p99 reported; the
 * queue drains; no message lost), then `status all` several times at once across many machines:
 * no cross-talk between incidents, one SSH login per host for the worker's pool, and never more
 * channels at once than the pool allows (8, under sshd's MaxSessions 10).
 */
import { Queue } from 'bullmq';
import { IncidentLog } from '../../../src/incident/log.ts';
import { queueName } from '../../../src/queue/jobs.ts';
import { startStack, type Stack } from '../../harness/stack.ts';
import { sendBurst } from '../lib/burst-client.ts';
import { checker, emptyFigures, mergeFigures, percentile, pollUntil, type Figures } from '../lib/figures.ts';
import { loginsOf, watchSessions } from '../lib/sessions.ts';
import { parentPosts, settleThread } from '../lib/threads.ts';
import { finalChecks } from './requests.ts';

export interface LoadOptions {
  machines: number;
  /** Slash commands sent at once. */
  burst: number;
  /** `status all` incidents at once. */
  statusAll: number;
  /** Bound for the queue to drain and every thread to be complete. */
  drainMs: number;
  /**
   * Hold the queue (BullMQ pause) while the burst is acked, as when workers run on other machines.
   * Here the simulated fleet (a node process per fake nvidia-smi call) and ssh2's crypto share two
   * cores with the bot; unpaused, the acks measure that contention, not the bot. Default true.
   */
  holdQueueDuringBurst?: boolean;
  /**
   * Slack's 3 s, as a bound every ack must meet (the soak sets it). Unset in vitest: on a shared,
   * loaded machine a CPU-starved bot misses any wall-clock bound whatever its code does, so the
   * suite checks that every command is acked and queued, and the bench measures how fast.
   */
  ackWithinMs?: number;
}

/** Results in the log must be exactly one per target, and only for its targets. */
async function crossTalk(s: Stack, id: string): Promise<string | null> {
  const log = new IncidentLog(s.redis, s.prefix);
  const meta = await log.meta(id);
  if (!meta) return 'no meta';
  const seen: string[] = [];
  for (const e of await log.events(id)) {
    if (e.type === 'snapshot') seen.push(e.snapshot.machineId);
    if (e.type === 'machine_error') seen.push(e.machineId);
  }
  const want = [...meta.targets].sort();
  return JSON.stringify(seen.sort()) === JSON.stringify(want)
    ? null
    : `results for ${JSON.stringify(seen)} in an incident about ${JSON.stringify(want)}`;
}

export async function load(
  o: LoadOptions,
): Promise<Figures & { logins: number[]; peakChannels: number; peakConnections: number }> {
  let f = emptyFigures();
  const check = checker(f);
  f.runs++;
  const ids = Array.from({ length: o.machines }, (_, i) => `gpu${String(i).padStart(2, '0')}`);
  const s = await startStack({ fleet: { hosts: ids.map((id) => ({ id, gpus: 2 })) } });
  const dirs = ids.map((id) => s.fleet.machine(id).dir);
  // Started when the queue resumes: the /proc sampling must not compete with the acks it does not measure.
  let watch: ReturnType<typeof watchSessions> | null = null;
  let logins: number[] = [];
  let peakChannels = 0;
  let peakConnections = 0;
  try {
    const queue = new Queue(queueName('default'), { connection: s.redis, prefix: s.prefix });
    const hold = o.holdQueueDuringBurst ?? true;
    if (hold) await queue.pause();
    // The burst: every command at once through the signed receiver, sent by a process of its own
    // (as Slack's requests come from outside): the acks time the bot, not this process's client.
    const burst = await sendBurst({
      url: s.eventsUrl,
      signingSecret: s.signingSecret,
      commands: Array.from({ length: o.burst }, (_, i) => ({
        text: `status ${ids[i % ids.length]}`,
        user_id: 'U0REQUEST1',
        channel_id: 'C0ONCALL01',
        response_url: s.slack.newResponseUrl(),
      })),
    });
    const acked: string[] = [];
    for (const r of burst) {
      if (r.error !== undefined) {
        check(false, `burst: no ack at all (${r.error})`);
        f.ackMs.push(10_000);
        continue;
      }
      f.ackMs.push(r.elapsedMs);
      check(
        r.status === 200 && (o.ackWithinMs === undefined || r.elapsedMs < o.ackWithinMs || !hold),
        `burst: ack ${r.status} after ${Math.round(r.elapsedMs)} ms`,
      );
      const ackText =
        typeof r.json === 'object' && r.json !== null && 'text' in r.json
          ? String((r.json as { text: unknown }).text)
          : '';
      const incidentId = /incident `(inc_[a-z0-9_]+)`/.exec(ackText)?.[1] ?? null;
      if (check(incidentId !== null, `burst: not queued: ${ackText.slice(0, 120)}`) && incidentId)
        acked.push(incidentId);
    }
    // status all, several at once, across every machine.
    const alls = await Promise.all(Array.from({ length: o.statusAll }, () => s.slash('status all')));
    for (const r of alls) {
      f.ackMs.push(r.elapsedMs);
      if (check(r.incidentId !== null, `status all: not queued: ${r.ackText.slice(0, 120)}`) && r.incidentId)
        acked.push(r.incidentId);
    }
    watch = watchSessions(dirs);
    if (hold) await queue.resume();
    const drained = await pollUntil(
      async () =>
        Object.values(await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized')).every((n) => n === 0),
      o.drainMs,
      200,
    );
    await queue.close();
    check(drained !== null, `the queue did not drain within ${o.drainMs} ms`);
    const t0 = Date.now();
    for (const id of acked) {
      const v = await settleThread(s, id, Math.max(2000, o.drainMs - (Date.now() - t0)));
      if (!v.eventsComplete) f.eventsLost++;
      f.messagesLost += v.messagesOff + Math.max(0, parentPosts(s, id) - 1);
      check(v.eventsComplete && v.threadExact, `incident ${id}: ${v.detail}`);
      const ct = await crossTalk(s, id);
      check(ct === null, `incident ${id}: cross-talk: ${ct}`);
    }
    const peaks = watch.stop();
    watch = null;
    logins = dirs.map(loginsOf);
    peakChannels = Math.max(0, ...peaks.channels.values());
    peakConnections = Math.max(0, ...peaks.connections.values());
    check(
      logins.every((n) => n === 1),
      `SSH logins per host (one worker pool): ${JSON.stringify(logins)}`,
    );
    check(peakChannels <= 8, `a host had ${peakChannels} commands running at once (pool limit 8, sshd MaxSessions 10)`);
    check(peakConnections <= 1, `a host had ${peakConnections} SSH connections at once`);
    check(peaks.samples > 5 && peakChannels > 0, `the session watcher saw nothing (${peaks.samples} samples)`);
    if (hold && o.ackWithinMs !== undefined)
      check(percentile(f.ackMs, 99) < o.ackWithinMs, `ack p99 ${Math.round(percentile(f.ackMs, 99))} ms`);
    f = mergeFigures(f, await finalChecks(s, ids));
  } finally {
    watch?.stop();
    await s.stop();
  }
  return { ...f, logins, peakChannels, peakConnections };
}
