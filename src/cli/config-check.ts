import { parseEnv, type Role } from '../config/env.ts';
import { loadInventoryFile } from '../config/load-inventory.ts';
import { listMachines, sitesOf } from '../config/machines.ts';

/** `config check [bot|worker|start]`: prints every problem at once, in plain words; exit 1 if any. */
export async function runConfigCheck(args: string[], env: Record<string, string | undefined>, out: NodeJS.WritableStream): Promise<number> {
  const role: Role = args[0] === 'bot' || args[0] === 'worker' ? args[0] : 'start';
  const e = parseEnv(env, role);
  const path = env.GPU_MEDIC_INVENTORY ?? './inventory.yaml';
  const inv = await loadInventoryFile(path);
  const lines: string[] = [];
  for (const p of e.problems) lines.push(`environment: ${p.variable} ${p.message}`);
  for (const p of inv.problems) lines.push(`inventory ${path}: ${p.at}: ${p.message}`);
  if (lines.length > 0) {
    out.write(`config check (${role}): ${lines.length} problem${lines.length === 1 ? '' : 's'}\n${lines.map((l) => `  - ${l}`).join('\n')}\n`);
    return 1;
  }
  const machines = inv.inventory ? listMachines(inv.inventory) : [];
  out.write(
    `config check (${role}): ok. ${machines.length} machines (${machines.filter((m) => m.kind === 'host').length} hosts, ${machines.filter((m) => m.kind === 'container').length} containers) in sites ${inv.inventory ? sitesOf(inv.inventory).join(', ') : '-'}; mode ${e.env?.GPU_MEDIC_MODE}\n`,
  );
  return 0;
}
