/**
 * The watchdog's host reads, parsed (pure): kernel-log lines new since the cursor (journal and
 * dmesg, a reboot, the first read), the D/Z scan, the recovery action (and an old driver's
 * refusal); and the templates themselves: fixed words, one integer, nothing else.
 */
import { describe, expect, it } from 'vitest';
import {
  kernelLogRead,
  queryRecoveryAction,
  stuckProcesses,
} from '../../src/agent-grammar/templates/watch-commands.ts';
import {
  journalSinceSec,
  parseKernelLog,
  parseRecoveryActions,
  parseStuckProcesses,
} from '../../src/watchdog/kernel-log.ts';

const XID79 = 'NVRM: Xid (PCI:0000:44:00): 79, pid=1234, name=python3, GPU has fallen off the bus.';
const XID48 =
  'NVRM: Xid (PCI:0000:3b:00): 48, pid=0, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.';
const BOOT = '6c0d3f9e-2a41-4f7b-9d1e-5a8b7c6d5e4f';

const journal = (now: number, lines: string[]) =>
  [`now ${now}`, `boot ${BOOT} 5000.12`, 'source journal', ...lines, ''].join('\n');
const dmesg = (now: number, boot: string, uptime: number, lines: string[]) =>
  [`now ${now}`, `boot ${boot} ${uptime}`, 'source dmesg', ...lines, ''].join('\n');

describe('kernel log since the last read', () => {
  it('journal: every NVIDIA line after the cursor, none twice; the cursor moves to the last line and the read time', () => {
    const out = journal(1764558100, [
      `1764558000.000001 kpro5 kernel: ${XID79}`,
      `1764558050.500000 kpro5 kernel: ${XID48}`,
    ]);
    const first = parseKernelLog(out, undefined);
    if (!first.ok) throw new Error(first.reason);
    expect(first.xids.map((x) => [x.xid, x.pci])).toEqual([
      [79, '0000:44:00'],
      [48, '0000:3b:00'],
    ]);
    expect(first.cursor).toEqual({ source: 'journal', lastUs: 1764558050500000, readAtSec: 1764558100 });
    // The next read starts a little before the last read (a late line), and what was seen is not new.
    expect(journalSinceSec(first.cursor)).toBe(1764558090);
    const again = parseKernelLog(
      journal(1764558200, [`1764558050.500000 kpro5 kernel: ${XID48}`, `1764558150.000000 kpro5 kernel: ${XID79}`]),
      first.cursor,
    );
    expect(again.ok && again.xids.map((x) => x.xid)).toEqual([79]);
  });

  it('no cursor yet: the script looks back on its own (since 0)', () => {
    expect(journalSinceSec(undefined)).toBe(0);
    expect(journalSinceSec({ source: 'dmesg', bootId: BOOT, lastSec: 10 })).toBe(0);
  });

  it('dmesg: the first read takes the last ten minutes, then only what is after the last line seen; a reboot starts over', () => {
    const lines = [`[  100.000000] ${XID48}`, `[ 4900.250000] ${XID79}`];
    const first = parseKernelLog(dmesg(1764558100, BOOT, 5000, lines), undefined);
    if (!first.ok) throw new Error(first.reason);
    expect(first.xids.map((x) => x.xid)).toEqual([79]);
    expect(first.cursor).toEqual({ source: 'dmesg', bootId: BOOT, lastSec: 4900.25 });
    const same = parseKernelLog(dmesg(1764558200, BOOT, 5100, [...lines, `[ 5050.000000] ${XID48}`]), first.cursor);
    expect(same.ok && same.xids.map((x) => x.xid)).toEqual([48]);
    const rebooted = parseKernelLog(
      dmesg(1764559000, 'aaaaaaaa-2a41-4f7b-9d1e-5a8b7c6d5e4f', 30, [`[   12.000000] ${XID79}`]),
      first.cursor,
    );
    expect(rebooted.ok && rebooted.xids.map((x) => x.xid)).toEqual([79]);
  });

  it('an answer without its source line, or dmesg without a boot id, is not read as "no Xid"', () => {
    expect(parseKernelLog('now 1\n', undefined).ok).toBe(false);
    expect(parseKernelLog(`now 1\nboot ${BOOT} 5\nsource none\n`, undefined)).toEqual({
      ok: false,
      reason: 'neither journalctl -k nor dmesg could be read by this login (dmesg_restrict?)',
    });
    expect(parseKernelLog(dmesg(1, '', 5, [`[ 1.0] ${XID79}`]), undefined).ok).toBe(false);
  });
});

describe('process states and recovery action', () => {
  it('the D/Z scan: a zombie leader wins over a D thread; no end line: unknown', () => {
    expect(parseStuckProcesses('4242 D\n4242 Z\n977 D\nend\n')).toEqual({ 4242: 'Z', 977: 'D' });
    expect(parseStuckProcesses('end\n')).toEqual({});
    expect(parseStuckProcesses('4242 D\n')).toBeNull();
  });

  it('recovery action per GPU; an old driver refuses the field (not supported, no failure); anything else is unknown', () => {
    expect(
      parseRecoveryActions(
        0,
        '0, GPU-0b1c2d3e-0000-0000-0000-000000000000, None\n1, GPU-0b1c2d3e-0000-0000-0000-000000000001, GPU Reset\n',
      ),
    ).toEqual({
      supported: true,
      actions: [
        { gpu: 0, uuid: 'GPU-0b1c2d3e-0000-0000-0000-000000000000', action: 'None' },
        { gpu: 1, uuid: 'GPU-0b1c2d3e-0000-0000-0000-000000000001', action: 'GPU Reset' },
      ],
    });
    expect(parseRecoveryActions(2, 'Field "gpu_recovery_action" is not a valid field to query.\n\n')).toEqual({
      supported: false,
    });
    expect(
      parseRecoveryActions(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"),
    ).toBeNull();
    expect(parseRecoveryActions(0, '0, GPU-0b1c2d3e-0000-0000-0000-000000000000, $(reboot)\n')).toBeNull();
  });
});

describe('the watchdog templates', () => {
  it('are fixed words; the kernel-log read takes one whole number of seconds and nothing else', () => {
    const t = { timeoutMs: 20_000 };
    // The cursor is the script's positional parameter: one constant script whatever the cursor.
    expect(kernelLogRead({ ...t, sinceSec: 1764558090 }).argv.slice(3)).toEqual(['sh', '1764558090']);
    expect(kernelLogRead({ ...t, sinceSec: 0 }).argv.slice(3)).toEqual(['sh', '0']);
    expect(() => kernelLogRead({ ...t, sinceSec: -1 })).toThrow();
    expect(() => kernelLogRead({ ...t, sinceSec: Number.NaN })).toThrow();
    expect(kernelLogRead({ ...t, sinceSec: 5 }).argv[2]).toBe(kernelLogRead({ ...t, sinceSec: 77 }).argv[2]);
    expect(stuckProcesses(t).argv).toEqual(stuckProcesses({ timeoutMs: 1 }).argv);
    expect(queryRecoveryAction(t).argv).toEqual([
      'nvidia-smi',
      '--query-gpu=index,uuid,gpu_recovery_action',
      '--format=csv,noheader,nounits',
    ]);
  });
});
