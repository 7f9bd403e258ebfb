/**
 * The watchdog's fixed read templates for a host (it warns before a user has to ask), run in the snapshot's
 * read script (one SSH session). Every word is a constant; the one value is an integer the worker computed
 * itself (the kernel log's start time), never text from Redis or a machine. Nothing here signals, resets, or
 * writes anything on the machine. Their output is parsed by src/watchdog/kernel-log.ts.
 */
import type { CommandSpec } from '../command-spec.ts';
import type { TemplateOptions } from './snapshot-commands.ts';

/** With no cursor yet (the first read of a host), lines of the last this many seconds count as new. */
export const FIRST_READ_LOOKBACK_SEC = 600;

/**
 * The NVIDIA lines of the kernel log since `sinceSec` (0: the last FIRST_READ_LOOKBACK_SEC s):
 * `journalctl -k` where the host has a journal, else `dmesg` (`source none` when neither can be
 * read). Prints `now`, `boot` (id, uptime) and `source` first, so the lines can be told new from
 * seen by the machine's own clocks.
 */
export function kernelLogRead(o: TemplateOptions & { sinceSec: number }): CommandSpec {
  const since = Math.floor(o.sinceSec);
  if (!Number.isSafeInteger(since) || since < 0)
    throw new Error('kernelLogRead: sinceSec must be a whole number of seconds');
  const script = [
    `printf 'now %s\\n' "$(date +%s)"`,
    `printf 'boot %s %s\\n' "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" "$(cut -d' ' -f1 /proc/uptime 2>/dev/null)"`,
    // The cursor is the script's one positional parameter, never spliced into it (one constant script: an agent verb).
    `s=$1; [ "$s" -gt 0 ] || s=$(( $(date +%s) - ${FIRST_READ_LOOKBACK_SEC} ))`,
    `if out=$(journalctl -k -q -o short-unix --no-pager --since=@"$s" 2>/dev/null); then echo 'source journal'; printf '%s\\n' "$out" | grep -F 'NVRM' | tail -n 1000`,
    `elif d=$(dmesg 2>/dev/null); then echo 'source dmesg'; printf '%s\n' "$d" | grep -F 'NVRM' | tail -n 1000`,
    // Neither could be read (no journal for this login, and dmesg_restrict): said, not taken as "no Xid".
    `else echo 'source none'; fi`,
    'true',
  ].join('\n');
  return {
    argv: ['sh', '-c', script, 'sh', String(since)],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'kernel-log', args: [String(since)] },
  };
}

/**
 * Every thread of the host in uninterruptible sleep (D) or a zombie (Z), as `<pid> <state>` (the
 * PID of its process, from the /proc path), then `end`. One fixed scan of /proc: the holders' PIDs
 * are matched by the worker, so no PID read from the machine is put into a command.
 *
 * Host-wide by design, not scoped to a container's cgroup: the watchdog watches a host, and the
 * PIDs it keeps are the host nvidia-smi's compute apps, whichever container (or the host) they
 * belong to; a state is kept only for a PID that list names (readForWatch), so other processes
 * the scan sees are dropped, and nothing here acts on a container's behalf.
 */
export function stuckProcesses(o: TemplateOptions): CommandSpec {
  const script = [
    `grep -s -H -E '^[0-9]+ \\(.*\\) [DZ] ' /proc/[0-9]*/task/[0-9]*/stat | sed -n 's|^/proc/\\([0-9][0-9]*\\)/task/[0-9]*/stat:[0-9]* (.*) \\([DZ]\\) .*|\\1 \\2|p'`,
    'echo end',
  ].join('\n');
  return { argv: ['sh', '-c', script], timeoutMs: o.timeoutMs, agent: { verb: 'stuck', args: [] } };
}

/** Each GPU's recovery action (drivers that support the field; older ones refuse the query, exit 2). */
export function queryRecoveryAction(o: TemplateOptions): CommandSpec {
  return {
    argv: ['nvidia-smi', '--query-gpu=index,uuid,gpu_recovery_action', '--format=csv,noheader,nounits'],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'recovery', args: [] },
  };
}
