/**
 * Seeded fuzz of the slash-command text: shell metacharacters, quotes, newlines, unicode, 4,000
 * characters, near-miss machine names. Most cases go to the real handler `handleSlash` with real
 * deps on real Redis (fast); a few hundred through the real Bolt receiver, signed. Every case must
 * get a non-empty ephemeral answer; afterwards every machine's command log holds only commands
 * of the fixed templates.
 */
import { captureLogger } from '../../harness/capture-logger.ts';
import fc from 'fast-check';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { handleSlash } from '../../../commands/index.ts';
import { SnoozeStore } from '../../../src/watch-store/snooze-store.ts';
import type { CommandDeps } from '../../../commands/deps.ts';
import { ApprovalStore } from '../../../src/approval/approval-store.ts';
import { newIncidentId } from '../../../src/incident/ids.ts';
import { IncidentLog } from '../../../src/incident/log.ts';
import { TargetLock } from '../../../src/incident/target-lock.ts';
import { createDispatcher } from '../../../src/queue/dispatcher.ts';
import { queueName } from '../../../src/queue/jobs.ts';
import { startStack, type Stack } from '../../harness/stack.ts';
import { commandsOutsideTemplates } from '../lib/allow-list.ts';
import { checker, emptyFigures, mergeFigures, pollUntil, type Figures } from '../lib/figures.ts';
import { finalChecks } from './requests.ts';

export interface FuzzOptions {
  seed: number;
  /** Cases through handleSlash. */
  cases: number;
  /** Cases through the signed Bolt receiver. */
  viaBolt: number;
}

const MACHINES = ['kpro5', 'kpro7', 'ct129', 'ct130'];
const META = [
  ';',
  '|',
  '&',
  '&&',
  '||',
  '$(',
  ')',
  '`',
  '$',
  '{',
  '}',
  '>',
  '<',
  '>>',
  '*',
  '?',
  '[',
  ']',
  '~',
  '!',
  '#',
  '\\',
  "'",
  '"',
  '\n',
  '\r',
  '\t',
  '\0',
  '%',
  '=',
  ',',
];
const WORDS = [
  'reboot',
  'rm -rf /',
  'nvidia-smi -r',
  'kill -9 1',
  'cat /etc/shadow',
  '<!channel>',
  '<@U0REQUEST1>',
  '*bold*',
  'aLl;',
  'help',
  '--help',
  '-h',
  '-all',
  'all;',
  'all*',
];

/** Near misses of a real name: case, one edit, homoglyphs, metacharacter suffixes, padding. */
function nearMiss(name: string): fc.Arbitrary<string> {
  // The exact name (in capitals) is rare on purpose: every valid case becomes a real job on the fleet.
  return fc.oneof(
    { weight: 1, arbitrary: fc.constant(name.toUpperCase()) },
    { weight: 6, arbitrary: fc.nat({ max: name.length - 1 }).map((i) => name.slice(0, i) + name.slice(i + 1)) },
    {
      weight: 6,
      arbitrary: fc
        .tuple(fc.nat({ max: name.length }), fc.constantFrom('0', '5', 'x', '-', '.', '_'))
        .map(([i, c]) => name.slice(0, i) + c + name.slice(i)),
    },
    {
      weight: 6,
      arbitrary: fc.constantFrom(
        name.replace('o', 'о'),
        name.replace('c', 'с'),
        name.replace('p', 'р'),
        `${name}\u200b`,
        `\u202e${name}`,
        `${name}\u0301`,
      ),
    },
    {
      weight: 6,
      arbitrary: fc.tuple(fc.constantFrom(...META), fc.constantFrom(...WORDS)).map(([m, w]) => `${name}${m}${w}`),
    },
    {
      weight: 6,
      arbitrary: fc.constantFrom(
        `"${name}"`,
        `'${name}'`,
        `${name}/`,
        `../${name}`,
        `${name}:22`,
        `root@${name}`,
        `${name}.local`,
      ),
    },
  );
}

function caseArb(): fc.Arbitrary<string> {
  const sub = fc.constantFrom(
    'status',
    'unstick',
    'help',
    'STATUS',
    'Status',
    'stat',
    'unstik',
    'statu',
    'reboot',
    '',
    'status;',
    '$(status)',
  );
  const sep = fc.constantFrom(' ', '  ', '\n', '\t', '\u00a0', '\u3000', ' \r\n ');
  const target = fc.oneof(
    fc.constantFrom(...MACHINES).chain(nearMiss),
    fc.constantFrom(...WORDS),
    fc.string({ unit: fc.constantFrom(...META, 'a', 'k', '5'), maxLength: 12 }),
  );
  const tail = fc.oneof(
    fc.constant(''),
    fc.string({ unit: 'binary', maxLength: 60 }),
    fc.string({ unit: fc.constantFrom(...META, ' ', 'x'), maxLength: 40 }),
  );
  return fc.oneof(
    { weight: 6, arbitrary: fc.tuple(sub, sep, target, sep, tail).map(([a, b, c, d, e]) => `${a}${b}${c}${d}${e}`) },
    { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
    { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(...META, ' ', 'status', 'kpro5'), maxLength: 80 }) },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min: 3990, max: 4000 })
        .chain((n) => fc.string({ unit: fc.constantFrom(...META, 'a', 'é', '😀', ' '), minLength: n, maxLength: n })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(...MACHINES)
        .chain((m) => fc.tuple(fc.constantFrom('status ', 'unstick '), nearMiss(m)).map(([a, b]) => a + b)),
    },
  );
}

