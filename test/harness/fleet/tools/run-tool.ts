/** The fake tools answered by the tool server (and by standalone.ts): name → one call. */
import { runFree } from './free.ts';
import { runDmesg, runJournalctl } from './kernel-log.ts';
import type { MachineContext, ToolResult } from './machine-context.ts';
import { runNvidiaSmi } from './nvidia-smi.ts';

export const SERVED_TOOLS = ['nvidia-smi', 'free', 'journalctl', 'dmesg'] as const;
export type ServedTool = (typeof SERVED_TOOLS)[number];

const RUN: Record<ServedTool, (argv: string[], ctx: MachineContext) => ToolResult> = {
  'nvidia-smi': runNvidiaSmi,
  free: runFree,
  journalctl: runJournalctl,
  dmesg: runDmesg,
};

export function isServedTool(name: string): name is ServedTool {
  return (SERVED_TOOLS as readonly string[]).includes(name);
}

export function runTool(name: ServedTool, argv: string[], ctx: MachineContext): ToolResult {
  return RUN[name](argv, ctx);
}
