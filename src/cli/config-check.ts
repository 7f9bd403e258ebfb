import { checkConfig, formatReport } from '../config/check.ts';
import type { Role } from '../config/env.ts';
import { loadInventoryFile } from '../config/load-inventory.ts';

/** The role `config check [bot|worker|start]` checks; both roles (`start`) when none is named. */
export function configCheckRole(args: readonly string[]): Role {
  return args[0] === 'bot' || args[0] === 'worker' ? args[0] : 'start';
}

/** `config check [bot|worker|start]`: every problem at once, in plain words, and the deployment it assumed; exit 1 if any. */
export async function runConfigCheck(args: string[], env: Record<string, string | undefined>, out: NodeJS.WritableStream): Promise<number> {
  const role = configCheckRole(args);
  const report = await checkConfig(env, role, loadInventoryFile);
  out.write(formatReport(report, `config check (${role})`));
  return report.problems.length > 0 ? 1 : 0;
}
