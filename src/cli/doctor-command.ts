/**
 * `doctor [machine|all] [--json]`: checks, read-only, that every machine has what gpu-medic relies
 * on (see src/doctor/). Runs where the SSH key is, with the worker's executor and pinned keys.
 * Exit codes: 0 nothing would make unstick fail (warnings allowed); 1 something would; 2 bad
 * arguments or inventory.
 */
import { loadInventoryFile } from '../config/load-inventory.ts';
import { resolveDoctorTarget, runDoctor } from '../doctor/doctor.ts';
import { reportText } from '../doctor/report-table.ts';
import { createSshExecutor } from '../ssh/executor.ts';
import { workerPublicKey } from '../ssh/public-key.ts';

export interface DoctorIo {
  env: Record<string, string | undefined>;
  out: NodeJS.WritableStream;
  err: NodeJS.WritableStream;
}

const USAGE = 'usage: gpu-medic doctor [machine|all] [--json]\n';

export async function runDoctorCommand(args: string[], io: DoctorIo): Promise<number> {
  const json = args.includes('--json');
  const rest = args.filter((a) => a !== '--json');
  if (rest.length > 1 || rest.some((a) => a.startsWith('-'))) {
    io.err.write(USAGE);
    return 2;
  }
  const path = io.env.GPU_MEDIC_INVENTORY || './inventory.yaml';
  const inv = await loadInventoryFile(path);
  if (!inv.inventory) {
    io.err.write(
      `gpu-medic doctor: inventory ${path} has problems:\n${inv.problems.map((p) => `  - ${p.at}: ${p.message}`).join('\n')}\n`,
    );
    return 2;
  }
  const target = resolveDoctorTarget(inv.inventory, (rest[0] ?? 'all').toLowerCase());
  if (!target.ok) {
    io.err.write(`gpu-medic doctor: ${target.message}\n`);
    return 2;
  }
  const access = io.env.GPU_MEDIC_SSH_ACCESS === 'root-shell' ? 'root-shell' : 'agent';
  const executor = createSshExecutor({
    connectTimeoutMs: inv.inventory.defaults.connectTimeoutSec * 1000,
    // The worker's setting (GPU_MEDIC_SSH_ACCESS): the doctor speaks to the machines as the worker does.
    access,
  });
  try {
    const report = await runDoctor(inv.inventory, target.machines, {
      exec: executor.exec,
      probeLine: executor.probeLine,
      access,
      workerPublicKey,
      commandTimeoutMs: inv.inventory.defaults.commandTimeoutSec * 1000,
    });
    io.out.write(json ? `${JSON.stringify(report, null, 2)}\n` : reportText(report, target.machines.length));
    return report.failed > 0 ? 1 : 0;
  } finally {
    await executor.close();
  }
}
