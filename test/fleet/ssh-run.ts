/** Runs one command over real OpenSSH against a fleet machine, with the fleet's key and a pinned known_hosts. */
import { execFile } from 'node:child_process';
import type { Fleet } from '../harness/fleet/index.ts';

export interface SshResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function sshRun(
  fleet: Fleet,
  port: number,
  command: string,
  knownHosts = fleet.knownHostsPath,
  user = 'root',
): Promise<SshResult> {
  const args = [
    '-T',
    '-p',
    String(port),
    '-i',
    fleet.clientKeyPath,
    '-o',
    'IdentitiesOnly=yes',
    '-o',
    'BatchMode=yes',
    '-o',
    'StrictHostKeyChecking=yes',
    '-o',
    `UserKnownHostsFile=${knownHosts}`,
    '-o',
    'GlobalKnownHostsFile=/dev/null',
    '-o',
    'ConnectTimeout=5',
    '-o',
    'LogLevel=ERROR',
    `${user}@127.0.0.1`,
    command,
  ];
  return new Promise((resolve) => {
    execFile('ssh', args, { encoding: 'utf8', timeout: 20_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : null;
      resolve({ code, stdout, stderr });
    });
  });
}

/** On the machine `id` (its own sshd). */
export function onMachine(fleet: Fleet, id: string, command: string, user = 'root'): Promise<SshResult> {
  const port = fleet.machine(id).sshPort;
  if (port === null) throw new Error(`${id} has no sshd`);
  return sshRun(fleet, port, command, fleet.knownHostsPath, user);
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls until `check` returns true (or throws after `ms`). */
export async function eventually(check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error('condition not met in time');
    await sleep(25);
  }
}
