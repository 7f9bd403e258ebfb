/**
 * Runs inside a container's namespaces (via nsenter): starts the shared test sshd there, so its
 * sessions get container PIDs, prints `{port, pid, hostKeyPath, hostKeyFingerprint}` as one JSON
 * line, then leaves: sshd is re-parented to the container's init, as a real container's is.
 * argv[2]: JSON of the SshdOptions.
 */
import { chmodSync } from 'node:fs';
import { join } from 'node:path';
import { startSshd, type SshdOptions } from '../../sshd.ts';
import { joinCgroup } from '../cgroup.ts';

joinCgroup(process.env.FLEET_CGROUP ?? null);

const opts = JSON.parse(process.argv[2] ?? '{}') as SshdOptions;
const sshd = await startSshd(opts);
// sshd reads authorized_keys as the user logging in: let non-root users (e.g. fleetuser) log in too.
chmodSync(join(opts.dir, 'authorized_keys'), 0o644);
if (opts.commandLog !== undefined) chmodSync(opts.commandLog, 0o666); // ...and have their commands logged
process.stdout.write(
  `${JSON.stringify({
    port: sshd.port,
    pid: sshd.pid,
    hostKeyPath: sshd.hostKeyPath,
    hostKeyFingerprint: sshd.hostKeyFingerprint,
  })}\n`,
  () => {
    // SIGKILL, not exit(): sshd.ts kills the sshds it started from an 'exit' hook.
    process.kill(process.pid, 'SIGKILL');
  },
);
