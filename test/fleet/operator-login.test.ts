/**
 * The bench's fleet option `operatorLogin` (bench/results/2026-12.md, 2026-12-03): the baselines log in as
 * root with an engineer's own key, authorized beside the agent's, as on a real host. Root then gets
 * a plain shell with the machine's tools on its default PATH; the worker's key still reaches the
 * agent only (the host refuses it for root, the container's root runs the agent with it).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFleet } from '../harness/fleet/index.ts';
import type { Fleet } from '../harness/fleet/types.ts';

const execFileP = promisify(execFile);
let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet(
    {
      access: 'agent',
      hosts: [{ id: 'kpro5', gpus: 2 }],
      containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
    },
    { operatorLogin: true },
  );
}, 120_000);
afterAll(async () => fleet?.stop());

async function asRoot(key: string, machine: string, command: string): Promise<{ code: number; out: string }> {
  const args = ['-F', '/dev/null', '-i', key, '-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes'];
  args.push('-o', `UserKnownHostsFile=${fleet.knownHostsPath}`, '-o', 'StrictHostKeyChecking=yes');
  args.push('-p', String(fleet.machine(machine).sshPort), 'root@127.0.0.1', command);
  try {
    const r = await execFileP('ssh', args, { timeout: 20_000 });
    return { code: 0, out: r.stdout.trim() };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof x.code === 'number' ? x.code : -1, out: `${x.stdout ?? ''}${x.stderr ?? ''}`.trim() };
  }
}

describe('operatorLogin', () => {
  for (const machine of ['kpro5', 'ct129']) {
    it(`${machine}: the engineer's key logs in as root to a shell that finds the machine's nvidia-smi`, async () => {
      const key = fleet.operatorKeyPath ?? '';
      const r = await asRoot(key, machine, 'id -u; nvidia-smi --query-gpu=index --format=csv,noheader | wc -l');
      expect(r).toEqual({ code: 0, out: '0\n2' });
    });
  }

  it("the worker's key is still refused for root on the host, and runs only the agent as the container's root", async () => {
    const host = await asRoot(fleet.clientKeyPath, 'kpro5', 'id -u');
    expect(host.code).toBe(255);
    expect(host.out).toMatch(/Permission denied \(publickey/);
    const ct = await asRoot(fleet.clientKeyPath, 'ct129', 'id -u');
    expect(ct.out).toMatch(/gpu-medic-agent: refused/);
  });
});
