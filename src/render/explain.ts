import { code as codeSpan, codeLine, text } from './escape.ts';

/**
 * What a user reads for each error code: what happened, what was not done, what to try.
 * Pure; `detail` is the worker's message (never secrets: executors keep keys out of errors), and
 * machine text: it is escaped here, like the machine id and an unknown code.
 */
export function explainMachineError(machineId: string, code: string, rawDetail: string): string {
  const m = codeSpan(machineId);
  const detail = text(rawDetail);
  switch (code) {
    case 'host_key_mismatch':
      return `:no_entry: ${m}: the SSH host key did not match the pinned key, so the worker refused to connect. ${detail}\nNothing was run on ${m}. If the machine was reinstalled, verify its new key out of band (\`ssh-keygen -l -f /etc/ssh/ssh_host_ed25519_key.pub\` on its console) and update \`hostKeys\` in the inventory.`;
    case 'host_key_unpinned':
      return `:no_entry: ${m} has no pinned host key, so the worker refused to connect. Nothing was run. Add its fingerprint to \`hostKeys\` in the inventory.`;
    case 'connect_timeout':
    case 'connect_failed':
      return `:electric_plug: could not reach ${m}: ${detail}\nNothing was run on it. Check that it is up and reachable from the worker, then try \`/gpu status ${codeLine(machineId)}\` again.`;
    case 'auth_failed':
      return `:lock: ${m} refused the worker's SSH key. Nothing was run. Check the key in \`authorized_keys\` for the configured user.`;
    case 'connection_lost':
      return `:electric_plug: the connection to ${m} dropped while a command was running: ${detail}\nTry again; if it keeps happening, check the machine's network and sshd.`;
    case 'command_timeout':
      return `:hourglass: ${detail} on ${m}. Nothing else was run. A hanging \`nvidia-smi\` often means a wedged driver: check \`dmesg\` for Xid errors on the host, then try again.`;
    case 'target_unknown':
      return `:question: ${detail}. Nothing was run.`;
    case 'parse_failed':
      return `:warning: ${m} answered, but ${detail}. Nothing else was run. Please report this output to the gpu-medic maintainers.`;
    default:
      return `:warning: ${m}: ${detail} (${text(code)}). Nothing else was run.`;
  }
}
