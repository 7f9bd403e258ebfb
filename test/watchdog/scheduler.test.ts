/**
 * The watchdog on the whole stack (one round per site, however many workers): with GPU_MEDIC_ALERTS_CHANNEL
 * set, each site queue gets one BullMQ job scheduler (however many workers serve the site) producing `watch`
 * rounds every GPU_MEDIC_WATCH_INTERVAL_SEC; an alert reaches the alerts channel as one message, is raised
 * once over many rounds and two worker groups, and is edited in place when it clears.
 */
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { queueName, watchSchedulerId } from '../../src/queue/jobs.ts';
import { startWorkerProcess } from '../../src/worker-process.ts';
import type { WorkerGroup } from '../../workers/index.ts';
import { captureLogger } from '../harness/capture-logger.ts';
import { startStack, type Stack } from '../harness/stack.ts';

const ALERTS = 'C0ALERTS01';

describe("watchdog rounds from the site queues' job schedulers", () => {
  let s: Stack;
  let second: WorkerGroup | null = null;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [
          { id: 'kpro5', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
          { id: 'kpro9', site: 'east', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
        ],
      },
      env: { GPU_MEDIC_ALERTS_CHANNEL: ALERTS, GPU_MEDIC_WATCH_INTERVAL_SEC: '2', GPU_MEDIC_WATCH_GHOST_SEC: '0' },
    });
    // A second worker process on the same sites (as on a second machine).
    second = await startWorkerProcess(s.env, s.inventory, captureLogger('second').logger);
  }, 120_000);
  afterAll(async () => {
    await second?.close(true);
    await s?.stop();
  });

  it('each site queue has exactly one watch scheduler, every interval, after two worker groups started', async () => {
    for (const site of ['default', 'east']) {
      const q = new Queue(queueName(site), { connection: s.redis, prefix: s.prefix });
      try {
        const schedulers = await q.getJobSchedulers();
        expect(schedulers.map((j) => [j.key, j.every])).toEqual([[watchSchedulerId(site), 2000]]);
      } finally {
        await q.close();
      }
    }
  });

  it('high RAM on a host is posted once to the alerts channel over several rounds, and the same message says when it cleared', async () => {
    await s.fleet.setRam('kpro9', { totalGiB: 449, usedGiB: 440 });
    const posted = await s.slack.waitFor(
      () => s.slack.messages(ALERTS).find((m) => /kpro9/.test(m.text ?? '') && /98 %/.test(m.text ?? '')) ?? null,
      60_000,
    );
    // Three more rounds of the east site, by both workers: still the one message.
    const rounds = () => s.fleet.commandLog('kpro9').filter((c) => c.via === 'ssh').length;
    const seen = rounds();
    await s.slack.waitFor(() => (rounds() >= seen + 3 ? true : null), 60_000);
    expect(s.slack.messages(ALERTS).filter((m) => /kpro9/.test(m.text ?? ''))).toHaveLength(1);
    await s.fleet.setRam('kpro9', { totalGiB: 449, usedGiB: 40 });
    const cleared = await s.slack.waitFor(
      () => s.slack.messages(ALERTS).find((m) => m.ts === posted.ts && /Cleared/.test(m.text ?? '')) ?? null,
      60_000,
    );
    expect(cleared.text).toContain('kpro9');
    expect(s.slack.messages(ALERTS).filter((m) => /kpro9/.test(m.text ?? ''))).toHaveLength(1);
    expect(s.fleet.signals()).toEqual([]);
  });
});
