import type { types } from '@slack/bolt';

/**
 * Block Kit text that never loses a line. Slack limits a section's (and a context element's) text
 * to 3,000 characters and a message to 50 blocks; instead of cutting a list at the limit, lines are
 * packed into as many blocks as they need, a line too long for one block is continued in the next
 * (a code line with a shell-style ` \` continuation), and a caller that could still exceed the
 * message's 50 blocks is told so (`fitsOneMessage`) and must say what it left out.
 * Pure; takes mrkdwn that is already escaped (src/render/escape.ts).
 */

type KnownBlock = types.KnownBlock;

const SECTION_TEXT_MAX = 3_000;
export const BLOCKS_PER_MESSAGE = 50;
/** Slack truncates a message's `text` past 40,000; the fallback stays well under it, and says when it is cut. */
export const FALLBACK_TEXT_MAX = 4_000;

const FENCE = '```';

/**
 * Splits one line at spaces into pieces of at most `max` characters. In prose, a space inside a
 * code span is never a split point (a span split over two blocks would leave both unbalanced).
 */
function splitLine(line: string, max: number, isCode: boolean): string[] {
  if (line.length <= max) return [line];
  const room = isCode ? max - 2 : max; // code pieces end in " \"
  const pieces: string[] = [];
  let rest = line;
  while (rest.length > (isCode ? max : room)) {
    let cut = -1;
    let ticks = 0;
    for (let i = 0; i < Math.min(rest.length, room); i++) {
      if (rest[i] === '`') ticks++;
      else if (rest[i] === ' ' && (isCode || ticks % 2 === 0) && i > 0) cut = i;
    }
    // No usable space: cut hard, but never inside an entity (`&amp;`) or a surrogate pair.
    if (cut <= 0) {
      cut = room;
      const amp = rest.lastIndexOf('&', cut);
      if (amp > cut - 6 && amp > 0 && rest.indexOf(';', amp) >= cut) cut = amp;
      const code = rest.charCodeAt(cut - 1);
      if (code >= 0xd800 && code <= 0xdbff) cut -= 1;
    }
    pieces.push(isCode ? `${rest.slice(0, cut)} \\` : rest.slice(0, cut));
    rest = rest.slice(cut).replace(/^ /, '');
  }
  pieces.push(rest);
  return pieces;
}

/** Groups lines into texts of at most `max` characters each (joined with '\n'), splitting only over-long lines. */
export function packLines(lines: readonly string[], max: number, isCode = false): string[] {
  const out: string[] = [];
  let cur: string[] = [];
  let len = 0;
  for (const line of lines.flatMap((l) => splitLine(l, max, isCode))) {
    const add = (cur.length > 0 ? 1 : 0) + line.length;
    if (cur.length > 0 && len + add > max) {
      out.push(cur.join('\n'));
      cur = [];
      len = 0;
    }
    len += (cur.length > 0 ? 1 : 0) + line.length;
    cur.push(line);
  }
  if (cur.length > 0) out.push(cur.join('\n'));
  return out;
}

/** Section blocks holding every line; `code` wraps each block's lines in a ``` fence. */
export function sectionsOf(lines: readonly string[], opts: { code?: boolean } = {}): KnownBlock[] {
  if (lines.length === 0) return [];
  const code = opts.code === true;
  const budget = code ? SECTION_TEXT_MAX - 2 * FENCE.length - 2 : SECTION_TEXT_MAX;
  return packLines(lines, budget, code).map((t) => ({
    type: 'section',
    text: { type: 'mrkdwn', text: code ? `${FENCE}\n${t}\n${FENCE}` : t },
  }));
}

/** Context blocks holding every line (a context block takes up to 10 text elements). */
export function contextsOf(lines: readonly string[]): KnownBlock[] {
  const texts = packLines(lines, SECTION_TEXT_MAX);
  const blocks: KnownBlock[] = [];
  for (let i = 0; i < texts.length; i += 10)
    blocks.push({
      type: 'context',
      elements: texts.slice(i, i + 10).map((t) => ({ type: 'mrkdwn' as const, text: t })),
    });
  return blocks;
}

/** A message's blocks past Slack's 50 are replaced by one that says how many were left out. */
export function limitBlocks(blocks: KnownBlock[]): KnownBlock[] {
  if (blocks.length <= BLOCKS_PER_MESSAGE) return blocks;
  const kept = blocks.slice(0, BLOCKS_PER_MESSAGE - 1);
  return [
    ...kept,
    {
      type: 'context',
      elements: [
        {
          type: 'mrkdwn',
          text: `… ${blocks.length - kept.length} more blocks did not fit in this message (Slack's limit is ${BLOCKS_PER_MESSAGE}); the incident log keeps everything.`,
        },
      ],
    },
  ];
}

/**
 * The message `text` fallback (notifications, screen readers): whole lines up to `max`, then a
 * last line that says how many lines were left out and where they are. Never cuts a line in half,
 * so no code fence or span is left open (a fence opened by a kept line is closed).
 */
export function fallbackText(lines: readonly string[], max = FALLBACK_TEXT_MAX, where = 'in the message'): string {
  const flat = lines.flatMap((l) => l.split('\n'));
  const note = (n: number): string => `… ${n} more ${n === 1 ? 'line' : 'lines'} ${where}`;
  const full = flat.join('\n');
  if (full.length <= max) return full;
  const kept: string[] = [];
  let len = 0;
  let inFence = false;
  for (const line of flat) {
    const closing = inFence !== (line.trim() === FENCE) ? FENCE.length + 1 : 0;
    if (len + line.length + 1 + closing + note(flat.length).length + 1 > max) break;
    kept.push(line);
    len += line.length + 1;
    if (line.trim() === FENCE) inFence = !inFence;
  }
  const omitted = flat.length - kept.length;
  if (inFence) kept.push(FENCE);
  return [...kept, note(omitted)].join('\n');
}
