/**
 * Root causes in the status thread (a thread says why, not only what): the worker reads the GPU holders'
 * command lines (and their parents') on the machine, and the thread says why in plain words, against the RAM
 * and GPUs of the same snapshot. Real sshd, real processes, real Redis and Bolt; fake Slack.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { startStack, type Stack } from '../harness/stack.ts';

/** The seed incident's launch (../shared/seeds/000_*.txt), as /proc shows it. */
const SEED =
  'python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300 --hicache-write-policy write_through --hicache-io-backend kernel';
const SEED_WHY =
  '8 ranks × 300 GB host cache (`--hicache-size` is per rank) = 2.4 TB requested on a 449 GiB host: more than its RAM.';

describe('root causes in the status thread', () => {
  let s: Stack;
  let log: IncidentLog;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [
          { id: 'kpro5', gpus: 8, ramTotalGiB: 449, ramUsedGiB: 439 },
          { id: 'kpro6', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
          { id: 'kpro7', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
        ],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
    });
    log = new IncidentLog(s.redis, s.prefix);
  });
  afterAll(async () => {
    await s?.stop();
  });

  async function status(machine: string): Promise<{ thread: StoredMessage[]; events: AnyLoggedEvent[] }> {
    const r = await s.slash(`status ${machine}`);
    expect(r.incidentId, r.ackText).not.toBeNull();
    const thread = await s.threadOf(r.incidentId as string, {
      timeoutMs: 60_000,
      done: (t) => /done|partial|failed/i.test(t[0]?.text ?? '') && t.length > 1,
    });
    return { thread, events: await log.events(r.incidentId as string) };
  }

  it('the seed: ranks of a container on a 449 GiB host at 98 % → the per-rank host cache sentence, and no command line in the log', async () => {
    await s.fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 96413 }], title: SEED });
    await s.fleet.spawnHolder('ct129', { gpus: [{ index: 2, mib: 96417 }], title: SEED });
    const { thread, events } = await status('ct129');
    const reply = thread[1];
    expect(reply?.text).toContain(`Why: ${SEED_WHY}`);
    // Said once although two holders show the same launch.
    expect(reply?.text.split(SEED_WHY)).toHaveLength(2);
    const snap = events.find((e): e is Extract<AnyLoggedEvent, { type: 'snapshot' }> => e.type === 'snapshot');
    expect(snap?.snapshot.rootCauses?.map((c) => c.kind)).toEqual(['host_memory_over_ram', 'gpu_fraction_high']);
    expect(JSON.stringify(events)).not.toContain('kimi-k2.5-int4');
  });

  it('a host view: its compute apps are read by host PID, and a hostile command line changes nothing but what it shows', async () => {
    const hostile = `${SEED} --served-model-name \`reboot\` <!channel> <@U0ALICE> ${'z'.repeat(3000)}`;
    await s.fleet.spawnHolder('kpro6', { gpus: [{ index: 0, mib: 4096 }], title: hostile });
    const { thread } = await status('kpro6');
    const reply = thread[1];
    expect(reply?.text).toContain(`Why: ${SEED_WHY}`);
    expect(reply?.text).toContain('Why: `--tp-size` 8 asks for 8 GPUs, and this machine sees 2.');
    for (const m of thread)
      expect(`${m.text} ${JSON.stringify(m.blocks)}`).not.toMatch(/<!channel>|<@U0ALICE>|`reboot`/);
  });

  it('an unknown program gets no guess: no Why line', async () => {
    await s.fleet.spawnHolder('kpro7', {
      gpus: [{ index: 1, mib: 4096 }],
      title: 'python3 train.py --tp-size 8 --enable-hierarchical-cache --hicache-size 300',
    });
    const { thread } = await status('kpro7');
    expect(thread[1]?.text).toContain('RAM: 40 / 449 GiB');
    expect(thread.map((m) => m.text).join('\n')).not.toContain('Why');
  });
});
