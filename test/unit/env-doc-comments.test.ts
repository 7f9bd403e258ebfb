import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * Each doc comment in the settings table EnvSchema is built from (SETTING_ROWS, one row per
 * setting) and the setting it sits on: the key on the first line after the comment's end. A
 * comment followed by another comment is paired with '(another comment)'; one inside a row, with
 * that row's field (not a setting).
 */
function docCommentTargets(source: string): Array<{ comment: string; on: string }> {
  const start = source.indexOf('const SETTING_ROWS = {');
  const end = source.indexOf('\n} as const', start);
  expect(start).toBeGreaterThan(-1);
  expect(end).toBeGreaterThan(start);
  const lines = source.slice(start, end).split('\n');
  const out: Array<{ comment: string; on: string }> = [];
  for (let i = 0; i < lines.length; i++) {
    if (!lines[i]?.trim().startsWith('/**')) continue;
    let j = i;
    while (j < lines.length && !lines[j]?.includes('*/')) j++;
    const comment = lines
      .slice(i, j + 1)
      .join(' ')
      .replace(/\/\*\*|\*\/|\s\*\s/g, ' ')
      .replace(/\s+/g, ' ')
      .trim();
    const next = lines[j + 1]?.trim() ?? '';
    const key = /^([A-Z][A-Z0-9_]*):/.exec(next)?.[1];
    out.push({ comment, on: key ?? (next.startsWith('/**') ? '(another comment)' : next) });
    i = j;
  }
  return out;
}

describe('src/config/env.ts doc comments', () => {
  const targets = docCommentTargets(readFileSync(join(ROOT, 'src/config/env.ts'), 'utf8'));

  it('every doc comment in EnvSchema sits directly on a setting, never on another comment', () => {
    expect(targets.length).toBeGreaterThan(10);
    expect(targets.filter((t) => !/^[A-Z][A-Z0-9_]*$/.test(t.on))).toEqual([]);
  });

  it("WORKER_SECRET's and HEALTH_FILE's comments sit on those settings", () => {
    const on = (words: string) => targets.find((t) => t.comment.includes(words))?.on;
    expect(on('the key approved plans are sealed with')).toBe('GPU_MEDIC_WORKER_SECRET');
    expect(on('Heartbeat file the process rewrites')).toBe('GPU_MEDIC_HEALTH_FILE');
    expect(on('Admins (Slack user IDs)')).toBe('GPU_MEDIC_ADMINS');
    expect(on('the channel (ID) its alerts are posted to')).toBe('GPU_MEDIC_ALERTS_CHANNEL');
  });
});
