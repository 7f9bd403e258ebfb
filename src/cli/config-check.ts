import { checkConfig, formatReport } from '../config/check.ts';
import type { Role } from '../config/env.ts';
import { loadInventoryFile } from '../config/load-inventory.ts';
import { closest } from '../config/suggest.ts';

const ROLES: readonly Role[] = ['bot', 'worker', 'start'];

/** `config check [bot|worker|start]`: every problem at once, in plain words, and the deployment it assumed; exit 1 if any, 2 for a wrong argument. */
export async function runConfigCheck(
  args: string[],
  env: Record<string, string | undefined>,
  out: NodeJS.WritableStream,
  envFileProblems: readonly string[] = [],
): Promise<number> {
  const arg = args[0] ?? 'start';
  const role = ROLES.find((r) => r === arg);
  if (role === undefined || args.length > 1) {
    const near = closest(arg, ROLES);
    out.write(
      `config check: "${args.join(' ')}" is not a role${near && args.length === 1 ? `; did you mean ${near}?` : ''} (usage: config check [bot|worker|start]; nothing was checked)\n`,
    );
    return 2;
  }
  const report = await checkConfig(env, role, loadInventoryFile, envFileProblems);
  out.write(formatReport(report, `config check (${role})`));
  return report.problems.length > 0 ? 1 : 0;
}
