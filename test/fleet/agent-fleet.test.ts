/**
 * Least privilege on the test fleet: its hosts are reached only through gpu-medic-agent, and only because of
 * what agent/install.sh wrote (the account, its root-owned `restrict,command=` key line, the sudoers entry):
 * their sshd runs the distribution's stock sshd_config. With the fleet's own key and the real OpenSSH client,
 * a shell is refused and nothing runs; the worker's reads work.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fuserDevices, queryGpus } from '../../src/agent-grammar/templates/snapshot-commands.ts';
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
    containers: [
      { id: 'ct130', vmid: 130, host: 'kpro5' },
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
    ],
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

async function ssh(args: string[], port = endpoint.port): Promise<{ code: number; stdout: string; stderr: string }> {
  const base = ['-i', fleet.clientKeyPath, '-p', String(port), '-o', 'BatchMode=yes'];
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

describe('a container reached at its own address, through its own agent (install.sh --role self)', () => {
  const entry = () => {
    const c = fleet.inventory().containers?.find((x) => x.id === 'ct129');
    if (c === undefined || c.port === undefined) throw new Error('no ct129 with an address');
    return { ...c, port: c.port };
  };

  it('is in the inventory with access agent, and its sshd runs the stock sshd_config', () => {
    expect(entry()).toMatchObject({ access: 'agent', user: 'root' });
    const config = readFileSync(join(fleet.machine('ct129').dir, 'sshd', 'sshd_config'), 'utf8');
    expect(config).not.toMatch(/^\s*(ForceCommand|AllowTcpForwarding|AuthorizedKeysFile|UsePAM no)/im);
  });

  it('as root and as fleetuser a shell command is refused and nothing runs; version answers', async () => {
    const { port } = entry();
    const toolsBefore = fleet.commandLog('ct129').filter((c) => c.via === 'tool').length;
    for (const user of ['root', 'fleetuser']) {
      for (const words of [['id'], ['--', 'bash', '-c', 'true'], ['nvidia-smi']]) {
        const r = await ssh([`${user}@127.0.0.1`, ...words], port);
        expect(r.code).toBe(126);
        expect(r.stderr).toMatch(/^gpu-medic-agent: refused: /m);
        expect(r.stdout).toBe('');
      }
      const v = await ssh([`${user}@127.0.0.1`, 'gpu-medic', '1', 'version'], port);
      expect(v.stdout).toMatch(/^gpu-medic-agent \S+ protocol 1$/m);
    }
    expect(fleet.commandLog('ct129').filter((c) => c.via === 'tool').length).toBe(toolsBefore);
  });

  it("root's agent runs as the container's root, fleetuser's as fleetuser (no sudo), and pct is refused there", async () => {
    const { port } = entry();
    const root = await ssh(['root@127.0.0.1', 'gpu-medic 1 5000 host probe-proc'], port);
    expect(root.stdout).toMatch(/^uid 0$/m);
    const user = await ssh(['fleetuser@127.0.0.1', 'gpu-medic 1 5000 host probe-proc'], port);
    expect(user.stdout).toMatch(/^uid [1-9][0-9]*$/m);
    const ct = await ssh(['root@127.0.0.1', 'gpu-medic 1 5000 ct 130 holders'], port);
    expect(ct.code).toBe(126);
    expect(ct.stderr).toMatch(/refused: ct is not allowed on an agent with role=self/);
  });

  it('the worker reads it with agent verbs on the direct route', async () => {
    const c = entry();
    const ex = createSshExecutor({ access: 'agent' });
    try {
      const r = await ex.exec(
        {
          kind: 'direct',
          endpoint: {
            machineId: 'ct129',
            host: '127.0.0.1',
            port: c.port,
            username: 'root',
            privateKeyPath: fleet.clientKeyPath,
            hostKeyFingerprints: c.hostKeys ?? [],
          },
        },
        fuserDevices({ timeoutMs: 10_000 }),
      );
      expect(r.command).toBe('gpu-medic 1 10000 host holders');
      expect(r.code).toBe(0);
    } finally {
      await ex.close();
    }
    expect(fleet.commandLog('ct129').some((e) => e.via === 'ssh' && e.cmd === 'gpu-medic 1 10000 host holders')).toBe(
      true,
    );
  });
});
