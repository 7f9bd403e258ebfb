import { describe, expect, it } from 'vitest';
import { parseCommandText, printable } from '../../commands/parse-text.ts';
import { closest, editDistance } from '../../src/config/suggest.ts';

describe('parseCommandText', () => {
  it('reads status with and without a target', () => {
    expect(parseCommandText('status kpro5')).toEqual({ kind: 'status', target: 'kpro5' });
    expect(parseCommandText('  STATUS   CT129 ')).toEqual({ kind: 'status', target: 'ct129' });
    expect(parseCommandText('status')).toEqual({ kind: 'status', target: 'all' });
    expect(parseCommandText('status all')).toEqual({ kind: 'status', target: 'all' });
  });
  it('reads doctor with a machine, all, or nothing (all); refuses two targets and odd names', () => {
    expect(parseCommandText('doctor')).toEqual({ kind: 'doctor', target: 'all' });
    expect(parseCommandText('doctor CT129')).toEqual({ kind: 'doctor', target: 'ct129' });
    expect(parseCommandText('doctor all')).toEqual({ kind: 'doctor', target: 'all' });
    expect(parseCommandText('doctor a b').kind).toBe('invalid');
    expect(parseCommandText('doctor $(reboot)')).toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('is not a machine name'),
    });
    expect(parseCommandText('docter ct129')).toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('did you mean `doctor`'),
    });
  });

  it('reads history with a machine and an optional count (default 5); a count over 25 is capped and says so', () => {
    expect(parseCommandText('history ct129')).toEqual({ kind: 'history', target: 'ct129', limit: 5, cappedFrom: null });
    expect(parseCommandText('HISTORY KPRO5 12')).toEqual({
      kind: 'history',
      target: 'kpro5',
      limit: 12,
      cappedFrom: null,
    });
    expect(parseCommandText('history kpro5 25')).toEqual({
      kind: 'history',
      target: 'kpro5',
      limit: 25,
      cappedFrom: null,
    });
    expect(parseCommandText('history kpro5 100')).toEqual({
      kind: 'history',
      target: 'kpro5',
      limit: 25,
      cappedFrom: 100,
    });
    expect(parseCommandText('history kpro5 99999999999999999999999')).toMatchObject({ kind: 'history', limit: 25 });
  });
  it('refuses history without a machine, of all, with a count that is not 1 or more, or with extra words', () => {
    expect(parseCommandText('history')).toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('`history` needs a machine'),
    });
    expect(parseCommandText('history all')).toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('one machine'),
    });
    for (const n of ['0', '-3', 'ten', '2.5', '1e3', '$(reboot)'])
      expect(parseCommandText(`history ct129 ${n}`), n).toMatchObject({
        kind: 'invalid',
        message: expect.stringContaining('is not a number of incidents'),
      });
    expect(parseCommandText('history ct129 5 more')).toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('a machine and a count'),
    });
    expect(parseCommandText('history $(reboot)')).toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('is not a machine name'),
    });
    expect(parseCommandText('histroy ct129')).toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('did you mean `history`'),
    });
    const hostile = parseCommandText('history ct129 <!channel>');
    expect(hostile.kind === 'invalid' && hostile.message).not.toContain('<!channel>');
  });
  it('treats empty text and help words as help', () => {
    for (const t of ['', '   ', 'help', '--help']) expect(parseCommandText(t)).toEqual({ kind: 'help' });
  });
  it('keeps the unstick reason as data', () => {
    expect(parseCommandText('unstick ct129 hung TP ranks; rm -rf /')).toEqual({
      kind: 'unstick',
      target: 'ct129',
      reason: 'hung TP ranks; rm -rf /',
    });
    expect(parseCommandText('unstick ct129')).toEqual({ kind: 'unstick', target: 'ct129', reason: null });
  });
  it('refuses shell metacharacters and odd targets as names', () => {
    for (const t of [
      'status $(reboot)',
      'status kpro5;ls',
      'status `id`',
      "status 'x'",
      'status ../etc',
      'unstick all',
    ]) {
      const r = parseCommandText(t);
      expect(r.kind, t).toBe('invalid');
    }
  });
  it('suggests the closest subcommand', () => {
    const r = parseCommandText('stauts kpro5');
    expect(r.kind).toBe('invalid');
    expect(r.kind === 'invalid' && r.message).toContain('did you mean `status`');
  });
  it('refuses over-long text without echoing it', () => {
    const r = parseCommandText(`status ${'a'.repeat(4000)}`);
    expect(r.kind).toBe('invalid');
    expect(r.kind === 'invalid' && r.message.length).toBeLessThan(200);
  });
  it('echoes user text without mentions or formatting', () => {
    expect(printable('<!channel>*bold*`x`')).not.toMatch(/[<>*`]/);
  });
});

describe('closest', () => {
  it('finds near misses and refuses far ones', () => {
    const ids = ['kpro5', 'kpro6', 'ct129', 'ct130'];
    expect(closest('kpro55', ids)).toBe('kpro5');
    expect(closest('ct12', ids)).toBe('ct129');
    expect(closest('zzzzzzzz', ids)).toBeNull();
    expect(editDistance('kitten', 'sitting')).toBe(3);
  });
});
