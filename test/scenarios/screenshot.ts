/**
 * `npx tsx test/scenarios/screenshot.ts [FILE] [OUT.png] [WIDTHxHEIGHT]`: plays a scenario's fleet in the demo (the
 * real bot, worker, Redis and our fake Slack), types its command steps, delivers its `alertmanager:`
 * notifications, waits for its alert conditions, waits until the alerts channel and every thread have
 * settled, and takes a screenshot of the demo page with headless Chromium (Debian's `chromium`, with
 * a fresh profile and no background networking). Regenerates the pictures the README shows.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startDemo } from './demo-server.ts';
import { loadScenario } from './schema.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const file = process.argv[2] ?? join(HERE, 'demo-seed-incident.yaml');
const out = process.argv[3] ?? join(HERE, '../../docs/demo-alert.png');
const size = process.argv[4] ?? '1500x1250';
if (!/^\d{3,4}x\d{3,4}$/.test(size)) throw new Error(`window size must be WIDTHxHEIGHT, e.g. 1500x900 (got ${size})`);
const scenario = loadScenario(file);
const demo = await startDemo(scenario);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
try {
  for (const st of scenario.steps) {
    if ('wait' in st) await sleep(st.wait);
    if ('command' in st) await demo.command(st.as, st.command);
    if ('alertmanager' in st) {
      const r = await demo.runtime.alertmanager(st.alertmanager.alerts);
      if (r.status !== 200) throw new Error(`alertmanager: the bot answered ${r.status}: ${r.body}`);
    }
    // An alert condition (the watchdog raised it first): waited for as the suite does.
    if ('waitFor' in st && typeof st.waitFor !== 'string' && 'alert' in st.waitFor)
      if (!(await demo.runtime.waitFor(st.waitFor, null, st.timeout ?? 60_000)))
        throw new Error(`waitFor ${JSON.stringify(st.waitFor)}: not reached`);
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
  const profile = mkdtempSync(join(tmpdir(), 'gpu-medic-shot-'));
  await promisify(execFile)(
    'chromium',
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      `--user-data-dir=${profile}`,
      '--hide-scrollbars',
      `--screenshot=${out}`,
      `--window-size=${size.replace('x', ',')}`,
      '--virtual-time-budget=4000',
      demo.url,
    ],
    { timeout: 60_000 },
  ).finally(() => rmSync(profile, { recursive: true, force: true }));
  process.stdout.write(`screenshot: ${out}\n`);
} finally {
  await demo.close();
}
