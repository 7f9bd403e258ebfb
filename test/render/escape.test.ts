import { describe, expect, it } from 'vitest';
import { cell, clipChars, code, codeLine, mention, rich, text } from '../../src/render/escape.ts';
import { joinRich, richPlain, say, user } from '../../src/text/rich.ts';

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
    expect(rich(['Denied by ', { user: 'U0BOB' }, ': ', { code: 'kill `x`' }, ' *now*'])).toBe(
      'Denied by <@U0BOB>: `kill ˋxˋ` ∗now∗',
    );
  });

  it('clipChars cuts by code point and marks the cut', () => {
    expect(clipChars('abcdef', 4)).toBe('abc…');
    expect(clipChars('😀😀😀', 2)).toBe('😀…');
    expect(clipChars('abc', 3)).toBe('abc');
  });
});

describe('say: sentences gpu-medic words around data', () => {
  it('literal backticks make code parts, values inside them join the code, values outside are plain words', () => {
    const r = say`GPU ${0}: denied by ${user('U0BOB')}; run \`/gpu unstick ${'ct129'}\` again (${'held by `x` <!channel>'}).`;
    expect(r).toEqual([
      'GPU 0: denied by ',
      { user: 'U0BOB' },
      '; run ',
      { code: '/gpu unstick ct129' },
      ' again (held by `x` <!channel>).',
    ]);
    expect(rich(r)).toBe('GPU 0: denied by <@U0BOB>; run `/gpu unstick ct129` again (held by ˋxˋ &lt;!channel&gt;).');
    expect(richPlain(r)).toBe('GPU 0: denied by <@U0BOB>; run `/gpu unstick ct129` again (held by `x` <!channel>).');
  });

  it('a Rich value is spliced in whole; inside code it contributes its plain words', () => {
    const who = joinRich([[user('U0A')], [user('U0B')]], ', ');
    expect(say`ask ${who} to approve`).toEqual(['ask ', { user: 'U0A' }, ', ', { user: 'U0B' }, ' to approve']);
    expect(say`\`kill ${say`${'12'}`}\``).toEqual([{ code: 'kill 12' }]);
  });

  it('a value cannot open or close a code part', () => {
    const r = say`PID 1 ${'`*x*`'} left`;
    expect(rich(r)).toBe('PID 1 ˋ∗x∗ˋ left');
  });
});
