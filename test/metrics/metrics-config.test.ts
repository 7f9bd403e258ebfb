import { describe, expect, it } from 'vitest';
import { parseEnv } from '../../src/config/env.ts';

describe('metrics settings', () => {
  it('off unless a port is set (empty, as compose passes it, is off too); loopback by default', () => {
    expect(parseEnv({}, 'worker').env?.GPU_MEDIC_METRICS_PORT).toBeUndefined();
    expect(parseEnv({ GPU_MEDIC_METRICS_PORT: '' }, 'worker').env?.GPU_MEDIC_METRICS_PORT).toBeUndefined();
    const on = parseEnv({ GPU_MEDIC_METRICS_PORT: '9464' }, 'worker').env;
    expect(on?.GPU_MEDIC_METRICS_PORT).toBe(9464);
    expect(on?.GPU_MEDIC_METRICS_BIND).toBe('127.0.0.1');
  });

  it('a bad port or address is refused in plain words', () => {
    expect(parseEnv({ GPU_MEDIC_METRICS_PORT: 'x9464' }, 'worker').problems).toEqual([
      { variable: 'GPU_MEDIC_METRICS_PORT', message: 'must be a whole number from 1 to 65535 (it is "x9464")' },
    ]);
    expect(parseEnv({ GPU_MEDIC_METRICS_BIND: 'all' }, 'bot').problems.map((p) => p.variable)).toContain(
      'GPU_MEDIC_METRICS_BIND',
    );
  });
});
