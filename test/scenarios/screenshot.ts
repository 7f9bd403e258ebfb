/**
 * `npx tsx test/scenarios/screenshot.ts [FILE] [OUT.png]`: plays a scenario's fleet in the demo (the
 * real bot, worker, Redis and our fake Slack), types its command steps, waits until the alerts
 * channel and every thread have settled, and takes a screenshot of the demo page with headless
 * Chromium (Debian's `chromium`). Regenerates the picture the README shows.
 */
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startDemo } from './demo-server.ts';
import { loadScenario } from './schema.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const file = process.argv[2] ?? join(HERE, 'demo-seed-incident.yaml');
const out = process.argv[3] ?? join(HERE, '../../docs/demo-alert.png');
const scenario = loadScenario(file);
const demo = await startDemo(scenario);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
try {
  for (const st of scenario.steps) {
    if ('wait' in st) await sleep(st.wait);
    if ('command' in st) await demo.command(st.as, st.command);
  }
  // Settled: no message changed for 5 s, and the alerts channel has something to show.
  let last = '';
  let stableSince = Date.now();
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const s = demo.state();
    const sig = JSON.stringify([
      s.alerts.map((m) => [m.text, m.edits]),
      s.threads.map((t) => [t.parent.text, t.replies.length]),
    ]);
    if (sig !== last) {
      last = sig;
      stableSince = Date.now();
    } else if (Date.now() - stableSince > 5000 && s.alerts.length > 0) break;
    await sleep(500);
  }
  await promisify(execFile)(
    'chromium',
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--hide-scrollbars',
      `--screenshot=${out}`,
      '--window-size=1500,1900',
      '--virtual-time-budget=4000',
      demo.url,
    ],
    { timeout: 60_000 },
  );
  process.stdout.write(`screenshot: ${out}\n`);
} finally {
  await demo.close();
}
