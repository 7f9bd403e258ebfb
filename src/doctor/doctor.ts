import type { Inventory } from '../config/inventory.ts';
import { findMachine, listMachines } from '../config/machines.ts';
import { closest } from '../config/suggest.ts';
import { judge, type DoctorReport } from './judge.ts';
import { readMachines, type ReadDeps } from './read-machines.ts';

/** Which machines `target` names: one id, or `all`. Unknown ids get a plain answer, and nothing runs. */
export function resolveDoctorTarget(
  inv: Inventory,
  target: string,
): { ok: true; machines: string[] } | { ok: false; message: string } {
  const all = listMachines(inv).map((m) => m.id);
  if (target === 'all')
    return all.length > 0
      ? { ok: true, machines: all }
      : { ok: false, message: 'The inventory has no machines; nothing was checked.' };
  if (findMachine(inv, target)) return { ok: true, machines: [target] };
  const guess = closest(target, all);
  return {
    ok: false,
    message: `No machine called "${target}" in the inventory${guess ? `; did you mean ${guess}?` : ''}. Nothing was checked.`,
  };
}

/** Reads the machines (and the hosts of the containers among them) and judges them; the report covers `machines` only. */
export async function runDoctor(inv: Inventory, machines: readonly string[], deps: ReadDeps): Promise<DoctorReport> {
  const readings = await readMachines(inv, machines, deps);
  const report = judge(readings);
  const wanted = new Set(machines);
  const findings = report.findings.filter((f) => wanted.has(f.machineId));
  return {
    findings,
    failed: findings.filter((f) => f.status === 'fail').length,
    warned: findings.filter((f) => f.status === 'warn').length,
  };
}
