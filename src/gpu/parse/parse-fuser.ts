import type { Holder, ParsedOutput } from '../types.ts';
import { emptyOutput } from './empty-output.ts';
import { abort, guard, type ParseResult, toInt } from './parse-failure.ts';

const HEADER = /^\s*USER\s+PID\s+ACCESS\s+COMMAND\s*$/;
const DEVICE = /^(\/\S*?):(?:\s+(.*))?$/;
/** psmisc access flags: c e f F r m, `.` when unset. */
const ACCESS = /^[.cefFrm]{1,5}$/;
/** stderr lines fuser prints about files it could not inspect: noise, not holders. */
const NOISE = [/^Cannot stat file /, /^Cannot open \/proc/, /^fuser: /, /: Permission denied$/];

export function looksLikeFuser(text: string): boolean {
  return text
    .split('\n', 200)
    .some((l) => HEADER.test(l) || /^Cannot stat file /.test(l) || /^\/dev\/nvidia[\w-]*:/.test(l));
}

/** `fuser -v` output (stdout and stderr interleaved, as `2>&1` or a terminal shows it). */
export function parseFuser(text: string): ParseResult<ParsedOutput> {
  return guard(() => {
    const out = emptyOutput('fuser');
    let device: string | null = null;
    const lines = text.replace(/\r\n/g, '\n').split('\n');
    lines.forEach((raw, i) => {
      const line = raw.trimEnd();
      if (line.trim() === '' || HEADER.test(line) || NOISE.some((n) => n.test(line.trim()))) return;
      if (/^Specified filename .* does not exist\.$/.test(line.trim())) abort(`fuser: ${line.trim()}`);
      let rest = line.trim();
      const dev = DEVICE.exec(line);
      if (dev !== null) {
        device = dev[1] ?? null;
        rest = (dev[2] ?? '').trim();
        if (rest === '') return;
      } else if (!/^\s/.test(line)) {
        abort(`unexpected fuser line ${i + 1}`);
      }
      if (device === null) abort(`fuser line ${i + 1} names no device`);
      const tokens = rest.split(/\s+/);
      const [user, pidText, access, ...command] = tokens;
      if (pidText === 'kernel') {
        if (access !== 'mount') abort(`unexpected kernel row at fuser line ${i + 1}`);
        if (!out.kernelMounts.includes(device)) out.kernelMounts.push(device);
        return;
      }
      const pid = toInt(pidText ?? '');
      if (user === undefined || pid === null || pid === 0 || access === undefined || !ACCESS.test(access)) {
        abort(`unreadable fuser row at line ${i + 1}`);
      }
      const holder: Holder = { device, pid, user, access, command: command.length > 0 ? command.join(' ') : null };
      out.holders.push(holder);
    });
    return out;
  });
}

/**
 * `fuser -v` with the two streams captured apart (as over SSH): PIDs and `kernel` go to stdout,
 * everything else to stderr. Rebuilds the interleaved text, then parses it.
 */
export function parseFuserStreams(stdout: string, stderr: string): ParseResult<ParsedOutput> {
  return guard(() => {
    const ids = stdout.trim() === '' ? [] : stdout.trim().split(/\s+/);
    let next = 0;
    const merged = stderr
      .replace(/\r\n/g, '\n')
      .split('\n')
      .map((line) => {
        const trimmed = line.trim();
        if (trimmed === '' || HEADER.test(line) || NOISE.some((n) => n.test(trimmed))) return line;
        const dev = DEVICE.exec(line.trimEnd());
        const prefix = dev !== null ? `${dev[1] ?? ''}:` : '';
        const rest = dev !== null ? (dev[2] ?? '').trim() : trimmed;
        if (rest === '') return line;
        const [user, ...after] = rest.split(/\s+/);
        const id = ids[next++];
        if (id === undefined) abort('fuser stderr has more rows than stdout has PIDs');
        return `${prefix} ${user ?? ''} ${id} ${after.join(' ')}`;
      })
      .join('\n');
    if (next !== ids.length) abort('fuser stdout has more PIDs than stderr has rows');
    const parsed = parseFuser(merged);
    if (!parsed.ok) abort(parsed.error.reason);
    return parsed.value;
  });
}
