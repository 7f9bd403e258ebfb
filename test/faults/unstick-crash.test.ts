/**
 * Unstick under faults, since gpu-medic is used when things already break. The worker is a separate OS
 * process SIGKILLed at each step of an unstick (the moment picked by watching the incident log), then a new
 * worker process is started and BullMQ's stalled-job recovery hands it the job. Per run: no holder gets a
 * second SIGTERM or SIGKILL, bystanders none, the log has one `signalled` per (process, signal) and one for
 * every signal the fleet saw, the incident ends (once) in a state the Slack thread shows, the target lock is
 * released and no job is left active or failed.
 *
 * Also: the bot restarted while a card is pending (the old card still works; expiry still fires),
 * a double click and a replayed click (X-Slack-Retry-Num) run the kill once, and a holder whose
 * memory outlives the release timeout ends in bounded time with a clear message while the worker
 * keeps serving other commands.
 *
 * The suite runs each crash point CRASH_RUNS times (default 1: a run is about 8 s, and the rows
 * already took the longest of any file); SOAK_RUNS=N runs each N times (`npm run soak` repeats them).
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { pollUntil } from './lib/figures.ts';
import { markRun, namesOf, outsideRun, type RunMark } from './lib/run-signals.ts';
import { BOB, DAVE, buttonsOf, ofType, startCrashRig, type CrashRig, type WorkerProc } from './unstick-rig.ts';

const RUNS = Math.max(1, Math.min(200, Number(process.env.SOAK_RUNS ?? process.env.CRASH_RUNS ?? 1) || 1));

type Point =
  /** Right after the job's `started`: before (or while) the before snapshot is read. */
  | 'before-snapshot'
  /** Right after the first SIGTERM of the container step is logged, before the grace ends in SIGKILL. */
  | 'between-term-and-kill'
  /** Right after the container step finished, while the after snapshot is read. */
  | 'during-after-snapshot'
  /** Right after a second person approved the host kill (the decision job just queued or starting). */
  | 'right-after-approval'
  /** Right after the host SIGKILL is logged, while the worker waits for the memory to come back. */
  | 'after-host-kill'
  /** The decision job's after snapshot. */
  | 'during-host-after-snapshot';

interface Tally {
  runs: number;
  /** A holder that got a second SIGTERM or SIGKILL. */
  killedTwice: number;
  /** Signals any fleet process other than this run's holders received during the run. */
  outsideBound: number;
  /** A signal the fleet saw that the incident log has no `signalled … sent` for. */
  eventsLost: number;
  /** How the incidents ended (verdict kind, or the waiting state). */
  endings: Record<string, number>;
  /** Runs where the worker was SIGKILLed after the trigger event (not yet finished). */
  killedMidJob: number;
  ms: number[];
}

const tally = new Map<Point, Tally>();
function tallyOf(p: Point): Tally {
  let t = tally.get(p);
  if (!t) {
    t = { runs: 0, killedTwice: 0, outsideBound: 0, eventsLost: 0, endings: {}, killedMidJob: 0, ms: [] };
    tally.set(p, t);
  }
  return t;
}

let rig: CrashRig;
let worker: WorkerProc;
const bystanders: FleetProcess[] = [];

