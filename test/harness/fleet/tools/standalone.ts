/**
 * A served fake tool as its own Node process: `node standalone.mjs TOOL [ARG...]` with
 * FLEET_MACHINE_DIR set. The fleet uses the tool server instead (a Node start per call costs
 * ~85 ms of CPU); this entry is the reference the server's answers are checked against.
 */
import { hangForever, machineContext } from './machine-context.ts';
import { isServedTool, runTool } from './run-tool.ts';

const [name, ...argv] = process.argv.slice(2);
if (name === undefined || !isServedTool(name)) {
  process.stderr.write(`fleet standalone tool: unknown tool ${name ?? ''}\n`);
  process.exit(255);
}
const r = runTool(name, argv, machineContext());
if (r === 'hang') await hangForever();
else {
  process.stdout.write(r.stdout);
  process.stderr.write(r.stderr);
  process.exitCode = r.exitCode;
}
