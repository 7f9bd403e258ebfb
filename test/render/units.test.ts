import { describe, expect, it } from 'vitest';
import { count, countRounded, duration, mib, noun, plural, seconds, wholeSeconds } from '../../src/text/units.ts';

describe('units', () => {
  it('writes counts in en-US grouping and an unknown count as ?', () => {
    expect(count(12345)).toBe('12,345');
    expect(count(0)).toBe('0');
    expect(count(null)).toBe('?');
  });

  it('rounds to a whole number before grouping with countRounded, where count keeps the decimals', () => {
    expect(countRounded(12345.6)).toBe('12,346');
    expect(count(12345.6)).toBe('12,345.6');
  });

  it('writes MiB with the unit, and an unknown amount as ? or the word the caller gives', () => {
    expect(mib(81920)).toBe('81,920 MiB');
    expect(mib(null)).toBe('?');
    expect(mib(null, '? MiB')).toBe('? MiB');
  });

  it('writes seconds with one decimal, and whole seconds rounded', () => {
    expect(seconds(90_000)).toBe('90.0 s');
    expect(seconds(1_234)).toBe('1.2 s');
    expect(wholeSeconds(90_000)).toBe('90 s');
    expect(wholeSeconds(1_500)).toBe('2 s');
  });

  it('writes a duration in seconds under a minute, in minutes and seconds from a minute on, unknown when not a time', () => {
    expect(duration(59_900)).toBe('59.9 s');
    expect(duration(125_000)).toBe('2 min 5 s');
    expect(duration(-1)).toBe('unknown');
    expect(duration(Number.NaN)).toBe('unknown');
  });

  it('says the singular for exactly one and the plural otherwise, with the count grouped', () => {
    expect(noun(1, 'process', 'processes')).toBe('process');
    expect(noun(0, 'process', 'processes')).toBe('processes');
    expect(plural(1, 'machine')).toBe('1 machine');
    expect(plural(1200, 'machine')).toBe('1,200 machines');
    expect(plural(2, 'open alert', 'open alerts')).toBe('2 open alerts');
  });
});
