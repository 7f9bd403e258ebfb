import { describe, expect, it } from 'vitest';
import type { InventoryInput } from '../../src/config/inventory.ts';
import { commandsOutsideTemplates } from './lib/allow-list.ts';

/** A fleet stand-in: the allow-list reads only the command logs and the inventory. */
function fleetWith(inventory: InventoryInput, logs: Record<string, Array<{ cmd: string; via: 'ssh' | 'tool' }>>) {
  return { inventory: () => inventory, commandLog: (id: string) => logs[id] ?? [] };
}

const keys = { keyFile: '/k', hostKeys: ['SHA256:abc'] };
const inventory: InventoryInput = {
  hosts: [
    { id: 'agenthost', address: '127.0.0.1', access: 'agent', ...keys },
    { id: 'shellhost', address: '127.0.0.1', access: 'root-shell', ...keys },
  ],
  containers: [
    { id: 'own', vmid: 131, host: 'agenthost', address: '127.0.0.1', access: 'root-shell', ...keys },
    { id: 'viapct', vmid: 129, host: 'agenthost' },
  ],
};

const AGENT_READ = 'gpu-medic 1 8000 host batch 5000 gpus + 5000 apps + 5000 ram';
const AGENT_CT_READ = 'gpu-medic 1 8000 ct 129 batch 5000 gpus + 5000 apps + 5000 ram + 5000 holders';
const AGENT_RESET =
  'gpu-medic 1 10000 host reset GPU-70e48e64-f200-5604-55c5-b9a23085e2ad inc_20261202_022135_8x2zy4bo apr_KiiQ2_qI3Pzy9PpUmltKKw';
const AGENT_SIGNAL =
  'gpu-medic 1 10000 ct 130 signal container TERM 4026532191 inc_20261130_092000_k3x9q2 none 2 492240 0 3 492242 0';
const SHELL_QUERY_APPS =
  "exec timeout -k 1 10 nvidia-smi '--query-compute-apps=gpu_uuid,pid,process_name,used_memory' '--format=csv,noheader,nounits'";

describe('the fault suite allow-list: agent lines on agent hosts, shell lines elsewhere', () => {
  it('accepts template agent lines on an agent host, host and ct ones, with any ids and timeouts', () => {
    const f = fleetWith(inventory, {
      agenthost: [AGENT_READ, AGENT_CT_READ, AGENT_RESET, AGENT_SIGNAL].map((cmd) => ({ cmd, via: 'ssh' as const })),
    });
    expect(commandsOutsideTemplates(f, ['agenthost'])).toEqual([]);
  });

  it('flags an agent line no template makes: an unknown verb, an extra word, a malformed id', () => {
    const bad = [
      'gpu-medic 1 8000 host shell id',
      `${AGENT_READ} extra`,
      AGENT_RESET.replace('inc_20261202_022135_8x2zy4bo', 'inc_bogus'),
      AGENT_RESET.replace('apr_KiiQ2_qI3Pzy9PpUmltKKw', 'apr_short'),
    ];
    const f = fleetWith(inventory, { agenthost: bad.map((cmd) => ({ cmd, via: 'ssh' as const })) });
    expect(commandsOutsideTemplates(f, ['agenthost']).map((e) => e.cmd)).toEqual(bad);
  });

  it('per machine by its access: a shell line is a breach on an agent host, an agent line on a shell machine', () => {
    const f = fleetWith(inventory, {
      agenthost: [{ cmd: SHELL_QUERY_APPS, via: 'ssh' }],
      shellhost: [
        { cmd: SHELL_QUERY_APPS, via: 'ssh' },
        { cmd: AGENT_READ, via: 'ssh' },
      ],
      own: [
        { cmd: SHELL_QUERY_APPS, via: 'ssh' },
        { cmd: AGENT_READ, via: 'ssh' },
      ],
      viapct: [{ cmd: AGENT_CT_READ, via: 'ssh' }],
    });
    expect(commandsOutsideTemplates(f, ['agenthost', 'shellhost', 'own', 'viapct'])).toEqual([
      { machine: 'agenthost', via: 'ssh', cmd: SHELL_QUERY_APPS },
      { machine: 'shellhost', via: 'ssh', cmd: AGENT_READ },
      { machine: 'own', via: 'ssh', cmd: AGENT_READ },
      { machine: 'viapct', via: 'ssh', cmd: AGENT_CT_READ },
    ]);
  });
});
