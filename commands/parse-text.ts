import { closest } from '../src/config/suggest.ts';
import { clipChars, code, text } from '../src/render/escape.ts';

export type ParsedCommand =
  | { kind: 'help' }
  | { kind: 'status'; target: string | 'all' }
  | { kind: 'unstick'; target: string; reason: string | null }
  | { kind: 'doctor'; target: string | 'all' }
  /** `cappedFrom`: the count asked for when it was over HISTORY_MAX (then `limit` is HISTORY_MAX). */
  | { kind: 'history'; target: string; limit: number; cappedFrom: number | null }
  | { kind: 'invalid'; message: string };

const SUBCOMMANDS = ['status', 'unstick', 'doctor', 'history', 'help'] as const;
const HISTORY_DEFAULT = 5;
export const HISTORY_MAX = 25;
const MAX_TEXT = 500;
const TARGET = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** Turns the slash-command text into a command. Pure; never touches the inventory or a shell. */
export function parseCommandText(raw: string): ParsedCommand {
  if (raw.length > MAX_TEXT)
    return {
      kind: 'invalid',
      message: `that text is ${raw.length} characters long; commands are short, e.g. \`/gpu status kpro5\``,
    };
  const text = raw.trim();
  if (text === '' || text === 'help' || text === '-h' || text === '--help') return { kind: 'help' };
  const words = text.split(/\s+/);
  const sub = (words[0] ?? '').toLowerCase();
  const rest = words.slice(1);
  switch (sub) {
    case 'status': {
      if (rest.length === 0) return { kind: 'status', target: 'all' };
      if (rest.length > 1)
        return { kind: 'invalid', message: '`status` takes one target, e.g. `/gpu status kpro5` or `/gpu status all`' };
      const t = (rest[0] ?? '').toLowerCase();
      if (t === 'all') return { kind: 'status', target: 'all' };
      if (!TARGET.test(t)) return { kind: 'invalid', message: `"${printable(rest[0] ?? '')}" is not a machine name` };
      return { kind: 'status', target: t };
    }
    case 'doctor': {
      if (rest.length > 1)
        return { kind: 'invalid', message: '`doctor` takes one target, e.g. `/gpu doctor ct129` or `/gpu doctor all`' };
      const t = (rest[0] ?? 'all').toLowerCase();
      if (t !== 'all' && !TARGET.test(t))
        return { kind: 'invalid', message: `"${printable(rest[0] ?? '')}" is not a machine name` };
      return { kind: 'doctor', target: t };
    }
    case 'unstick': {
      if (rest.length === 0)
        return { kind: 'invalid', message: '`unstick` needs a target, e.g. `/gpu unstick ct129 hung TP ranks`' };
      const t = (rest[0] ?? '').toLowerCase();
      if (!TARGET.test(t) || t === 'all')
        return {
          kind: 'invalid',
          message: `"${printable(rest[0] ?? '')}" is not a machine name (unstick works on one machine)`,
        };
      const reason = rest.slice(1).join(' ').slice(0, 300);
      return { kind: 'unstick', target: t, reason: reason === '' ? null : reason };
    }
    case 'history': {
      if (rest.length === 0)
        return {
          kind: 'invalid',
          message: '`history` needs a machine, e.g. `/gpu history ct129` or `/gpu history kpro5 10`',
        };
      if (rest.length > 2)
        return { kind: 'invalid', message: '`history` takes a machine and a count, e.g. `/gpu history kpro5 10`' };
      const t = (rest[0] ?? '').toLowerCase();
      if (t === 'all') return { kind: 'invalid', message: '`history` works on one machine, e.g. `/gpu history kpro5`' };
      if (!TARGET.test(t)) return { kind: 'invalid', message: `"${printable(rest[0] ?? '')}" is not a machine name` };
      const n = rest[1];
      if (n === undefined) return { kind: 'history', target: t, limit: HISTORY_DEFAULT, cappedFrom: null };
      const asked = /^[0-9]+$/.test(n) ? Number(n) : NaN;
      if (!(asked >= 1))
        return {
          kind: 'invalid',
          message: `"${printable(n)}" is not a number of incidents; give 1 to ${HISTORY_MAX}, e.g. \`/gpu history ${t} 10\``,
        };
      return asked > HISTORY_MAX
        ? { kind: 'history', target: t, limit: HISTORY_MAX, cappedFrom: asked }
        : { kind: 'history', target: t, limit: asked, cappedFrom: null };
    }
    default: {
      const guess = closest(sub, SUBCOMMANDS);
      return {
        kind: 'invalid',
        message: `"${printable(words[0] ?? '')}" is not a gpu-medic command${guess ? `; did you mean ${code(guess)}?` : ''}`,
      };
    }
  }
}

/** Echoes user text back safely (the one escape of src/render/escape.ts): no mentions, no formatting, bounded. */
export function printable(s: string): string {
  return text(clipChars(s, 41));
}

export const HELP_TEXT = [
  '*gpu-medic*: see and recover stuck NVIDIA GPUs.',
  '• `/gpu status <machine>`: GPU table (memory, util, holders) and RAM of a host or container',
  '• `/gpu status` or `/gpu status all`: one summary row per machine',
  '• `/gpu unstick <container> [reason]`: stop the processes holding its GPUs; host-level kills need a second approver',
  `• \`/gpu history <machine> [N]\`: the last N incidents (default ${HISTORY_DEFAULT}, at most ${HISTORY_MAX}) that touched it, only to you; a host's include its containers'`,
  '• `/gpu doctor [machine|all]` (admins): check, read-only, that the machines have what gpu-medic needs',
  '• `/gpu help`: this text',
].join('\n');
