import { describe, expect, it } from 'vitest';
import { cell, clipChars, code, codeLine, mention, rich, text } from '../../src/render/escape.ts';

describe('the one escape for machine and user text', () => {
  it('text: Slack entities, look-alikes for * _ ~ and backtick, newlines and controls made visible', () => {
    expect(text('<!channel> & <https://x|y>')).toBe('&lt;!channel&gt; &amp; &lt;https://x|y&gt;');
    expect(text('*b* _i_ ~s~ `c`')).toBe('∗b∗ ˍiˍ ∼s∼ ˋcˋ');
    expect(text('a\nb\r\nc\td\u0000e\u2028f\u202eg')).toBe('a␤b␤␤c␉d␀e␤f\ufffdg');
  });

  it('code: a span the data cannot close, with * _ ~ kept as they are inside it', () => {
    expect(code('a`b*c*_d_')).toBe('`aˋb*c*_d_`');
    expect(code('<@U0EVIL>\nx')).toBe('`&lt;@U0EVIL&gt;␤x`');
    expect(code('')).toBe('`∅`');
    expect(codeLine('```')).toBe('ˋˋˋ');
  });

  it('cell: raw_text is plain for Slack, so no entities (no double escape), and no mention token either', () => {
    expect(cell('a & b <!channel>\nc')).toBe('a & b ‹!channel›␤c');
  });

  it('mention: only a Slack user id becomes <@…>; anything else is shown as code', () => {
    expect(mention('U0BOB')).toBe('<@U0BOB>');
    expect(mention('W012ABCDE')).toBe('<@W012ABCDE>');
    expect(mention('U0BOB> <!channel')).toBe('`U0BOB&gt; &lt;!channel`');
    expect(mention('&lt;@U0BOB&gt;')).toBe('`&amp;lt;@U0BOB&amp;gt;`');
  });

  it('rich: each part escaped by its kind, exactly once', () => {
    expect(rich(['Denied by ', { user: 'U0BOB' }, ': ', { code: 'kill `x`' }, ' *now*'])).toBe('Denied by <@U0BOB>: `kill ˋxˋ` ∗now∗');
  });

  it('clipChars cuts by code point and marks the cut', () => {
    expect(clipChars('abcdef', 4)).toBe('abc…');
    expect(clipChars('😀😀😀', 2)).toBe('😀…');
    expect(clipChars('abc', 3)).toBe('abc');
  });
});
