/**
 * Block Kit `rich_text`: text elements Slack parses no markup in at all, so machine text in them
 * is data by construction; code is a style of an element, not backticks in the text (no
 * look-alike characters). Pure; takes composed sentences as Rich (src/render/rich.ts).
 */
import type { types } from '@slack/bolt';
import { cell } from './escape.ts';
import type { Part, Rich } from './rich.ts';

type KnownBlock = types.KnownBlock;

type Element =
  | { type: 'text'; text: string; style?: { code?: boolean } }
  | { type: 'user'; user_id: string }
  | { type: 'emoji'; name: string };

const USER_ID = /^[UW][A-Z0-9]{2,20}$/;
const EMOJI = /^[a-z0-9_+-]{1,40}$/;

function element(p: Part): Element {
  if (typeof p === 'string') return { type: 'text', text: cell(p) };
  if ('code' in p) return { type: 'text', text: cell(p.code) || '∅', style: { code: true } };
  return USER_ID.test(p.user)
    ? { type: 'user', user_id: p.user }
    : { type: 'text', text: cell(p.user), style: { code: true } };
}

/** One line of a rich_text block: an optional emoji (gpu-medic's own), then the sentence's parts. */
export interface RichLine {
  emoji?: string;
  parts: Rich;
}

/** Lines as one rich_text block, each its own section (a line break between them). */
export function richTextBlock(lines: readonly RichLine[]): KnownBlock {
  const elements = lines.map((l) => ({
    type: 'rich_text_section',
    elements: [
      ...(l.emoji !== undefined && EMOJI.test(l.emoji)
        ? [{ type: 'emoji', name: l.emoji } as Element, { type: 'text', text: ' ' } as Element]
        : []),
      ...l.parts.filter((p) => typeof p !== 'string' || p !== '').map(element),
      // A section ends its line: the next starts below it.
      ...(lines.length > 1 ? [{ type: 'text', text: '\n' } as Element] : []),
    ],
  }));
  return { type: 'rich_text', elements } as unknown as KnownBlock;
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
