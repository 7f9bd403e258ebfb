/**
 * How the demo page draws a message's blocks, close enough to Slack to judge a thread by eye:
 * - mrkdwn (section text and fields, context elements): ``` blocks, `code` spans, *bold*, _italic_,
 *   ~strike~, `<@U…>` mentions, `<url|label>` links; Slack's three entities decoded once; every
 *   piece HTML-escaped once;
 * - rich_text: sections, bullet lists, preformatted and quotes; text elements literally (Slack
 *   parses nothing in them) with their styles; user elements as @id, emoji as :name:;
 * - header, divider, table (raw_text cells), image alt text;
 * - controls (actions blocks and section accessories) as Slack's bot sent them: a button as a
 *   `<button>`, a static_select or overflow as a `<select>` of its options, each carrying what a
 *   click needs in data attributes (action_id, block_id, value, the confirm dialog's text), so the
 *   page can send the very block_actions Slack would. Labels, values and options are data, escaped.
 * Self-contained on purpose: the page runs this very function (its source is put in the page), so
 * it uses nothing from outside its body.
 */
export function demoBlocksHtml(blocks: readonly unknown[]): string {
  type Obj = Record<string, unknown>;
  const obj = (v: unknown): Obj => (typeof v === 'object' && v !== null ? (v as Obj) : {});
  const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
  const str = (v: unknown): string => (typeof v === 'string' ? v : '');
  const esc = (s: string): string =>
    s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] ?? c);
  const decode = (s: string): string => s.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');

  /** mrkdwn outside code: tokens on the still-encoded text (a raw `<` is Slack's own), words decoded then escaped. */
  const inline = (s: string): string => {
    const re =
      /<@([UW][A-Z0-9]+)>|<(https?:\/\/[^|>\s]+)(?:\|([^>]*))?>|\*([^*\n]+)\*|_([^_\n]+)_|~([^~\n]+)~|:([a-z0-9_+'-]+):/g;
    let out = '';
    let last = 0;
    for (let m = re.exec(s); m !== null; m = re.exec(s)) {
      out += esc(decode(s.slice(last, m.index)));
      if (m[1] !== undefined) out += `<span class="mention">@${esc(m[1])}</span>`;
      else if (m[2] !== undefined) out += `<a href="${esc(decode(m[2]))}">${esc(decode(m[3] ?? m[2]))}</a>`;
      else if (m[4] !== undefined) out += `<b>${inline(m[4])}</b>`;
      else if (m[5] !== undefined) out += `<i>${inline(m[5])}</i>`;
      else if (m[6] !== undefined) out += `<s>${inline(m[6])}</s>`;
      else if (m[7] !== undefined) out += `:${esc(m[7])}:`;
      last = re.lastIndex;
    }
    return out + esc(decode(s.slice(last)));
  };
  /** Code spans first, held as placeholders so bold or italic around them still applies (`*\`ct129\`*`). */
  const codeSpans = (piece: string): string => {
    const codes: string[] = [];
    const held = piece.replace(/\uE000/g, '').replace(/`([^`\n]+)`/g, (_m, c: string) => {
      codes.push(`<code>${esc(decode(c))}</code>`);
      return `\uE000${codes.length - 1}\uE000`;
    });
    return inline(held).replace(/\uE000(\d+)\uE000/g, (_m, i: string) => codes[Number(i)] ?? '');
  };
  const mrkdwn = (s: string): string =>
    s
      .split(/```\n?([\s\S]*?)\n?```/)
      .map((piece, i) => (i % 2 === 1 ? `<pre>${esc(decode(piece))}</pre>` : codeSpans(piece)))
      .join('');
  const textObject = (t: unknown): string =>
    obj(t).type === 'mrkdwn' ? mrkdwn(str(obj(t).text)) : esc(str(obj(t).text));

  /** A rich_text inline element: its text literally, styled. */
  const richInline = (e: unknown): string => {
    const o = obj(e);
    if (o.type === 'user') return `<span class="mention">@${esc(str(o.user_id))}</span>`;
    if (o.type === 'emoji') return `:${esc(str(o.name))}:`;
    if (o.type === 'link') return `<a href="${esc(str(o.url))}">${esc(str(o.text) || str(o.url))}</a>`;
    let h = esc(str(o.text));
    const st = obj(o.style);
    if (st.code === true) h = `<code>${h}</code>`;
    if (st.bold === true) h = `<b>${h}</b>`;
    if (st.italic === true) h = `<i>${h}</i>`;
    if (st.strike === true) h = `<s>${h}</s>`;
    return h;
  };
  const richSub = (sub: unknown): string => {
    const o = obj(sub);
    const inner = list(o.elements).map(richInline).join('');
    if (o.type === 'rich_text_list')
      return `<ul>${list(o.elements)
        .map((item) => `<li>${list(obj(item).elements).map(richInline).join('')}</li>`)
        .join('')}</ul>`;
    if (o.type === 'rich_text_preformatted') return `<pre>${inner}</pre>`;
    if (o.type === 'rich_text_quote') return `<blockquote>${inner}</blockquote>`;
    return `<span>${inner}</span>`;
  };

  /** A control: what a click sends rides in data attributes (the page posts them back, the server checks them). */
  const control = (e: unknown, blockId: string): string => {
    const o = obj(e);
    const attr = (name: string, v: string): string => ` data-${name}="${esc(v)}"`;
    const cf = obj(o.confirm);
    const confirmText = o.confirm === undefined ? '' : `${str(obj(cf.title).text)}\n${decode(str(obj(cf.text).text))}`;
    const common = `${attr('action-id', str(o.action_id))}${attr('block-id', blockId)}${confirmText === '' ? '' : attr('confirm', confirmText)}`;
    if (o.type === 'button') {
      const style = o.style === 'primary' || o.style === 'danger' ? ` ${o.style}` : '';
      return `<button class="act${style}"${common}${attr('value', str(o.value))}>${esc(str(obj(o.text).text))}</button>`;
    }
    if (o.type === 'static_select' || o.type === 'overflow') {
      const options = [...list(o.options), ...list(o.option_groups).flatMap((g) => list(obj(g).options))];
      const label = o.type === 'overflow' ? '⋯' : str(obj(o.placeholder).text);
      return `<select class="act"${common}><option value="">${esc(label)}</option>${options
        .map((op) => `<option value="${esc(str(obj(op).value))}">${esc(str(obj(obj(op).text).text))}</option>`)
        .join('')}</select>`;
    }
    return `<span class="ctl">${esc(str(obj(o.text).text) || str(obj(o.placeholder).text) || str(o.type))}</span>`;
  };

  return blocks
    .map((block) => {
      const b = obj(block);
      switch (b.type) {
        case 'section':
          return `<div class="sec">${b.text !== undefined ? textObject(b.text) : ''}${list(b.fields)
            .map((f) => `<div class="field">${textObject(f)}</div>`)
            .join('')}${b.accessory !== undefined ? control(b.accessory, str(b.block_id)) : ''}</div>`;
        case 'actions':
          return `<div class="actions">${list(b.elements)
            .map((e) => control(e, str(b.block_id)))
            .join('')}</div>`;
        case 'context':
          return `<div class="ctx">${list(b.elements).map(textObject).join(' ')}</div>`;
        case 'header':
          return `<h4>${textObject(b.text)}</h4>`;
        case 'divider':
          return '<hr>';
        case 'rich_text':
          return `<div class="rich">${list(b.elements).map(richSub).join('')}</div>`;
        case 'table':
          return `<table>${list(b.rows)
            .map(
              (r) =>
                `<tr>${list(r)
                  .map((c) => `<td>${esc(str(obj(c).text))}</td>`)
                  .join('')}</tr>`,
            )
            .join('')}</table>`;
        case 'image':
          return `<div class="ctx">[image: ${esc(str(b.alt_text))}]</div>`;
        default:
          return '';
      }
    })
    .join('');
}