/** The seeded cases (same seed → same cases). */
export function fuzzCases(seed: number, n: number): string[] {
  return fc.sample(caseArb(), { seed, numRuns: n });
}

const MENTION = /<!(channel|here|everyone)>|<!subteam/;

function judge(text: string, answer: string, check: (ok: boolean, what: string) => boolean, label: string): void {
  check(answer.trim().length > 0, `${label}: empty answer for ${JSON.stringify(text.slice(0, 80))}`);
  check(
    !MENTION.test(answer),
    `${label}: the answer to ${JSON.stringify(text.slice(0, 80))} pings a group: ${answer.slice(0, 120)}`,
  );
}

export async function fuzz(o: FuzzOptions): Promise<Figures> {
  let f = emptyFigures();
  const check = checker(f);
  f.runs++;
  const s: Stack = await startStack({
    fleet: {
      hosts: [
        { id: 'kpro5', gpus: 2 },
        { id: 'kpro7', gpus: 1 },
      ],
      containers: [
        { id: 'ct129', vmid: 129, host: 'kpro5' },
        { id: 'ct130', vmid: 130, host: 'kpro7', ownAddress: true },
      ],
    },
    tweakInventory: (inv) => {
      inv.defaults.commandTimeoutSec = 5;
    },
  });
  const fast = new Redis(s.env.REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  fast.on('error', () => undefined);
  await pollUntil(() => fast.status === 'ready', 5000);
  const dispatcher = createDispatcher({ connection: fast, prefix: s.prefix });
  const handlerLog = captureLogger('fuzz', 'info');
  const deps: CommandDeps = {
    inventory: s.inventory,
    log: new IncidentLog(fast, s.prefix),
    dispatcher,
    policy: { allowedChannels: [], allowedUsers: [], approvers: [] },
    now: () => new Date(),
    newIncidentId: () => newIncidentId(new Date()),
    logger: handlerLog.logger,
    lock: new TargetLock(fast, s.prefix),
    approvals: new ApprovalStore(fast, s.prefix),
    lockTtlMs: 60_000,
    alertsChannel: null,
    snoozes: new SnoozeStore(fast, s.prefix),
    signer: s.signer,
  };
  try {
    const t0 = Date.now();
    const cases = fuzzCases(o.seed, o.cases + o.viaBolt);
    const phases: Record<string, number> = { generate: Date.now() - t0 };
    let queued = 0;
    for (const [i, text] of cases.slice(0, o.cases).entries()) {
      let answer: string;
      try {
        answer = await handleSlash({ text, userId: 'U0FUZZ0001', channelId: 'C0ONCALL01' }, deps);
      } catch (e) {
        check(false, `case ${i}: handleSlash threw for ${JSON.stringify(text.slice(0, 80))}: ${(e as Error).message}`);
        continue;
      }
      f.badInputsTried++;
      if (/incident `inc_/.test(answer)) queued++;
      judge(text, answer, check, `case ${i}`);
    }
    phases.handler = Date.now() - t0 - (phases.generate ?? 0);
    for (const [i, text] of cases.slice(o.cases).entries()) {
      const r = await s.slash(text, { user: 'U0FUZZ0002' });
      f.badInputsTried++;
      f.ackMs.push(r.elapsedMs);
      if (r.incidentId) queued++;
      check(
        r.status === 200 && (r.json as { response_type?: string } | undefined)?.response_type === 'ephemeral',
        `bolt case ${i}: ${r.status} ${r.body.slice(0, 120)} for ${JSON.stringify(text.slice(0, 80))}`,
      );
      judge(text, r.ackText, check, `bolt case ${i}`);
    }
    // Let every job that was queued run to the end, then read the machines' logs.
    const queue = new Queue(queueName('default'), { connection: s.redis, prefix: s.prefix });
    const drained = await pollUntil(
      async () => {
        const c = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized');
        return Object.values(c).every((n) => n === 0);
      },
      120_000,
      200,
    );
    await queue.close();
    phases.total = Date.now() - t0;
    if (process.env.GPU_MEDIC_FUZZ_DEBUG) console.log('fuzz phases (ms)', phases, 'queued', queued);
    check(drained !== null, 'the queue did not drain within 120 s');
    const ran = MACHINES.reduce((n, m) => n + s.fleet.commandLog(m).length, 0);
    check(
      queued === 0 || ran > 0,
      `fuzz: ${queued} cases were queued but no command reached the fleet (the proof would be empty)`,
    );
    const outside = commandsOutsideTemplates(s.fleet, MACHINES);
    f.badInputsReachedShell += outside.length;
    check(outside.length === 0, `fuzz: commands outside the templates: ${JSON.stringify(outside.slice(0, 5))}`);
    (f as Figures & { queued?: number }).queued = queued;
    f = mergeFigures(f, await finalChecks(s, MACHINES, { 'fuzz handler logs': handlerLog.text() }));
    // mergeFigures counted the template proof twice in the worst case; keep the larger, not the sum.
    f.badInputsReachedShell = Math.max(outside.length, f.badInputsReachedShell - outside.length);
  } finally {
    await dispatcher.close();
    fast.disconnect();
    await s.stop();
  }
  return f;
}
