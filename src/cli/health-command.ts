/**
 * `health [bot|worker|start]`: the container healthcheck. Reads the heartbeat file the running
 * process writes (never touches Redis, Slack or SSH itself), prints one line, exits 0 when healthy.
 */
import { readFile } from 'node:fs/promises';
import { defaultHealthFile, judgeHealth } from '../health/report.ts';

export async function runHealthCommand(
  args: string[],
  env: Record<string, string | undefined>,
  out: NodeJS.WritableStream,
): Promise<number> {
  const role = args[0] ?? 'start';
  if (!['bot', 'worker', 'start'].includes(role) || args.length > 1) {
    out.write('usage: gpu-medic health [bot|worker|start]\n');
    return 2;
  }
  const file = env.GPU_MEDIC_HEALTH_FILE || defaultHealthFile(role);
  const text = await readFile(file, 'utf8').catch(() => null);
  const verdict = judgeHealth(text, Date.now(), file);
  out.write(`${verdict.line}\n`);
  return verdict.ok ? 0 : 1;
}
