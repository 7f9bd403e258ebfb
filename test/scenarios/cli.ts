/**
 * `npm run -s scenario -- FILE [--pretty] [--quiet]`: runs one scenario end to end and prints its
 * JSON report on stdout (progress on stderr unless --quiet). Exit 0 whenever the run itself
 * worked, even if the bot did the wrong thing (the report shows that); 1 when the run broke
 * (bad file, fleet or stack did not start, harness error); 2 on bad usage.
 */
import { runScenario } from './run-scenario.ts';

const args = process.argv.slice(2);
const files = args.filter((a) => !a.startsWith('--'));
const pretty = args.includes('--pretty');
const quiet = args.includes('--quiet');

if (files.length !== 1 || args.includes('--help') || args.includes('-h')) {
  process.stderr.write('usage: npm run -s scenario -- FILE.yaml [--pretty] [--quiet]\n');
  process.exit(files.length === 1 ? 0 : 2);
}

const file = files[0] ?? '';
const report = await runScenario(file, { log: quiet ? undefined : (l) => process.stderr.write(`[scenario] ${l}\n`) });
process.stdout.write(`${JSON.stringify(report, null, pretty ? 2 : undefined)}\n`);
if (report.broken)
  process.stderr.write(`[scenario] the run broke (${report.broken.stage}): ${report.broken.message.split('\n')[0]}\n`);
else if (!quiet) {
  const failed = report.expectations.filter((e) => !e.ok);
  process.stderr.write(
    `[scenario] done: ${report.incidents.length} incident(s), ${report.signals.length} signal(s), ${failed.length} of ${report.expectations.length} expectation(s) not met\n`,
  );
}
// Handles (ioredis, sockets) are closed by stop(); exit explicitly so a straggler cannot keep us alive.
process.exit(report.broken ? 1 : 0);
