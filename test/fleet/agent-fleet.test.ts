import { afterAll, beforeAll, expect, it } from 'vitest';
import { queryGpus, fuserDevices } from '../../src/playbooks/commands.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Route } from '../../src/ssh/types.ts';
import { startFleet } from '../harness/fleet/index.ts';
import type { Fleet } from '../harness/fleet/types.ts';

let fleet: Fleet;
beforeAll(async () => {
  fleet = await startFleet({
    access: 'agent',
    hosts: [{ id: 'kpro5', gpus: 2 }],
    containers: [{ id: 'ct130', vmid: 130, host: 'kpro5' }],
  });
}, 120_000);
afterAll(async () => fleet?.stop());

it('reads through the agent', async () => {
  const inv = fleet.inventory();
  const h = inv.hosts?.[0];
  if (!h) throw new Error('no host');
  const endpoint = {
    machineId: 'kpro5',
    host: '127.0.0.1',
    port: h.port ?? 22,
    username: h.user ?? 'root',
    privateKeyPath: fleet.clientKeyPath,
    hostKeyFingerprints: h.hostKeys ?? [],
  };
  const ex = createSshExecutor({ access: 'agent' });
  const r = await ex.exec({ kind: 'direct', endpoint } as Route, queryGpus({ timeoutMs: 5000 }));
  console.log(r);
  const c = await ex.exec({ kind: 'pct', host: endpoint, vmid: 130 } as Route, fuserDevices({ timeoutMs: 5000 }));
  console.log(c);
  console.log(fleet.commandLog('kpro5'));
  await ex.close();
  expect(r.code).toBe(0);
});
