/**
 * Runs inside a container's namespaces (via nsenter): starts the shared test sshd there, so its
 * sessions get container PIDs, writes `{port, pid, hostKeyPath, hostKeyFingerprint}` as JSON to
 * the report file (see spawnReport), then leaves: sshd is re-parented to the container's init, as a
 * real container's is. argv[2]: JSON of the SshdOptions; argv[3]: the report file's path.
 */
import { chmodSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSshd, type SshdOptions } from '../../sshd.ts';
import { joinCgroup } from '../cgroup.ts';

joinCgroup(process.env.FLEET_CGROUP ?? null);

const opts = JSON.parse(process.argv[2] ?? '{}') as SshdOptions;
const reportPath = process.argv[3];
if (reportPath === undefined) throw new Error('container-sshd: no report path');
const sshd = await startSshd(opts);
// sshd reads authorized_keys as the user logging in: let non-root users (e.g. fleetuser) log in too.
// (Through the agent each login has its own, written by the install script.)
if (opts.agent === undefined) chmodSync(join(opts.dir, 'authorized_keys'), 0o644);
if (opts.commandLog !== undefined) chmodSync(opts.commandLog, 0o666); // ...and have their commands logged
const report = {
  port: sshd.port,
  pid: sshd.pid,
  hostKeyPath: sshd.hostKeyPath,
  hostKeyFingerprint: sshd.hostKeyFingerprint,
};
writeFileSync(`${reportPath}.tmp`, JSON.stringify(report));
renameSync(`${reportPath}.tmp`, reportPath);
// SIGKILL, not exit(): sshd.ts kills the sshds it started from an 'exit' hook.
process.kill(process.pid, 'SIGKILL');
