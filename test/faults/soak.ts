/**
 * `npm run soak`: the fault suite with long settings, printing one table of figures.
 *
 *   npm run soak                      # one round: 60 s Slack outage, 50 machines, 50,000 fuzz cases, 3 Redis restarts
 *   npm run soak -- --rounds 3        # repeat everything (figures add up)
 *   npm run soak -- --quick           # CI-sized settings (a couple of minutes)
 *   npm run soak -- --seed 42         # another fuzz seed (default: the CI seed)
 *   npm run soak -- --only fuzz,load  # a subset: requests, clock, redis, failover, slack, ssh, fuzz, load, crash, botcrash
 *
 * Exits 1 when any scenario reported a failure (each is printed under the table).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { emptyFigures, figuresTable, mergeFigures, type Figures } from './lib/figures.ts';
import { load } from './scenarios/load.ts';
import { fuzz } from './scenarios/fuzz.ts';
import { redisRestart } from './scenarios/redis-restart.ts';
import { botCrash } from './scenarios/bot-crash.ts';
import { failover } from './scenarios/failover.ts';
import {
  clockSkewFaults,
  finalChecks,
  interactionFaults,
  policyFaults,
  REQUEST_MACHINES,
  signedRequestFaults,
  startRequestsStack,
} from './scenarios/requests.ts';
import { slackFaults } from './scenarios/slack-faults.ts';
import { sshFaults } from './scenarios/ssh-faults.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '1' },
    quick: { type: 'boolean', default: false },
    seed: { type: 'string', default: '20261130' },
    only: { type: 'string', default: 'requests,clock,redis,failover,slack,ssh,fuzz,load,crash,botcrash' },
  },
});
const rounds = Math.max(1, Math.min(100, Number(values.rounds)));
const quick = values.quick === true;
const only = new Set(String(values.only).split(','));
const seed = Number(values.seed);

const notes: string[] = [];

type Scenario = { name: string; run: (round: number) => Promise<Figures> };

const scenarios: Scenario[] = [
  {
    name: 'requests',
    async run() {
      const s = await startRequestsStack();
      try {
        let f = await signedRequestFaults(s, { rounds: quick ? 3 : 25 });
        f = mergeFigures(f, await policyFaults(s));
        f = mergeFigures(f, await interactionFaults(s));
        return mergeFigures(f, await finalChecks(s, REQUEST_MACHINES));
      } finally {
        await s.stop();
      }
    },
  },
  {
    // Signed requests dated outside |now − ts| ≤ 300 s, and fresh ones to bots whose clock is an hour off.
    name: 'clock',
    async run() {
      const s = await startRequestsStack();
      try {
        let sent = 0;
        let refused = 0;
        let f = emptyFigures();
        for (let i = 0; i < (quick ? 1 : 5); i++) {
          const r = await clockSkewFaults(s);
          sent += r.skewedSent;
          refused += r.skewedRefused;
          f = mergeFigures(f, r);
        }
        notes.push(
          `clock: skewed-clock requests refused: ${refused} of ${sent} (401 like a stale one; nothing opened)`,
        );
        return f;
      } finally {
        await s.stop();
      }
    },
  },
  {
    name: 'redis',
    run: () =>
      redisRestart(
        quick
          ? { outages: 2, outageMs: 2500, inFlight: 4, duringOutage: 4 }
          : { outages: 3, outageMs: 15_000, inFlight: 10, duringOutage: 10 },
      ),
  },
  {
    // A private primary, replica and three sentinels; the primary SIGKILLed mid-incident.
    name: 'failover',
    async run() {
      const f = await failover({ failovers: 1, inFlight: quick ? 4 : 10, duringFailover: quick ? 4 : 10 });
      notes.push(
        `failover: failovers survived: ${f.failoversSurvived} of ${f.runs}; sentinels elected a new primary in ${f.failoverMs.map((ms) => (ms / 1000).toFixed(1)).join(', ') || '-'} s`,
      );
      return f;
    },
  },
  {
    // A real bot process SIGKILLed before a post, after it (ts not recorded), and after the record.
    name: 'botcrash',
    async run() {
      const f = await botCrash({ messages: quick ? [1, 3] : [1, 2, 3, 4], runs: quick ? 1 : 2 });
      notes.push(`botcrash: ${f.crashes} bot crashes; messages duplicated after bot crashes: ${f.duplicates}`);
      return f;
    },
  },
  {
    name: 'slack',
    run: () =>
      slackFaults(
        quick
          ? { incidentsPerPhase: 4, burst: 3, outageMs: 8000, settleMs: 60_000 }
          : { incidentsPerPhase: 12, burst: 6, outageMs: 60_000, settleMs: 150_000 },
      ),
  },
  { name: 'ssh', run: () => sshFaults({ rounds: quick ? 1 : 3, connectTimeoutSec: 2, commandTimeoutSec: 2 }) },
  { name: 'fuzz', run: (r) => fuzz({ seed: seed + r, cases: quick ? 10_000 : 50_000, viaBolt: quick ? 300 : 1000 }) },
  {
    // Part B: a real worker process SIGKILLed at each step of an unstick, run by vitest (its own
    // assertions) with SOAK_RUNS per crash point; the file leaves its counts for this table.
    name: 'crash',
    async run() {
      const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-soak-crash-'));
      const figuresPath = join(dir, 'figures.json');
      const f = emptyFigures();
      try {
        const r = spawnSync('npx', ['vitest', 'run', 'test/faults/unstick-crash.test.ts', '--reporter=dot'], {
          env: { ...process.env, SOAK_RUNS: quick ? '2' : '5', GPU_MEDIC_CRASH_FIGURES: figuresPath },
          stdio: ['ignore', 'inherit', 'inherit'],
          timeout: 60 * 60_000,
        });
        let tally: Record<string, { runs: number; killedTwice: number; outsideBound: number; eventsLost: number }> = {};
        try {
          tally = JSON.parse(readFileSync(figuresPath, 'utf8')) as typeof tally;
        } catch {
          f.failures.push('the crash runs left no figures');
        }
        for (const t of Object.values(tally)) {
          f.runs += t.runs;
          f.faultsInjected += t.runs;
          f.killsExecutedTwice += t.killedTwice;
          f.signalsOutsideBound += t.outsideBound;
          f.eventsLost += t.eventsLost;
        }
        if (r.status !== 0) f.failures.push(`unstick-crash.test.ts exited ${r.status ?? r.signal}`);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
      return f;
    },
  },
  {
    name: 'load',
    async run() {
      const machines = quick ? 12 : 50;
      const f = await load({
        machines,
        burst: 200,
        statusAll: quick ? 3 : 5,
        drainMs: quick ? 90_000 : 300_000,
        ackWithinMs: 3000,
      });
      notes.push(
        `load: ${machines} machines; SSH logins per host ${Math.min(...f.logins)}..${Math.max(...f.logins)}; at most ${f.peakConnections} connection(s) and ${f.peakChannels} channels at once on one host (pool limit 8, sshd MaxSessions 10)`,
      );
      return f;
    },
  },
];

const rows: Array<{ name: string; f: Figures; seconds: number }> = [];
for (const sc of scenarios.filter((x) => only.has(x.name))) {
  let f = emptyFigures();
  const t0 = Date.now();
  for (let r = 0; r < rounds; r++) {
    process.stderr.write(`soak: ${sc.name} round ${r + 1}/${rounds}…\n`);
    try {
      f = mergeFigures(f, await sc.run(r));
    } catch (e) {
      f.failures.push(`${sc.name} round ${r + 1} crashed: ${(e as Error).stack ?? String(e)}`);
    }
  }
  rows.push({ name: sc.name, f, seconds: (Date.now() - t0) / 1000 });
  process.stderr.write(
    `soak: ${sc.name} done in ${((Date.now() - t0) / 1000).toFixed(1)} s, ${f.failures.length} failures\n`,
  );
}

console.log(
  `\ngpu-medic soak (${quick ? 'quick' : 'full'} settings, ${rounds} round${rounds > 1 ? 's' : ''}, fuzz seed ${seed})\n`,
);
console.log(figuresTable(rows));
for (const n of notes) console.log(`\n${n}`);
const failures = rows.flatMap((r) => r.f.failures.map((x) => `${r.name}: ${x}`));
if (failures.length > 0) {
  console.log(`\n${failures.length} failure(s):`);
  for (const x of failures.slice(0, 50)) console.log(`- ${x}`);
}
process.exit(failures.length > 0 ? 1 : 0);
