/**
 * Runs inside a container's namespaces (via nsenter): starts the shared test sshd there, so its
 * sessions get container PIDs, prints `{port, pid, hostKeyPath, hostKeyFingerprint}` as one JSON
 * line, then leaves: sshd is re-parented to the container's init, as a real container's is.
 * argv[2]: JSON of the SshdOptions.
 */
import { startSshd, type SshdOptions } from '../../sshd.ts';

const opts = JSON.parse(process.argv[2] ?? '{}') as SshdOptions;
const sshd = await startSshd(opts);
process.stdout.write(
  JSON.stringify({ port: sshd.port, pid: sshd.pid, hostKeyPath: sshd.hostKeyPath, hostKeyFingerprint: sshd.hostKeyFingerprint }) + '\n',
  () => {
    // SIGKILL, not exit(): sshd.ts kills the sshds it started from an 'exit' hook.
    process.kill(process.pid, 'SIGKILL');
  },
);
