/**
 * `npx tsx bench/ack-builds.ts NAME=path/to/dist/src/main.js …`: the ack figure of several builds
 * side by side in one run (to see each change's effect), so a loaded machine loads them alike.
 * One bot process per build (no worker: its queue has no consumer, as in the main bench's ack pair),
 * each on its own Redis prefix, on the example inventory. Per run, for every build in a rotated
 * order: one burst of C `/gpu status kpro5` at once, then one of C `/gpu help` (the floor). Prints
 * per build the median over runs of each burst's p99 and the ratio status/help. After each build's
 * pair of bursts it waits until that bot's outbox has posted the status burst's thread parents.
 * Options: --concurrent C (default 200), --runs N (default 5).
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { Redis } from 'ioredis';
import { filledExampleInventoryText } from '../test/harness/example-inventory.ts';
import { removePrefix } from '../test/harness/redis-prefix.ts';
import { startFakeSlack } from '../test/harness/slack/fake-slack-api.ts';
import { processCpuMs, rssSplitKiB } from './cpu.ts';
import { freePort, startBuild, type RoleProcess } from './procs.ts';
import { sendAck } from './send-ack.ts';
import { percentile, ratio, summarize } from './stats.ts';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const C = arg('--concurrent', 200);
const RUNS = arg('--runs', 5);
const builds = process.argv
  .slice(2)
  .filter((a) => a.includes('='))
  .map((a) => ({ name: a.slice(0, a.indexOf('=')), main: resolve(a.slice(a.indexOf('=') + 1)) }));
// The bots run in a scratch directory: a relative path is the caller's.

async function main(): Promise<void> {
  if (builds.length === 0) throw new Error('usage: ack-builds.ts NAME=dist/src/main.js …');
  const work = await mkdtemp('/tmp/gpu-medic-ack-builds-');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const slack = await startFakeSlack();
  const bots: Array<{ name: string; bot: RoleProcess; url: string; secret: string; prefix: string }> = [];
  try {
    const inv = join(work, 'inventory.yaml');
    await writeFile(inv, filledExampleInventoryText());
    for (const b of builds) {
      const prefix = `ackb${randomBytes(4).toString('hex')}`;
      const secret = randomBytes(16).toString('hex');
      const port = await freePort();
      const bot = await startBuild(
        b.main,
        'bot',
        {
          REDIS_URL,
          GPU_MEDIC_PREFIX: prefix,
          GPU_MEDIC_INVENTORY: inv,
          LOG_LEVEL: 'info',
          GPU_MEDIC_MODE: 'http',
          SLACK_BOT_TOKEN: slack.botToken,
          SLACK_SIGNING_SECRET: secret,
          SLACK_API_URL: slack.apiUrl,
          PORT: String(port),
        },
        work,
        `${b.name}-bot`,
      );
      bots.push({ name: b.name, bot, url: `http://127.0.0.1:${port}/slack/events`, secret, prefix });
    }
    let channel = 0;
    const burst = async (b: (typeof bots)[number], text: string): Promise<number> => {
      channel += 1;
      const rs = await Promise.all(
        Array.from({ length: C }, () =>
          sendAck(b.url, b.secret, {
            text,
            user_id: 'U0BENCH001',
            channel_id: `C0ACKB${String(channel).padStart(5, '0')}`,
            response_url: slack.newResponseUrl(),
          }),
        ),
      );
      const bad = rs.filter((r) => r.status !== 200);
      if (bad.length > 0)
        throw new Error(
          `${b.name}: ${bad.length} of ${C} "${text}" acks were not 200 (HTTP ${[...new Set(bad.map((r) => r.status))].join(', ')}; slowest ${Math.round(Math.max(...rs.map((r) => r.elapsedMs)))} ms)`,
        );
      return percentile(
        rs.map((r) => r.elapsedMs),
        99,
      );
    };
    interface Figures {
      status: number[];
      help: number[];
      statusCpu: number[];
      helpCpu: number[];
      anonKiB: number;
    }
    const p99 = new Map<string, Figures>(
      bots.map((b) => [b.name, { status: [], help: [], statusCpu: [], helpCpu: [], anonKiB: 0 }]),
    );
    // The bot's own CPU time (user + system) during a burst: what a burst costs it, which the load
    // of a shared machine does not change as it changes wall times.
    const timed = async (b: (typeof bots)[number], text: string): Promise<{ p99: number; cpuMs: number }> => {
      const c0 = processCpuMs(b.bot.pid);
      const p = await burst(b, text);
      return { p99: p, cpuMs: processCpuMs(b.bot.pid) - c0 };
    };
    const load0 = loadavg()[0] ?? 0;
    let posted = slack.calls('chat.postMessage').length;
    for (let run = -1; run < RUNS; run++) {
      for (let k = 0; k < bots.length; k++) {
        const b = bots[(k + Math.max(0, run)) % bots.length];
        if (!b) continue;
        // Alternating order: the burst that follows the other is measured while its outbox posts.
        let s: { p99: number; cpuMs: number };
        let h: { p99: number; cpuMs: number };
        if (run % 2 === 0) {
          s = await timed(b, 'status kpro5');
          h = await timed(b, 'help');
        } else {
          h = await timed(b, 'help');
          s = await timed(b, 'status kpro5');
        }
        const into = p99.get(b.name);
        if (run >= 0 && into) {
          // Run -1 is the warm-up.
          into.status.push(s.p99);
          into.help.push(h.p99);
          into.statusCpu.push(s.cpuMs);
          into.helpCpu.push(h.cpuMs);
          into.anonKiB = Math.max(into.anonKiB, rssSplitKiB(b.bot.pid).anon);
        }
        // Let this bot's outbox post the burst's C thread parents before the next build's burst
        // (a fixed 1.5 s was less than that takes on 2 loaded cores, so one build's posting
        // overlapped the next build's bursts), bounded at 30 s; then 200 ms more.
        const deadline = Date.now() + 30_000;
        while (slack.calls('chat.postMessage').length < posted + C && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 50));
        posted = slack.calls('chat.postMessage').length;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    const out = Object.fromEntries(
      bots.map((b) => {
        const x = p99.get(b.name) ?? { status: [], help: [], statusCpu: [], helpCpu: [], anonKiB: 0 };
        return [
          b.name,
          {
            statusP99Ms: summarize(x.status),
            helpP99Ms: summarize(x.help),
            p99OverHelp: ratio(x.status, x.help),
            botCpuMsPerBurst: { status: summarize(x.statusCpu), help: summarize(x.helpCpu) },
            cpuOverHelp: ratio(x.statusCpu, x.helpCpu),
            peakMiB: Math.round(b.bot.peakKiB() / 102.4) / 10,
            afterBurstAnonMiB: Math.round(x.anonKiB / 102.4) / 10,
          },
        ];
      }),
    );
    process.stdout.write(
      `${JSON.stringify({ concurrent: C, runs: RUNS, loadavg1AtStart: load0, loadavg1AtEnd: loadavg()[0], builds: out }, null, 2)}\n`,
    );
  } finally {
    await Promise.all(bots.map((b) => b.bot.stop().catch(() => undefined)));
    await slack.close();
    for (const b of bots) await removePrefix(redis, b.prefix);
    redis.disconnect();
    await rm(work, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    process.stderr.write(
      `ack-builds failed: ${e instanceof Error ? `${e.stack ?? e.message}\ncause: ${String(e.cause)}` : String(e)}\n`,
    );
    process.exit(1);
  },
);
