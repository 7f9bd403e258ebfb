/**
 * Machine and user text into Markdown (CommonMark + GitHub tables), for the post-mortem export
 * (src/render/incident-markdown.ts): the Markdown twin of src/render/escape.ts, which is for Slack.
 * Pure. Data never becomes markup:
 *
 * - `mdText(s)`: prose or a table cell. The characters that make markup are backslash-escaped
 *   (`\` `` ` `` `*` `_` `[` `]` `<` `>` `!` `|` `~` `&`, the `:` of `://`, the `.` of `www.`, and a
 *   leading `#` `>` `+` `-` `=` or list number), so no emphasis, link, image, HTML tag, entity,
 *   autolink, heading, list, quote or table pipe can form; the rest stays readable. Newlines, tabs and every
 *   other control, bidi or line-separator character become visible symbols (␤ ␉ ␀…, �), so the text
 *   stays in its line and its table cell.
 * - `mdCode(s)` / `mdCellCode(s)`: an inline code span (in prose / in a table cell): the span's
 *   backtick run is longer than any run in the data, so the data cannot close it; controls as in
 *   `mdText`. In a table cell, text holding a `|` is shown as `mdText` instead (GitHub tables split
 *   cells on a pipe even inside a code span).
 * - `mdFence(s, info)`: a fenced code block holding `s` literally (its lines kept): the fence is
 *   longer than any backtick run in the data, so no line of it can close the block; controls other
 *   than newline and tab become visible, a CR included (it would end a line).
 * - `mdRich(parts)`: a sentence gpu-medic composed (src/text/rich.ts): words via `mdText`, code via
 *   `mdCode`, a user as the code span of their Slack ID (Markdown has no mentions), or as the
 *   caller writes people (the post-mortem's `@name`, src/render/incident-markdown.ts).
 */
import type { Rich } from '../text/rich.ts';

function visible(s: string, keepNewlines: boolean): string {
  return s.replace(
    /[\u0000-\u001f\u007f\u0080-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g,
    (c) => {
      const n = c.charCodeAt(0);
      if (keepNewlines && (c === '\n' || c === '\t')) return c;
      if (c === '\n' || c === '\u2028' || c === '\u2029' || c === '\u0085') return '␤';
      if (c === '\r') return '␍';
      if (n < 0x20) return String.fromCharCode(0x2400 + n);
      if (n === 0x7f) return '␡';
      return '\ufffd';
    },
  );
}

export function mdText(s: string): string {
  return visible(s, false)
    .replace(/[\\`*_[\]<>!|~&]/g, '\\$&')
    .replace(/:(?=\/\/)/g, '\\:')
    .replace(/(www)\./gi, '$1\\.')
    .replace(/^(\s*)([#>+=-])/, '$1\\$2')
    .replace(/^(\s*\d+)([.)])/, '$1\\$2');
}

function longestRun(s: string, ch: string): number {
  let best = 0;
  let run = 0;
  for (const c of s) {
    run = c === ch ? run + 1 : 0;
    if (run > best) best = run;
  }
  return best;
}

function span(inner: string): string {
  if (inner === '') return '`∅`';
  const ticks = '`'.repeat(longestRun(inner, '`') + 1);
  // A space on each side keeps a leading or trailing backtick off the delimiters (CommonMark strips one).
  const pad = inner.startsWith('`') || inner.endsWith('`') || (inner.startsWith(' ') && inner.endsWith(' ')) ? ' ' : '';
  return `${ticks}${pad}${inner}${pad}${ticks}`;
}

export function mdCode(s: string): string {
  return span(visible(s, false));
}

export function mdCellCode(s: string): string {
  // A GitHub table splits cells on a `|` even inside a code span, and `\|` after a backslash in the
  // data would be read as an escaped backslash then a delimiter: such text is shown as escaped words.
  return s.includes('|') ? mdText(s) : span(visible(s, false));
}

export function mdFence(s: string, info = ''): string {
  const body = visible(s, true);
  const fence = '`'.repeat(Math.max(3, longestRun(body, '`') + 1));
  return `${fence}${info}\n${body}\n${fence}`;
}

/**
 * `cell`: the sentence goes into a table cell (code parts as `mdCellCode`). `user`: how a person
 * is written (the post-mortem's `@name` with a footnote); by default the code span of their id.
 */
export function mdRich(parts: Rich, o: { cell?: boolean; user?: (id: string) => string } = {}): string {
  const c = o.cell ? mdCellCode : mdCode;
  const who = o.user ?? c;
  return parts.map((p) => (typeof p === 'string' ? mdText(p) : 'code' in p ? c(p.code) : who(p.user))).join('');
}
