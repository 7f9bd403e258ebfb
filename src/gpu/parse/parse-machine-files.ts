import type { HostMemory } from '../types.ts';
import { abort, guard, type ParseResult, toInt } from './parse-failure.ts';

/** `free -b`: the `Mem:` row, columns located by the header (procps 3.3 and 4 layouts). */
export function parseFreeBytes(text: string): ParseResult<HostMemory> {
  return guard(() => {
    const lines = text
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '');
    const header = lines[0]?.split(/\s+/) ?? [];
    const mem = lines
      .find((l) => l.startsWith('Mem:'))
      ?.split(/\s+/)
      .slice(1);
    if (!header.includes('total') || !header.includes('used') || mem === undefined) abort('not `free -b` output');
    const col = (name: string): number | null => {
      const i = header.indexOf(name);
      if (i < 0) return null;
      const n = toInt(mem[i] ?? '');
      if (n === null) abort(`unreadable ${name} in free output`);
      return n;
    };
    const totalBytes = col('total');
    const usedBytes = col('used');
    if (totalBytes === null || usedBytes === null) abort('free output lacks total/used');
    if (usedBytes > totalBytes) abort('free reports more used than total memory');
    return { totalBytes, usedBytes, availableBytes: col('available') };
  });
}

export interface ProcStat {
  pid: number;
  comm: string;
  state: string;
  /** Field 22, clock ticks after boot: with the PID, the process identity. */
  startTimeTicks: number;
}

/** `/proc/<pid>/stat`. comm may contain spaces and `)`, so it ends at the LAST `)`. */
export function parseProcStat(text: string): ParseResult<ProcStat> {
  return guard(() => {
    const open = text.indexOf('(');
    const close = text.lastIndexOf(')');
    if (open < 0 || close < open) abort('not a /proc/<pid>/stat line');
    const pid = toInt(text.slice(0, open).trim());
    const rest = text
      .slice(close + 1)
      .trim()
      .split(/\s+/);
    // rest[0] is field 3 (state), so field 22 is rest[19].
    const state = rest[0] ?? '';
    const start = toInt(rest[19] ?? '');
    if (pid === null || !/^[A-Za-z]$/.test(state) || start === null) abort('unreadable /proc/<pid>/stat fields');
    return { pid, comm: text.slice(open + 1, close), state, startTimeTicks: start };
  });
}

/** `NSpid:` of `/proc/<pid>/status`: the PID in each namespace, outermost first. */
export function parseNsPid(statusText: string): ParseResult<number[]> {
  return guard(() => {
    const line = statusText.split('\n').find((l) => l.startsWith('NSpid:'));
    if (line === undefined) abort('no NSpid line (kernel older than 4.1?)');
    const pids = line.slice('NSpid:'.length).trim().split(/\s+/).map(toInt);
    if (pids.length === 0 || pids.some((p) => p === null || p === 0)) abort('unreadable NSpid line');
    return pids.filter((p): p is number => p !== null);
  });
}

export interface PctContainer {
  vmid: number;
  status: string;
  lock: string | null;
  name: string | null;
}

/** `pct list`: nothing at all when there are no containers; Lock may be blank. */
export function parsePctList(text: string): ParseResult<PctContainer[]> {
  return guard(() => {
    const lines = text.split('\n').filter((l) => l.trim() !== '');
    const header = lines[0];
    if (header === undefined) return [];
    if (!/^VMID\s+Status\s+Lock\s+Name\s*$/.test(header.trimEnd())) abort('not `pct list` output');
    const lockAt = header.indexOf('Lock');
    const nameAt = header.indexOf('Name');
    return lines.slice(1).map((line, i) => {
      const m = /^(\d+)\s+(\S+)/.exec(line);
      const vmid = toInt(m?.[1] ?? '');
      if (m === null || vmid === null) abort(`unreadable pct list row ${i + 2}`);
      // printf "%-10s %-10s %-12s %-20s": Lock is blank for most rows, so read it by column.
      const lock = line.slice(lockAt, nameAt).trim();
      const name = line.slice(nameAt).trim();
      return { vmid, status: m[2] ?? '', lock: lock === '' ? null : lock, name: name === '' ? null : name };
    });
  });
}

/** `pct status <vmid>` → `running`, `stopped`, ... */
export function parsePctStatus(text: string): ParseResult<string> {
  return guard(() => {
    const m = /^status:\s*(\S+)\s*$/m.exec(text);
    if (m?.[1] === undefined) abort('not `pct status` output');
    return m[1];
  });
}
