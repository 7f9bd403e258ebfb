/** What a fake tool knows about the machine it runs on (from FLEET_MACHINE_DIR, set by its bin/ wrapper). */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { CommandOutput } from '../../nvidia-smi-format/index.ts';
import { type HostState, type MachineInfo, readJson, writeJsonAtomic } from '../state.ts';

/** A fake tool's answer: what it prints and its exit code, or 'hang' (no output, no exit). */
export type ToolResult = CommandOutput | 'hang';

export interface MachineContext {
  dir: string;
  info: MachineInfo;
  hostStatePath: string;
  readHostState(): HostState;
  writeHostState(s: HostState): void;
  /** This machine's hang flag, or its host's (a hung driver hangs every container on it). */
  hung(): boolean;
}

export function machineContext(): MachineContext {
  const dir = process.env.FLEET_MACHINE_DIR;
  if (dir === undefined || dir === '') {
    process.stderr.write('fleet tool: FLEET_MACHINE_DIR is not set (run through the machine bin/ wrapper)\n');
    process.exit(255);
  }
  return machineContextAt(dir);
}

/**
 * The context of the machine at `dir`. The tool server runs in the host's namespaces, so it reads
 * the host's /proc directly (`hostProc: '/proc'`) where a tool inside a container reads its bind mount.
 */
export function machineContextAt(dir: string, o: { hostProc?: string } = {}): MachineContext {
  const read = readJson<MachineInfo>(join(dir, 'machine.json'));
  const info = o.hostProc === undefined ? read : { ...read, hostProc: o.hostProc };
  const hostStatePath = join(info.hostDir, 'state.json');
  return {
    dir,
    info,
    hostStatePath,
    readHostState: () => readJson<HostState>(hostStatePath),
    writeHostState: (s) => writeJsonAtomic(hostStatePath, s),
    hung: () => existsSync(join(dir, 'hang')) || existsSync(join(info.hostDir, 'hang')),
  };
}

/**
 * What a wedged driver call looks like from the outside: no output, no exit. Bounded at 10 min
 * so a session the client abandoned does not keep a node process forever (fleet.stop() kills it anyway).
 */
export function hangForever(): Promise<never> {
  return new Promise<never>(() => {
    setTimeout(() => process.exit(10), 600_000);
  });
}
