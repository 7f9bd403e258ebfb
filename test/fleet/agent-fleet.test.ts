/**
 * Issue 21: the fleet's hosts are reached only through gpu-medic-agent, and only because of what
 * agent/install.sh wrote (the account, its root-owned `restrict,command=` key line, the sudoers
 * entry): their sshd runs the distribution's stock sshd_config. With the fleet's own key and the
 * real OpenSSH client, a shell is refused and nothing runs; the worker's reads work.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fuserDevices, queryGpus } from '../../src/playbooks/commands.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { SshEndpoint } from '../../src/ssh/types.ts';
import { startFleet } from '../harness/fleet/index.ts';
import type { Fleet } from '../harness/fleet/types.ts';

const execFileP = promisify(execFile);
let fleet: Fleet;
let endpoint: SshEndpoint;

beforeAll(async () => {
  fleet = await startFleet({
    access: 'agent',
    hosts: [{ id: 'kpro5', gpus: 2 }],
    containers: [{ id: 'ct130', vmid: 130, host: 'kpro5' }],
  });
  const h = fleet.inventory().hosts?.[0];
  if (h === undefined) throw new Error('no host');
  endpoint = {
    machineId: 'kpro5',
    host: '127.0.0.1',
    port: h.port ?? 22,
    username: h.user ?? '',
    privateKeyPath: fleet.clientKeyPath,
    hostKeyFingerprints: h.hostKeys ?? [],
  };
}, 120_000);
afterAll(async () => fleet?.stop());

async function ssh(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const base = ['-i', fleet.clientKeyPath, '-p', String(endpoint.port), '-o', 'BatchMode=yes'];
  const known = ['-o', `UserKnownHostsFile=${fleet.knownHostsPath}`, '-o', 'StrictHostKeyChecking=yes'];
  try {
    const r = await execFileP('ssh', [...base, ...known, ...args], { timeout: 20_000 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof x.code === 'number' ? x.code : -1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
  }
}

describe('a fleet host reached through the agent', () => {
  it('its sshd runs the stock sshd_config: no ForceCommand, forwarding at its defaults', () => {
    const config = readFileSync(join(fleet.machine('kpro5').dir, 'sshd', 'sshd_config'), 'utf8');
    expect(config).not.toMatch(/^\s*ForceCommand/im);
    expect(config).not.toMatch(/^\s*AllowTcpForwarding/im);
    expect(config).not.toMatch(/^\s*AuthorizedKeysFile/im);
  });

  it('logs in as the agent account, and a shell command is refused with nothing run', async () => {
    expect(endpoint.username).toBe('gpu-medic');
    const toolsBefore = fleet.commandLog('kpro5').filter((c) => c.via === 'tool').length;
    for (const words of [['id'], ['--', 'bash', '-c', 'true'], ['nvidia-smi']]) {
      const r = await ssh([`${endpoint.username}@127.0.0.1`, ...words]);
      expect(r.code).toBe(126);
      expect(r.stderr).toMatch(/^gpu-medic-agent: refused: /m);
      expect(r.stdout).toBe('');
    }
    expect(fleet.commandLog('kpro5').filter((c) => c.via === 'tool').length).toBe(toolsBefore);
  });

  it('the worker reads the host and a container (through pct exec) with agent verbs', async () => {
    const ex = createSshExecutor({ access: 'agent' });
    try {
      const r = await ex.exec({ kind: 'direct', endpoint }, queryGpus({ timeoutMs: 10_000 }));
      expect(r.command).toBe('gpu-medic 1 10000 host gpus');
      expect(r.code).toBe(0);
      expect(r.stdout.trim().split('\n')).toHaveLength(2);
      const c = await ex.exec({ kind: 'pct', host: endpoint, vmid: 130 }, fuserDevices({ timeoutMs: 10_000 }));
      expect(c.command).toBe('gpu-medic 1 10000 ct 130 holders');
      expect(c.stdout).toMatch(/\/dev\/nvidia0:\s+root\s+kernel mount/);
    } finally {
      await ex.close();
    }
    // What ran is what the grammar says for those verbs, and nothing else.
    const tools = fleet.commandLog('kpro5').filter((c) => c.via === 'tool');
    expect(tools.some((c) => c.cmd.startsWith('nvidia-smi --query-gpu='))).toBe(true);
    expect(tools.some((c) => c.cmd.startsWith('pct exec 130 -- timeout -k 1 10 sh -c fuser -v'))).toBe(true);
  });
});
