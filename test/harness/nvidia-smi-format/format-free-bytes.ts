import type { HostMemory } from '../../../src/gpu/types.ts';
import { left, right } from './text-layout.ts';

const HEADER = '               total        used        free      shared  buff/cache   available';

function row(label: string, cells: readonly number[]): string {
  return left(label, 8) + cells.map((c) => ` ${right(String(c), 11)}`).join('');
}

/**
 * `free -b` (procps-ng 4) layout. Only total/used/available are known: `free` is what neither
 * `used` nor the page cache holds, shared is 0, swap is empty.
 */
export function formatFreeBytes(mem: HostMemory): string {
  const available = mem.availableBytes ?? Math.max(0, mem.totalBytes - mem.usedBytes);
  const free = Math.max(0, Math.min(available, mem.totalBytes - mem.usedBytes));
  const buffCache = Math.max(0, mem.totalBytes - mem.usedBytes - free);
  return `${HEADER}\n${row('Mem:', [mem.totalBytes, mem.usedBytes, free, 0, buffCache, available])}\n${row('Swap:', [0, 0, 0])}\n`;
}