beforeAll(async () => {
  rig = await startCrashRig({
    fleet: {
      hosts: [{ id: 'kpro5', gpus: 8 }],
      containers: [
        // Logged in as a non-root user: root's GPU jobs there can only be stopped from the host (S3).
        { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
        // Reached by `pct exec` as root: the container step can stop its holders (S2).
        { id: 'ct130', vmid: 130, host: 'kpro5' },
      ],
    },
    tweakInventory: (inv) => {
      const c = inv.containers?.find((x) => x.id === 'ct129');
      if (c) c.user = 'fleetuser';
    },
  });
  bystanders.push(await rig.fleet.spawnBystander('ct130', { title: 'python3 /opt/monitor/monitor.py' }));
  bystanders.push(await rig.fleet.spawnBystander('ct129', { title: 'python3 exporter.py --port 9400' }));
  bystanders.push(
    await rig.fleet.spawnHolder('kpro5', { gpus: [{ index: 7, mib: 2048 }], title: 'python3 /srv/host_job.py' }),
  );
  worker = await rig.startWorker();
}, 120_000);

afterAll(async () => {
  if (tally.size > 0) {
    const rows = [...tally.entries()].map(
      ([p, t]) =>
        `${p.padEnd(28)} runs ${t.runs}  killed twice ${t.killedTwice}  outside bound ${t.outsideBound}  events lost ${t.eventsLost}  worker killed mid-job ${t.killedMidJob}  ` +
        `endings ${JSON.stringify(t.endings)}  ms ${Math.min(...t.ms)}-${Math.max(...t.ms)}`,
    );
    process.stdout.write(`\nunstick crash runs (${RUNS} per point):\n${rows.join('\n')}\n`);
    // `npm run soak` runs this file and adds these counts to its table.
    const out = process.env.GPU_MEDIC_CRASH_FIGURES;
    if (out) writeFileSync(out, JSON.stringify(Object.fromEntries(tally)));
  }
  await rig?.stop();
}, 60_000);

/** Crash: SIGKILL the worker process now, and start a fresh one (BullMQ hands it the stalled job). */
async function crashWorker(): Promise<void> {
  await worker.kill();
  worker = await rig.startWorker();
}

const sig = (s: string): string => `SIG${s}`;

/** A run starts: what the fleet has recorded so far is not this run's (the previous run's cleanup included). */
const startRun = (): RunMark => markRun(rig.fleet.signals());

/**
 * Per-run checks, shared by every fault: counts what the tally reports and asserts the invariants.
 * `holders` are this run's GPU processes (may be signalled once per signal); bystanders never.
 */
async function checkRun(o: {
  point: Point | null;
  incidentId: string;
  target: string;
  holders: FleetProcess[];
  run: RunMark;
}): Promise<{ events: AnyLoggedEvent[]; thread: StoredMessage[] }> {
  const ev = await rig.events(o.incidentId);
  const pids = o.holders.map((h) => h.hostPid);
  const signals = rig.signalsOf(pids).filter((s) => s.ts >= o.run.started - 1000);
  const sent = ofType(ev, 'signalled').filter((e) => e.result === 'sent');

  // Kills executed twice: per holder, per signal, as the processes themselves saw them.
  let twice = 0;
  for (const pid of pids)
    for (const s of ['SIGTERM', 'SIGKILL'])
      if (signals.filter((x) => x.hostPid === pid && x.signal === s).length > 1) twice++;
  // Events lost: a signal a holder received that the log does not record as sent.
  // A worker killed after its signal went out and before it wrote `signalled` leaves the
  // `signal_intent` written just before the command: the log still names whom it was for.
  const intended = ofType(ev, 'signal_intent').flatMap((e) =>
    e.targets.map((t) => ({ hostPid: t.hostPid, signal: e.signal })),
  );
  const lost = signals.filter(
    (x) =>
      !sent.some((e) => e.hostPid === x.hostPid && sig(e.signal) === x.signal) &&
      !intended.some((e) => e.hostPid === x.hostPid && sig(e.signal) === x.signal),
  );
  // Outside the bound: any signal, during this run, to a process that is not one of its holders
  // (a record not yet there when the run started: lib/run-signals.ts says why not a timestamp bound).
  const outside = outsideRun(o.run, rig.fleet.signals(), o.holders);
  const finished = ofType(ev, 'finished');
  const verdict = ofType(ev, 'verdict').at(-1);
  if (o.point) {
    const t = tallyOf(o.point);
    t.runs++;
    t.killedTwice += twice;
    t.outsideBound += outside.length;
    t.eventsLost += lost.length;
    const ending = verdict?.verdict.kind ?? (finished.length > 0 ? `finished ${finished[0]?.outcome}` : 'open');
    t.endings[ending] = (t.endings[ending] ?? 0) + 1;
    t.ms.push(Date.now() - o.run.started);
  }

  expect(twice, `holders signalled twice: ${JSON.stringify(signals)}`).toBe(0);
  expect(lost, 'signals the incident log does not record').toEqual([]);
  // The log itself never says the same process got the same signal twice (whatever the step).
  const keys = sent.map((e) => `${e.hostPid}:${e.signal}`);
  expect(new Set(keys).size, `duplicate signalled events: ${keys.join(' ')}`).toBe(keys.length);
  // Nobody but the holders of the target: the bystanders (and the host's own job) untouched.
  expect(rig.signalsOf(bystanders.map((b) => b.hostPid))).toEqual([]);
  expect(outside, `signals to processes that are not holders of the target (${namesOf(o.holders)})`).toEqual([]);
  // Exactly one end, with a verdict, and the lock goes with it.
  expect(finished).toHaveLength(1);
  expect(verdict).toBeDefined();
  // The worker releases the lock right after it appends `finished` (workers/unstick/attempt-fence.ts,
  // two writes): seen from outside that process, the release can land a moment after the event.
  const held = await pollUntil(async () => ((await rig.lock.holder(o.target)) === null ? 'released' : null), 10_000);
  expect(held, `the lock on ${o.target} outlived the incident's end`).toBe('released');
  // The thread shows that end: the parent carries the verdict's title and a summary reply exists.
  const title = verdict?.verdict.title ?? '';
  const thread = await rig.thread(
    o.incidentId,
    (t) => (t[0]?.text ?? '').includes(title) && t.some((m) => m.text.startsWith('*Summary*')),
    20_000,
  );
  expect(
    thread.some((m) => buttonsOf(m).length > 0),
    'no button left on any card',
  ).toBe(false);
  // No job left running or failed (a job that stalled twice would end in failed).
  await expect.poll(async () => (await rig.jobCounts()).active, { timeout: 10_000 }).toBe(0);
  expect((await rig.jobCounts()).failed).toBe(0);
  return { events: ev, thread };
}

/** Holders still alive after a run are removed by the test (after the checks) so the next run starts clean. */
async function cleanUp(holders: FleetProcess[]): Promise<void> {
  for (const h of holders) {
    try {
      process.kill(h.hostPid, 'SIGKILL');
    } catch {
      // already gone
    }
    await h.exited;
  }
  // Memory of a killed holder comes back at once (no die delay): wait for the fleet to show it.
  await expect
    .poll(
      () =>
        rig.fleet
          .gpuMemory('kpro5')
          .slice(0, 7)
          .every((g) => g.usedMiB === 0),
      { timeout: 10_000 },
    )
    .toBe(true);
}

/** S2 on ct130: one holder that stops on SIGTERM, one that ignores it (needs the SIGKILL). */
async function containerRun(point: Point, trigger: (id: string) => Promise<unknown>): Promise<void> {
  const run = startRun();
  const polite = await rig.fleet.spawnHolder('ct130', {
    gpus: [{ index: 0, mib: 96_413 }],
    title: 'sglang::scheduler_TP0',
  });
  const stubborn = await rig.fleet.spawnHolder('ct130', {
    gpus: [{ index: 1, mib: 96_417 }],
    title: 'sglang::scheduler_TP1',
    ignoreTerm: true,
  });
  const r = await rig.slash('unstick ct130 crash test');
  expect(r.ackText).toMatch(/Unsticking `ct130`/);
  const id = String(r.incidentId);
  await trigger(id);
  const midJob = !(await rig.events(id)).some((e) => e.type === 'finished');
  if (midJob) tallyOf(point).killedMidJob++;
  await crashWorker();
  await rig.waitEvent(id, 'finished', undefined, 60_000);
  const { events } = await checkRun({ point, incidentId: id, target: 'ct130', holders: [polite, stubborn], run });
  const sigOf = (p: FleetProcess) => rig.signalsOf([p.hostPid]).map((s) => s.signal);

  if (point === 'between-term-and-kill') {
    // The SIGTERM went out, the worker died in the grace: the new one does not start the step over.
    expect(sigOf(stubborn)).toEqual(['SIGTERM']);
    expect(ofType(events, 'step_finished').map((s) => s.outcome)).toContain('interrupted');
  } else {
    // Before the step started, or after it ended: the step ran exactly once, as planned.
    expect(sigOf(polite)).toEqual(['SIGTERM']);
    expect(sigOf(stubborn)).toEqual(['SIGTERM', 'SIGKILL']);
    expect(ofType(events, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
  }
  await cleanUp([polite, stubborn]);
}

/** S3 on ct129: the container login cannot stop root's job; the card, Bob approves, host kill. */
async function hostRun(point: Point, trigger: (id: string) => Promise<unknown>): Promise<void> {
  const run = startRun();
  const h = await rig.fleet.spawnHolder('ct129', {
    gpus: [
      { index: 2, mib: 96_413 },
      { index: 3, mib: 96_417 },
    ],
    title: 'sglang::scheduler_TP0',
  });
  const r = await rig.slash('unstick ct129 crash test');
  expect(r.ackText).toMatch(/Unsticking `ct129`/);
  const id = String(r.incidentId);
  const t = await rig.thread(id, (th) => th.some((m) => buttonsOf(m).length === 2), 30_000);
  const card = t.find((m) => buttonsOf(m).length === 2);
  const approve = buttonsOf(card).find((b) => b.action_id === 'gpu_approve');
  if (!card || !approve) throw new Error('no approval card');
  expect((await rig.click(BOB, card, approve)).status).toBe(200);
  await trigger(id);
  const midJob = !(await rig.events(id)).some((e) => e.type === 'finished');
  if (midJob) tallyOf(point).killedMidJob++;
  await crashWorker();
  await rig.waitEvent(id, 'finished', undefined, 60_000);
  const { events } = await checkRun({ point, incidentId: id, target: 'ct129', holders: [h], run });
  const kills = rig.signalsOf([h.hostPid]).map((s) => s.signal);
  // The approved kill ran exactly once, whenever the worker died: a worker that takes over
  // finishes the approved step (identity-checked, minus what the log says was already sent).
  expect(kills).toEqual(['SIGKILL']);
  expect(ofType(events, 'step_finished').map((s) => s.outcome)).not.toContain('interrupted');
  expect(ofType(events, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
  expect(ofType(events, 'approval_decided')).toHaveLength(1);
  await cleanUp([h]);
}

const isTier1 = (e: AnyLoggedEvent, all: readonly AnyLoggedEvent[]): boolean =>
  'stepId' in e && all.some((s) => s.type === 'step_started' && s.stepId === e.stepId && s.kind === 'container_signal');

describe('worker SIGKILLed at each step of an unstick, then restarted (separate OS process)', () => {
  for (let i = 1; i <= RUNS; i++) {
    it(`before the snapshot (run ${i}/${RUNS})`, async () => {
      await containerRun('before-snapshot', (id) => rig.waitEvent(id, 'started'));
    }, 120_000);

    it(`between SIGTERM and SIGKILL (run ${i}/${RUNS})`, async () => {
      await containerRun('between-term-and-kill', (id) =>
        rig.waitEvent(id, 'signalled', (e) => e.signal === 'TERM' && e.result === 'sent'),
      );
    }, 120_000);

    it(`during the after snapshot of the container step (run ${i}/${RUNS})`, async () => {
      // The step's end is logged just before the after snapshot is read over SSH (both views at once).
      await containerRun('during-after-snapshot', (id) => rig.waitEvent(id, 'step_finished'));
    }, 120_000);

    it(`right after the approval (run ${i}/${RUNS})`, async () => {
      await hostRun('right-after-approval', (id) => rig.waitEvent(id, 'approval_decided'));
    }, 120_000);

    it(`right after the host SIGKILL, while waiting for the memory (run ${i}/${RUNS})`, async () => {
      await hostRun('after-host-kill', (id) =>
        rig.waitEvent(id, 'signalled', (e, all) => e.signal === 'KILL' && e.result === 'sent' && !isTier1(e, all)),
      );
    }, 120_000);

    it(`during the after snapshot of the host kill (run ${i}/${RUNS})`, async () => {
      await hostRun('during-host-after-snapshot', (id) =>
        rig.waitEvent(id, 'step_finished', (e, all) => !isTier1(e, all)),
      );
    }, 120_000);
  }
});

const responseTexts = (): string[] => rig.slack.responses().map((r) => String(r.body.text ?? ''));

/** S3 up to its card: a root job in ct129 the container login cannot stop. */
async function cardFor(title: string): Promise<{
  id: string;
  h: FleetProcess;
  card: StoredMessage;
  approve: { action_id: string; value: string };
  deny: { action_id: string; value: string };
  run: RunMark;
}> {
  const run = startRun();
  const h = await rig.fleet.spawnHolder('ct129', { gpus: [{ index: 2, mib: 96_413 }], title });
  const r = await rig.slash('unstick ct129');
  expect(r.ackText).toMatch(/Unsticking `ct129`/);
  const id = String(r.incidentId);
  const t = await rig.thread(id, (th) => th.some((m) => buttonsOf(m).length === 2), 30_000);
  const card = t.find((m) => buttonsOf(m).length === 2);
  const approve = buttonsOf(card).find((b) => b.action_id === 'gpu_approve');
  const deny = buttonsOf(card).find((b) => b.action_id === 'gpu_deny');
  if (!card || !approve || !deny) throw new Error('no approval card');
  return { id, h, card, approve, deny, run };
}

describe('the bot restarted while an approval card is pending', () => {
  it('the click on the old card (to the new bot) works: approved once, one host kill, Recovered', async () => {
    const { id, h, card, approve, run } = await cardFor('sglang::scheduler_TP0');
    await rig.restartBot();
    await crashWorker(); // and the worker too, while the card waits
    expect((await rig.click(BOB, card, approve)).status).toBe(200);
    await rig.slack.waitFor(() => responseTexts().some((t) => t.startsWith(':white_check_mark: Approved')), 10_000);
    await rig.waitEvent(id, 'finished', undefined, 60_000);
    const { events } = await checkRun({ point: null, incidentId: id, target: 'ct129', holders: [h], run });
    expect(rig.signalsOf([h.hostPid]).map((s) => s.signal)).toEqual(['SIGKILL']);
    expect(ofType(events, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    await cleanUp([h]);
  }, 120_000);

  it('the expiry still fires (TTL 5 s): expired in the log and the thread, a late click runs nothing, lock released', async () => {
    await worker.kill();
    worker = await rig.startWorker({ GPU_MEDIC_APPROVAL_TTL_SEC: '5' });
    const { id, h, card, approve, run } = await cardFor('sglang::scheduler_TP1');
    await rig.restartBot();
    await crashWorker(); // the new worker has the normal TTL: the expiry job was queued with the card
    const exp = await rig.waitEvent(id, 'approval_expired', undefined, 30_000);
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    expect(Date.parse(exp.at) - Date.parse(req?.at ?? '')).toBeGreaterThanOrEqual(4_900);
    await rig.waitEvent(id, 'finished', undefined, 30_000);
    const { thread } = await checkRun({ point: null, incidentId: id, target: 'ct129', holders: [h], run });
    expect(thread.map((m) => m.text).join('\n')).toMatch(/expired/i);
    const n = responseTexts().length;
    expect((await rig.click(BOB, card, approve)).status).toBe(200);
    await rig.slack.waitFor(() => responseTexts().length > n, 10_000);
    expect(responseTexts().at(-1)).toMatch(/expired|does not belong|does not exist/);
    await new Promise((r) => setTimeout(r, 1500));
    expect(rig.signalsOf([h.hostPid])).toEqual([]);
    await cleanUp([h]);
  }, 120_000);
});

describe('a kill never runs twice from clicks', () => {
  it('a double click, a second approver at the same moment and a Slack-retried (replayed) click: one decision, one SIGKILL', async () => {
    const { id, h, card, approve, run } = await cardFor('sglang::scheduler_TP2');
    const payload = rig.clickPayload(BOB, card, approve);
    const timestampSec = Math.floor(Date.now() / 1000);
    const n = responseTexts().length;
    const answers = await Promise.all([
      rig.click(BOB, card, approve, { payload, timestampSec }),
      rig.click(BOB, card, approve),
      rig.click(DAVE, card, approve),
    ]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    // The very same signed request again, as Slack's retry would send it.
    const replay = await rig.click(BOB, card, approve, {
      payload,
      timestampSec,
      headers: { 'X-Slack-Retry-Num': '1', 'X-Slack-Retry-Reason': 'http_timeout' },
    });
    expect(replay.status).toBe(200);
    await rig.waitEvent(id, 'finished', undefined, 60_000);
    const { events } = await checkRun({ point: null, incidentId: id, target: 'ct129', holders: [h], run });
    expect(ofType(events, 'approval_decided')).toHaveLength(1);
    expect(ofType(events, 'step_started').filter((s) => s.kind === 'host_kill')).toHaveLength(1);
    expect(rig.signalsOf([h.hostPid]).map((s) => s.signal)).toEqual(['SIGKILL']);
    await rig.slack.waitFor(() => responseTexts().length >= n + 3, 10_000);
    expect(
      responseTexts()
        .slice(n)
        .filter((t) => t.startsWith(':white_check_mark: Approved')),
    ).toHaveLength(1);
    await cleanUp([h]);
  }, 120_000);
});

describe('a holder whose memory outlives the release timeout (uninterruptible teardown)', () => {
  it('bounded time, "still in use after N s" in the thread, a reset card; the worker serves another target meanwhile; deny → lock released', async () => {
    const run = startRun();
    // Dies on SIGTERM, but its 50 GiB stay in use until the test ends the teardown: however slow this
    // machine is, the only way the step ends is the 5 s release timeout (not the teardown's end).
    const h = await rig.fleet.spawnHolder('ct130', {
      gpus: [{ index: 4, mib: 50_000 }],
      title: 'python3 train.py',
      dieDelayMs: 24 * 3600_000,
    });
    const r = await rig.slash('unstick ct130');
    const id = String(r.incidentId);
    await rig.waitEvent(id, 'signalled', (e) => e.result === 'sent', 30_000);
    // While that worker waits for the memory, another command is served: the worker picks its job
    // up before the waiting step ends (the log's order, not the test's polling, says so).
    const st = await rig.slash('status ct129');
    expect(st.incidentId).not.toBeNull();
    const stId = String(st.incidentId);
    const picked = await rig.waitEvent(stId, 'started', undefined, 30_000);
    await rig.waitEvent(stId, 'snapshot', (e) => e.label === 'status', 30_000);

    const step = await rig.waitEvent(id, 'step_finished', undefined, 30_000);
    expect(Date.parse(picked.at)).toBeLessThan(Date.parse(step.at));
    // The wait ends at the first poll at or past 5 s (a loaded machine may poll later than that).
    const waited = /GPU memory was still in use after (\d+\.\d) s/.exec(step.message ?? '');
    expect(Number(waited?.[1])).toBeGreaterThanOrEqual(5);
    const req = await rig.waitEvent(id, 'approval_requested', undefined, 30_000);
    expect(req.step.kind).toBe('host_reset');
    // Bounded: the teardown never ended, yet the step finished and asked for the reset.
    expect(rig.fleet.gpuMemory('kpro5')[4]?.usedMiB).toBeGreaterThan(0);
    // In the step's blocks (its plain-text fallback is clipped at 4000 characters, and ~30 memory polls may fill it).
    // The parent is updated after the replies: wait for all three (the parent names what it waits for).
    const t = await rig.thread(
      id,
      (th) =>
        /waiting for a second person/.test(th[0]?.text ?? '') &&
        th.some((m) => buttonsOf(m).length === 2) &&
        th.some((m) => /still in use after \d+\.\d s/.test(JSON.stringify(m.blocks ?? []))),
      20_000,
    );
    expect((await rig.lock.holder('ct130'))?.incidentId).toBe(id);
    const card = t.find((m) => buttonsOf(m).length === 2);
    const deny = buttonsOf(card).find((b) => b.action_id === 'gpu_deny');
    if (!card || !deny) throw new Error('no card');
    expect((await rig.click(BOB, card, deny)).status).toBe(200);
    await rig.waitEvent(id, 'finished', undefined, 30_000);
    await checkRun({ point: null, incidentId: id, target: 'ct130', holders: [h], run });
    expect(rig.signalsOf([h.hostPid]).map((s) => s.signal)).toEqual(['SIGTERM']);
    rig.fleet.endTeardown(h);
    await expect.poll(() => rig.fleet.gpuMemory('kpro5')[4]?.usedMiB, { timeout: 20_000 }).toBe(0);
  }, 120_000);
});
