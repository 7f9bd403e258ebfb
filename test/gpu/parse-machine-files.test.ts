import { describe, expect, it } from 'vitest';
import { parseFreeBytes, parseNsPid, parsePctList, parsePctStatus, parseProcStat } from '../../src/gpu/parse/index.ts';

describe('free -b', () => {
  it('procps 4 layout (Debian 12 / Proxmox 8)', () => {
    const text =
      '               total        used        free      shared  buff/cache   available\n' +
      'Mem:     482113024000 471398400000   2097152000    10485760  8617472000  10714624000\n' +
      'Swap:     8589930496           0  8589930496\n';
    expect(parseFreeBytes(text)).toEqual({
      ok: true,
      value: { totalBytes: 482113024000, usedBytes: 471398400000, availableBytes: 10714624000 },
    });
  });

  it('old layout without "available" and garbage', () => {
    const old =
      '             total       used       free     shared    buffers     cached\nMem:      16318648   2876404   13442244          0     101948    1003736\n';
    expect(parseFreeBytes(old)).toEqual({
      ok: true,
      value: { totalBytes: 16318648, usedBytes: 2876404, availableBytes: null },
    });
    expect(parseFreeBytes('Mem: lots').ok).toBe(false);
    expect(parseFreeBytes('               total        used\nMem:  10  x\n').ok).toBe(false);
  });
});

describe('/proc/<pid>/stat', () => {
  it('comm with spaces and parens ends at the last ")"', () => {
    const fields = Array.from({ length: 49 }, (_, i) => String(i + 3));
    fields[0] = 'S';
    fields[19] = '987654321';
    const r = parseProcStat(`4242 (sglang::sch (TP0) x) ${fields.join(' ')}\n`);
    expect(r).toEqual({
      ok: true,
      value: { pid: 4242, comm: 'sglang::sch (TP0) x', state: 'S', startTimeTicks: 987654321 },
    });
  });

  it('a real-shaped line', () => {
    const line =
      '1 (systemd) S 0 1 1 0 -1 4194560 88813 7473935 119 2329 277 442 20633 8393 20 0 1 0 27 173092864 3150 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0';
    expect(parseProcStat(line)).toEqual({
      ok: true,
      value: { pid: 1, comm: 'systemd', state: 'S', startTimeTicks: 27 },
    });
  });

  it('truncated or garbage', () => {
    expect(parseProcStat('1 (systemd) S 0 1').ok).toBe(false);
    expect(parseProcStat('garbage').ok).toBe(false);
  });
});

describe('NSpid', () => {
  it('host and container PIDs, outermost first', () => {
    const status =
      'Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t91234\nNgid:\t0\nPid:\t91234\nPPid:\t1\nNSpid:\t91234\t1523\nNSpgid:\t91234\t1523\n';
    expect(parseNsPid(status)).toEqual({ ok: true, value: [91234, 1523] });
    expect(parseNsPid('Name:\tbash\nNSpid:\t77\n')).toEqual({ ok: true, value: [77] });
    expect(parseNsPid('Name:\tbash\n').ok).toBe(false);
    expect(parseNsPid('NSpid:\t12\tx\n').ok).toBe(false);
  });
});

describe('pct', () => {
  const row = (vmid: string, status: string, lock: string, name: string): string =>
    `${vmid.padEnd(10)} ${status.padEnd(10)} ${lock.padEnd(12)} ${name.padEnd(20)}\n`;

  it('pct list: printf "%-10s %-10s %-12s %-20s" rows, blank Lock', () => {
    const text =
      row('VMID', 'Status', 'Lock', 'Name') +
      row('129', 'running', '', 'sglang-ct') +
      row('130', 'stopped', 'backup', 'monitor');
    expect(parsePctList(text)).toEqual({
      ok: true,
      value: [
        { vmid: 129, status: 'running', lock: null, name: 'sglang-ct' },
        { vmid: 130, status: 'stopped', lock: 'backup', name: 'monitor' },
      ],
    });
  });

  it('pct list prints nothing when there are no containers', () => {
    expect(parsePctList('')).toEqual({ ok: true, value: [] });
    expect(parsePctList('VMID Status\nfoo\n').ok).toBe(false);
  });

  it('pct status', () => {
    expect(parsePctStatus('status: running\n')).toEqual({ ok: true, value: 'running' });
    expect(parsePctStatus('status: stopped\n')).toEqual({ ok: true, value: 'stopped' });
    expect(parsePctStatus("container '129' not running!\n").ok).toBe(false);
  });
});
