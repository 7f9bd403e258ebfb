/**
 * Did-you-mean for a destructive command (never a wrong target): only a near-certain typo of one real id
 * is proposed (same id but for letter case, or two adjacent letters swapped in an id of 5+
 * characters; digits, which name a different container, must match exactly).
 */
import { describe, expect, it } from 'vitest';
import { nearCertainTypo } from '../../src/config/suggest.ts';

const IDS = ['ct129', 'ct130', 'training-box', 'kpro5'];

describe('nearCertainTypo', () => {
  it('proposes the id that differs only in letter case', () => {
    expect(nearCertainTypo('CT129', IDS)).toBe('ct129');
  });
  it('proposes the id with two adjacent letters swapped', () => {
    expect(nearCertainTypo('tc129', IDS)).toBe('ct129');
    expect(nearCertainTypo('trainnig-box', IDS)).toBe('training-box');
  });
  it('never proposes an id with other digits: ct999, ct12, ct1290 and ct192 name other containers', () => {
    for (const t of ['ct999', 'ct12', 'ct1290', 'ct192', 'ct139']) expect(nearCertainTypo(t, IDS)).toBeNull();
  });
  it('nothing for an edit that is not a case change or one swap', () => {
    for (const t of ['ctx129', 'c129', 'cz129', 'training-bxx', 'traning-box', 'trainign-bxo'])
      expect(nearCertainTypo(t, IDS)).toBeNull();
  });
  it('nothing for short ids, where a swap is as likely another name', () => {
    expect(nearCertainTypo('ab', ['ba'])).toBeNull();
    expect(nearCertainTypo('gpua', ['gpau'])).toBeNull();
  });
  it('nothing when two ids would fit', () => {
    expect(nearCertainTypo('Node-A', ['node-a', 'NODE-A'])).toBeNull();
  });
});
