/**
 * Fake `lxc-info -n <vmid> [-p] [-s] [-H]` on a host: the container's init PID (host PID) and
 * state, as lxc-info prints them (`%-15s` labels; `-H` prints bare values).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { appendToolLog, procStartTime, readJson } from '../state.ts';
import { machineContext } from './machine-context.ts';

const argv = process.argv.slice(2);
const ctx = machineContext();
appendToolLog(ctx.dir, 'lxc-info', argv);

let name: string | null = null;
const want: Array<'pid' | 'state'> = [];
let raw = false;
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '-n' || a === '--name') name = argv[++i] ?? null;
  else if (a?.startsWith('--name=')) name = a.slice(7);
  else if (a === '-p' || a === '--pid') want.push('pid');
  else if (a === '-s' || a === '--state') want.push('state');
  else if (a === '-H' || a === '--no-humanize') raw = true;
  else {
    process.stderr.write(`fake lxc-info: unsupported option ${a ?? ''}\n`);
    process.exit(1);
  }
}
const recPath = join(ctx.info.hostDir, 'containers', `${name ?? ''}.json`);
if (name === null || !existsSync(recPath)) {
  process.stderr.write(`${name ?? ''} doesn't exist\n`);
  process.exit(1);
}
const rec = readJson<{ dir: string }>(recPath);
const initPath = join(rec.dir, 'init.json');
const init = existsSync(initPath) ? readJson<{ hostPid: number; startTime: number }>(initPath) : null;
const running = init !== null && procStartTime('/proc', init.hostPid) === init.startTime;
if (want.length === 0) want.push('state', 'pid');
let out = '';
for (const w of want) {
  if (w === 'state')
    out += raw ? `${running ? 'RUNNING' : 'STOPPED'}\n` : `${'State:'.padEnd(15)} ${running ? 'RUNNING' : 'STOPPED'}\n`;
  if (w === 'pid' && running && init !== null)
    out += raw ? `${init.hostPid}\n` : `${'PID:'.padEnd(15)} ${init.hostPid}\n`;
}
process.stdout.write(out);
