/**
 * Block Kit `rich_text`: text elements Slack parses no markup in at all, so machine text in them
 * is data by construction; code is a style of an element, not backticks in the text (no
 * look-alike characters), and a mention is its own `user` element, never letters in a text
 * (docs.slack.dev/reference/block-kit/blocks/rich-text-block). Machine text only goes through
 * escape.ts `richData` (controls made visible, so it stays on its line). Pure; takes composed
 * sentences as Rich (src/text/rich.ts).
 */
import type { types } from '@slack/bolt';
import { richData } from './escape.ts';
import { packLines } from './blocks.ts';
import type { Part, Rich } from '../text/rich.ts';

type KnownBlock = types.KnownBlock;

interface Style {
  code?: true;
  bold?: true;
  italic?: true;
}

/** One inline element of a rich_text section: text (styled or not), a user mention, an emoji. */
export type Inline =
  | { type: 'text'; text: string; style?: Style }
  | { type: 'user'; user_id: string }
  | { type: 'emoji'; name: string };

type Sub =
  | { type: 'rich_text_section'; elements: Inline[] }
  | { type: 'rich_text_list'; style: 'bullet'; elements: Array<{ type: 'rich_text_section'; elements: Inline[] }> }
  | { type: 'rich_text_preformatted'; elements: Array<{ type: 'text'; text: string }> };

const USER_ID = /^[UW][A-Z0-9]{2,20}$/;
const EMOJI = /^[a-z0-9_+-]{1,40}$/;

/**
 * How much text one rich_text block holds before the next begins. Slack documents no limit for
 * rich_text; this is the section's 3,000, so a card has as many blocks as it had in mrkdwn and
 * never one huge block.
 */
const RICH_BLOCK_CHARS = 3_000;

/** Words (gpu-medic's or machine text) as a text element; empty text is dropped by the callers. */
export function rtText(s: string, style?: Style): Inline {
  return style ? { type: 'text', text: richData(s), style } : { type: 'text', text: richData(s) };
}

/** Machine text shown as code: a style, so nothing in it can open or close anything. */
export function rtCode(s: string): Inline {
  return { type: 'text', text: richData(s) || '∅', style: { code: true } };
}

/** gpu-medic's own mention of a Slack user; anything that is not a user id is code text. */
function rtUser(id: string): Inline {
  return USER_ID.test(id) ? { type: 'user', user_id: id } : rtCode(id);
}

/** A composed sentence's parts as inline elements: words as text, code as code, users as mentions. */
export function inlineOf(parts: Rich, style?: Style): Inline[] {
  return parts
    .filter((p) => typeof p !== 'string' || p !== '')
    .map((p: Part) => (typeof p === 'string' ? rtText(p, style) : 'code' in p ? rtCode(p.code) : rtUser(p.user)));
}

/** An emoji of gpu-medic's own (`lock`), then a space. */
export function rtEmoji(name: string): Inline[] {
  return EMOJI.test(name)
    ? [
        { type: 'emoji', name },
        { type: 'text', text: ' ' },
      ]
    : [];
}

const charsOf = (els: readonly Inline[]): number =>
  els.reduce((n, e) => n + (e.type === 'text' ? e.text.length : e.type === 'user' ? 12 : e.name.length + 2), 0);

/** Sections in one block: each ends its line, so the next starts below it. */
function sections(lines: readonly Inline[][]): Sub[] {
  return lines.map((l) => ({
    type: 'rich_text_section',
    elements: [...l, ...(lines.length > 1 ? [{ type: 'text', text: '\n' } as Inline] : [])],
  }));
}

const block = (elements: Sub[]): KnownBlock => ({ type: 'rich_text', elements }) as unknown as KnownBlock;

/** Lines (each a list of inline elements) as one rich_text block, one section per line. */
export function richLinesBlock(lines: readonly Inline[][]): KnownBlock {
  return block(sections(lines));
}

/** Bullet items as rich_text list blocks, as many as they need at RICH_BLOCK_CHARS each; none for no items. */
export function richListBlocks(items: readonly Inline[][]): KnownBlock[] {
  const out: KnownBlock[] = [];
  let cur: Inline[][] = [];
  let len = 0;
  const flush = () => {
    if (cur.length > 0)
      out.push(
        block([
          {
            type: 'rich_text_list',
            style: 'bullet',
            elements: cur.map((i) => ({ type: 'rich_text_section', elements: i })),
          },
        ]),
      );
    cur = [];
    len = 0;
  };
  for (const item of items) {
    const n = charsOf(item);
    if (cur.length > 0 && len + n > RICH_BLOCK_CHARS) flush();
    cur.push(item);
    len += n;
  }
  flush();
  return out;
}

/**
 * Literal lines (commands) as preformatted rich_text: verbatim, one per line, each line's data
 * kept on its line. A line too long for one block continues in the next with a shell-style ` \`.
 * `lead` (a heading line) opens the first block.
 */
export function richPreformattedBlocks(lines: readonly string[], lead: readonly Inline[] = []): KnownBlock[] {
  const chunks = packLines(
    lines.map((l) => richData(l)),
    RICH_BLOCK_CHARS,
    true,
  );
  const pre = (t: string): Sub => ({ type: 'rich_text_preformatted', elements: [{ type: 'text', text: t }] });
  const head: Sub[] = lead.length > 0 ? [{ type: 'rich_text_section', elements: [...lead] }] : [];
  if (chunks.length === 0) return head.length > 0 ? [block(head)] : [];
  return chunks.map((c, i) => block(i === 0 ? [...head, pre(c)] : [pre(c)]));
}

/** One line of a rich_text block: an optional emoji (gpu-medic's own), then the sentence's parts. */
export interface RichLine {
  emoji?: string;
  parts: Rich;
}

/** Lines as one rich_text block, each its own section (a line break between them). */
export function richTextBlock(lines: readonly RichLine[]): KnownBlock {
  return richLinesBlock(lines.map((l) => [...(l.emoji !== undefined ? rtEmoji(l.emoji) : []), ...inlineOf(l.parts)]));
}

/**
 * A sentence gpu-medic composed with backticks around code (as the `say` tag reads them) as
 * parts: each backtick pair's inside is code. An unpaired backtick leaves the rest plain words.
 * In rich_text a code part is only a style, so whatever the text holds, no markup can form.
 */
export function sentenceParts(s: string): Rich {
  const pieces = s.split('`');
  if (pieces.length % 2 === 0) return [s];
  return pieces.map((t, i) => (i % 2 === 1 ? { code: t } : t)).filter((p) => typeof p !== 'string' || p !== '');
}
