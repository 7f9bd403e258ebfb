/**
 * The one place that turns text gpu-medic did not write itself into Slack text. Pure.
 *
 * Machine text (process names, users and cmdlines from fuser or /proc, nvidia-smi error text,
 * SSH/worker error details, UUIDs, machine ids) and user text (the free-text reason of
 * `/gpu unstick`) are DATA, never markup. Every renderer in src/render/ (blocks, the fallback
 * `text`, approval cards, summaries), the ephemeral answers in commands/ and the demo page pass
 * such text through exactly one of these, once, at the point where it is put into Slack text:
 *
 * - `text(s)`: for mrkdwn prose (section/context text, message `text`). Slack's three escapes
 *   (`&` `<` `>` → `&amp;` `&lt;` `&gt;`) so no `<!channel>`, `<@U…>`, `<#C…>` or `<http…|label>`
 *   can form; the formatting characters `*` `_` `~` and the backtick become look-alikes
 *   (∗ ˍ ∼ ˋ) so no bold, italic, strike or code span opens or closes; newlines, tabs and every
 *   other control or bidi/line-separator character become visible symbols (␤ ␉ ␀…, �), so the
 *   text stays on its line and cannot forge an extra line of the card.
 * - `code(s)`: the same text as an inline code span (`` `…` ``): cmdlines, process names, users,
 *   machine ids. Inside a span `*_~` are inert and kept as they are; the backtick becomes ˋ so data
 *   can never close the span; `&<>` and control characters as in `text`.
 * - `codeLine(s)`: one line of a ``` block (the literal commands): like `code` without the
 *   backticks around it. Join lines with '\n' yourself; the data cannot add lines or close the fence.
 * - `richData(s)`: a rich_text `text` element, where Slack parses nothing: kept as it is, controls
 *   made visible (src/render/rich-text.ts builds the elements).
 * - `cell(s)`: a table block `raw_text` cell or a `plain_text` object. Slack renders those as plain
 *   text: no mrkdwn, no mention or link parsing, so `&<>` are NOT entity-escaped there (that would
 *   show `&lt;` to the reader: the double escape). As a second guard `<` and `>` become ‹ ›, so a
 *   cell can never hold a mention token even if a client parsed it; control characters as in `text`.
 * - `mention(userId)`: the only way a `<@…>` reaches Slack: gpu-medic's own mention of a requester
 *   or approver, written once from a Slack user ID (`U…`/`W…`). Anything that is not a user ID is
 *   rendered as `code` text instead.
 * - `rich(parts)`: a sentence gpu-medic composed (diagnosis, verdict, advice) as parts (build them
 *   with the `say` tag of src/text/rich.ts): plain strings go through `text`, `{ code }` through
 *   `code`, `{ user }` through `mention`. A core function that words a sentence around machine text
 *   returns a Rich, never pre-formatted mrkdwn.
 * - Clip before escaping (`clipChars`), never after: a cut would split an entity.
 *
 * Literals a renderer writes itself (`*Summary*`, `:warning:`, backticks around a fixed command
 * name) are markup and are not escaped. Never escape a string twice: escape where the data meets
 * the template, not the template.
 */

import type { Rich } from '../text/rich.ts';

const LOOK_ALIKE: Record<string, string> = { '*': '∗', _: 'ˍ', '~': '∼', '`': 'ˋ' };

/** C0 controls → Unicode control pictures (U+2400…), DEL → ␡; C1, line/paragraph separators, bidi and BOM → �. */
function visibleControls(s: string): string {
  return s.replace(
    /[\u0000-\u001f\u007f\u0080-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g,
    (c) => {
      const n = c.charCodeAt(0);
      if (c === '\n' || c === '\r') return '␤';
      if (n < 0x20) return String.fromCharCode(0x2400 + n);
      if (n === 0x7f) return '␡';
      if (c === '\u2028' || c === '\u2029' || c === '\u0085') return '␤';
      return '\ufffd';
    },
  );
}

/** Slack's three escapes, for text already laid out (e.g. a padded monospace table): `&` `<` `>`. */
export function entities(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/**
 * Code text before layout: controls made visible and backticks made look-alikes, entities NOT yet
 * escaped (they would change the width). Pass the laid-out result through `entities` exactly once.
 */
export function codeLayout(s: string): string {
  return visibleControls(s).replace(/`/g, LOOK_ALIKE['`'] ?? "'");
}

/** Machine or user text for mrkdwn prose: inert, one line. */
export function text(s: string): string {
  return entities(visibleControls(s)).replace(/[*_~`]/g, (c) => LOOK_ALIKE[c] ?? c);
}

/** One line of a ``` block: inert, one line, cannot close the fence. */
export function codeLine(s: string): string {
  return entities(codeLayout(s));
}

/** Machine text as an inline code span that the data cannot close or extend. */
export function code(s: string): string {
  const inner = codeLine(s);
  // An empty span (two backticks) would not render as a span; show a visible placeholder.
  return `\`${inner === '' ? '∅' : inner}\``;
}

/**
 * A Block Kit rich_text `text` element (src/render/rich-text.ts): Slack parses nothing in it, no
 * mrkdwn, no `<…>` token, no entity (a mention is a `user` element of its own), so the data is
 * kept exactly as it is, `&<>*_~` and backticks included; only controls become visible symbols
 * so it stays on its line and cannot forge another.
 */
export function richData(s: string): string {
  return visibleControls(s);
}

/** A table `raw_text` cell or a `plain_text` object: plain text, one line, no mention token. */
export function cell(s: string): string {
  return visibleControls(s).replace(/</g, '‹').replace(/>/g, '›');
}

const USER_ID = /^[UW][A-Z0-9]{2,20}$/;

/** gpu-medic's own mention of a Slack user (requester, approver): the only `<@…>` it writes. */
export function mention(userId: string): string {
  return USER_ID.test(userId) ? `<@${userId}>` : code(userId);
}

/** A composed sentence (src/text/rich.ts) as mrkdwn: every part escaped by its kind, once. */
export function rich(parts: Rich): string {
  return parts.map((p) => (typeof p === 'string' ? text(p) : 'code' in p ? code(p.code) : mention(p.user))).join('');
}

/** Cuts to at most `max` characters (code points), ending in "…" when cut; never splits a surrogate pair. */
export function clipChars(s: string, max: number): string {
  const chars = Array.from(s);
  return chars.length <= max ? s : `${chars.slice(0, Math.max(1, max - 1)).join('')}…`;
}
