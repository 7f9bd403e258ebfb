/**
 * Fake `free`: host RAM from the host state (a container reads its host's numbers).
 * `-b` prints bytes; no flag prints KiB, as procps does.
 */
import { formatFreeBytes } from '../../nvidia-smi-format/index.ts';
import { appendToolLog } from '../state.ts';
import type { MachineContext, ToolResult } from './machine-context.ts';

export function runFree(argv: string[], ctx: MachineContext): ToolResult {
  appendToolLog(ctx.dir, 'free', argv);
  const unknown = argv.filter((a) => a !== '-b' && a !== '--bytes' && a !== '-k' && a !== '--kibi' && a !== '-w');
  if (unknown.length > 0)
    return { stdout: '', stderr: `fake free: unsupported option ${unknown.join(' ')}\n`, exitCode: 1 };
  const { ram } = ctx.readHostState();
  const div = argv.includes('-b') || argv.includes('--bytes') ? 1 : 1024;
  const stdout = formatFreeBytes({
    totalBytes: Math.floor(ram.totalBytes / div),
    usedBytes: Math.floor(ram.usedBytes / div),
    availableBytes: null,
  });
  return { stdout, stderr: '', exitCode: 0 };
}
