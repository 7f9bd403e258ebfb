/**
 * Fake `journalctl` and `dmesg` of a simulated host, printing the lines the test put into its kernel
 * log (`fleet.kernelLog`, `fleet.logXid`; `m/<host>/kmsg.jsonl`) in the real tools' formats:
 *   journalctl -k -o short-unix: `1764558000.123456 kpro5 kernel: NVRM: Xid (PCI:0000:01:00): 79, ...`
 *   dmesg:                       `[  123.456789] NVRM: Xid (PCI:0000:01:00): 79, ...` (seconds since boot,
 *                                from this machine's real /proc/uptime, as the real ring buffer)
 * Supported: `journalctl [-k|--dmesg] [-q] [-o short-unix] [--no-pager] [--since=@SECONDS]`, `dmesg`.
 * Anything else is refused (exit 1) so a template change can't pass unnoticed.
 */
import { readFileSync } from 'node:fs';
import { appendToolLog, readKernelLog } from '../state.ts';
import type { MachineContext, ToolResult } from './machine-context.ts';

export function runJournalctl(argv: string[], ctx: MachineContext): ToolResult {
  appendToolLog(ctx.dir, 'journalctl', argv);
  let since = 0;
  let kernel = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (a === '-k' || a === '--dmesg') kernel = true;
    else if (a === '-q' || a === '--quiet' || a === '--no-pager') continue;
    else if (a === '-o' && argv[i + 1] === 'short-unix') i++;
    else if (a === '--output=short-unix') continue;
    else if (/^--since=@\d+$/.test(a)) since = Number(a.slice('--since=@'.length));
    else return { stdout: '', stderr: `fake journalctl: unsupported argument ${a}\n`, exitCode: 1 };
  }
  if (!kernel) return { stdout: '', stderr: 'fake journalctl: only the kernel log (-k) is simulated\n', exitCode: 1 };
  const lines = readKernelLog(ctx.info.hostDir).filter((l) => l.ts >= since * 1000);
  const stdout = lines
    .map(
      (l) =>
        `${Math.floor(l.ts / 1000)}.${String((l.ts % 1000) * 1000).padStart(6, '0')} ${ctx.info.hostId} kernel: ${l.text}\n`,
    )
    .join('');
  return { stdout, stderr: '', exitCode: 0 };
}

export function runDmesg(argv: string[], ctx: MachineContext): ToolResult {
  appendToolLog(ctx.dir, 'dmesg', argv);
  if (argv.length > 0)
    return { stdout: '', stderr: `fake dmesg: unsupported argument ${argv.join(' ')}\n`, exitCode: 1 };
  const uptimeSec = Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
  const bootMs = Date.now() - uptimeSec * 1000;
  const stdout = readKernelLog(ctx.info.hostDir)
    .map((l) => {
      const us = Math.max(0, Math.round((l.ts - bootMs) * 1000));
      return `[${String(Math.floor(us / 1e6)).padStart(5, ' ')}.${String(us % 1e6).padStart(6, '0')}] ${l.text}\n`;
    })
    .join('');
  return { stdout, stderr: '', exitCode: 0 };
}
