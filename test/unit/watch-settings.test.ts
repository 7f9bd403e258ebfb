import { describe, expect, it } from 'vitest';
import { parseEnv } from '../../src/config/env.ts';
import { watchOptionsOf } from '../../src/worker-process.ts';

describe('GPU_MEDIC_WATCH_MAX_CONNECTS', () => {
  it('defaults to 32, reaches the watchdog options, and a value out of range is refused by name', () => {
    const d = parseEnv({}, 'worker').env;
    if (!d) throw new Error('defaults do not parse');
    expect(watchOptionsOf(d, 'C0ALERTS01').maxConnects).toBe(32);
    const set = parseEnv({ GPU_MEDIC_WATCH_MAX_CONNECTS: '8' }, 'worker').env;
    if (!set) throw new Error('8 does not parse');
    expect(watchOptionsOf(set, 'C0ALERTS01').maxConnects).toBe(8);
    expect(parseEnv({ GPU_MEDIC_WATCH_MAX_CONNECTS: '0' }, 'worker').problems.map((p) => p.variable)).toEqual([
      'GPU_MEDIC_WATCH_MAX_CONNECTS',
    ]);
  });
});
