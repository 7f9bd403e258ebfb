/**
 * Seeded fuzz of the Alertmanager receiver through the running bot (its own port, real Redis, the
 * sshd fleet and real workers): payloads that are not JSON, not the payload's shape, of an unknown
 * version, too large, with a missing or wrong token, and valid payloads whose labels and annotations
 * carry shell text, Slack markup and near-miss machine names. Every case gets one of the documented
 * answers; no job is queued and no command reaches the fleet; no Slack message holds a live mention.
 */
import fc from 'fast-check';
import { startStack, type Stack } from '../../harness/stack.ts';
import { freePort } from '../../harness/monitoring.ts';
import { commandsOutsideTemplates } from '../lib/allow-list.ts';

const TOKEN = 'fuzz-am-token-0123456789abcdef01234567';
const MACHINES = ['kpro5', 'ct129'];
const HOSTILE = [
  '$(reboot)',
  '`id`',
  '; rm -rf /',
  '<!channel>',
  '<@U0ALICE001>',
  '*bold*',
  '\n',
  '|',
  '&&',
  'kpro5;',
  'KPRO5',
  'ct129 ',
  '\u202e',
];

const text = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.constantFrom(...HOSTILE, ...MACHINES),
  fc.array(fc.constantFrom(...HOSTILE, ...MACHINES, 'a', ' '), { maxLength: 8 }).map((a) => a.join('')),
);
const alert = fc.record({
  status: fc.constantFrom('firing', 'resolved', 'pending', ''),
  labels: fc.dictionary(
    fc.constantFrom('alertname', 'Hostname', 'instance', 'gpu', 'UUID', 'gpu_medic_kind', 'x'),
    text,
  ),
  annotations: fc.dictionary(fc.constantFrom('summary', 'description'), text),
  startsAt: fc.constantFrom('2026-12-01T10:00:00Z', 'not a time', ''),
  endsAt: fc.constantFrom('0001-01-01T00:00:00Z', '2026-12-01T11:00:00Z'),
  generatorURL: fc.oneof(text, fc.constantFrom('javascript:alert(1)', 'http://p:9090/graph?x=<a>|b')),
  fingerprint: fc.oneof(fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 1, maxLength: 16 }), text),
});

export type AmCase = { token: string | null; body: string };

export function alertmanagerCases(seed: number, n: number): AmCase[] {
  const body = fc.oneof(
    {
      weight: 6,
      arbitrary: fc
        .array(alert, { maxLength: 4 })
        .map((alerts) => JSON.stringify({ version: '4', status: 'firing', alerts })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom('3', 4, null, '5')
        .map((v) => JSON.stringify({ version: v, status: 'firing', alerts: [] })),
    },
    { weight: 1, arbitrary: fc.string({ maxLength: 200 }) },
    { weight: 1, arbitrary: fc.anything().map((v) => JSON.stringify(v) ?? 'null') },
    {
      weight: 1,
      arbitrary: fc.constant(
        JSON.stringify({ version: '4', status: 'firing', alerts: [], pad: 'x'.repeat(1_100_000) }),
      ),
    },
  );
  const token = fc.oneof(
    { weight: 8, arbitrary: fc.constant(TOKEN) },
    { weight: 1, arbitrary: fc.constant(null) },
    {
      weight: 1,
      // A header carries only visible ASCII (fetch refuses anything else before sending).
      arbitrary: text.map((t) => t.replace(/[^\x21-\x7e]/g, '?')),
    },
  );
  return fc.sample(fc.record({ token, body }), { seed, numRuns: n });
}

export async function fuzzAlertmanager(o: {
  seed: number;
  cases: number;
}): Promise<{ failures: string[]; statuses: Record<number, number>; recorded: number }> {
  const port = await freePort();
  const s: Stack = await startStack({
    fleet: {
      hosts: [{ id: 'kpro5', gpus: 1 }],
      containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
    },
    botEnv: {
      GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01',
      GPU_MEDIC_ALERTMANAGER_TOKEN: TOKEN,
      GPU_MEDIC_ALERTMANAGER_PORT: String(port),
    },
  });
  const failures: string[] = [];
  const statuses: Record<number, number> = {};
  try {
    for (const [i, c] of alertmanagerCases(o.seed, o.cases).entries()) {
      let r: Response;
      try {
        r = await fetch(`http://127.0.0.1:${port}/alertmanager`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            ...(c.token === null ? {} : { authorization: `Bearer ${c.token}` }),
          },
          body: c.body,
        });
      } catch (err) {
        failures.push(`case ${i}: no answer (${String(err)})`);
        continue;
      }
      const body = await r.text();
      statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      const expected = c.token !== TOKEN ? [401] : [200, 400, 413, 503];
      if (!expected.includes(r.status)) failures.push(`case ${i}: answered ${r.status} (${body.slice(0, 200)})`);
      if (r.status === 503 && !r.headers.get('retry-after'))
        failures.push(`case ${i}: 503 without Retry-After (${body.slice(0, 200)})`);
      try {
        JSON.parse(body);
      } catch {
        failures.push(`case ${i}: the answer is not JSON: ${body.slice(0, 100)}`);
      }
      // Paced under the rate bound (20/s), so that the cases are judged rather than rate-limited.
      await new Promise((res) => setTimeout(res, 55));
    }
    await new Promise((res) => setTimeout(res, 1500));
    await s.quiet({ timeoutMs: 30_000 });
    const outside = commandsOutsideTemplates(s.fleet, MACHINES);
    if (outside.length > 0) failures.push(`commands outside the templates: ${JSON.stringify(outside).slice(0, 500)}`);
    const ran = MACHINES.reduce((n, m) => n + s.fleet.commandLog(m).length, 0);
    if (ran > 0) failures.push(`${ran} commands reached the fleet from alerts alone`);
    for (const m of s.slack.messages('C0ALERTS01')) {
      const all = `${m.text}\n${JSON.stringify(m.blocks ?? [])}`;
      if (/<!channel>|<@U0ALICE001>|<javascript:/.test(all))
        failures.push(`a live mention or link in ${m.ts}: ${all.slice(0, 300)}`);
    }
    const recorded = await s.redis.zcard(`${s.prefix}:incidents`);
    return { failures, statuses, recorded };
  } finally {
    await s.stop();
  }
}
