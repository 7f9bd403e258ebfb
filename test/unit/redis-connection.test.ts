import { describe, expect, it } from 'vitest';
import { parseEnv } from '../../src/config/env.ts';
import { parseSentinel, sentinelOptions } from '../../src/redis/connection.ts';

const base = { REDIS_URL: 'redis://127.0.0.1:6379', REDIS_SENTINELS: [] as string[], REDIS_SENTINEL_NAME: 'gpu-medic' };

describe('Redis through Sentinel (REDIS_SENTINELS, REDIS_SENTINEL_NAME)', () => {
  it('without sentinels REDIS_URL is the server', () => {
    expect(sentinelOptions(base)).toBeNull();
  });

  it('with sentinels: their addresses, the primary name, and password and db from REDIS_URL', () => {
    const o = sentinelOptions({
      ...base,
      REDIS_URL: 'redis://:s3cr%40t@ignored:1/2',
      REDIS_SENTINELS: ['10.0.0.5:26379', '[fd00::6]:26380'],
      REDIS_SENTINEL_NAME: 'prod',
    });
    expect(o).toMatchObject({
      sentinels: [
        { host: '10.0.0.5', port: 26379 },
        { host: 'fd00::6', port: 26380 },
      ],
      name: 'prod',
      password: 's3cr@t',
      db: 2,
      failoverDetector: true,
    });
    expect(o?.reconnectOnError?.(new Error("READONLY You can't write against a read only replica."))).toBe(2);
    expect(o?.reconnectOnError?.(new Error('ERR wrong number of arguments'))).toBe(false);
  });

  it('parses host:port and refuses anything else', () => {
    expect(parseSentinel('sentinel-1:26379')).toEqual({ host: 'sentinel-1', port: 26379 });
    for (const bad of ['sentinel-1', ':26379', 'a:0', 'a:70000', 'a b:1', 'redis://a:1'])
      expect(parseSentinel(bad)).toBeNull();
  });

  it('config says plainly what is wrong with a sentinel list or name, and accepts a good one', () => {
    const bad = parseEnv({ REDIS_SENTINELS: '10.0.0.5:26379,nonsense', REDIS_SENTINEL_NAME: 'has space' }, 'worker');
    expect(bad.problems.map((p) => p.variable).sort()).toEqual(['REDIS_SENTINELS', 'REDIS_SENTINEL_NAME']);
    expect(bad.problems.find((p) => p.variable === 'REDIS_SENTINELS')?.message).toMatch(/host:port/);
    const good = parseEnv({ REDIS_SENTINELS: 'a:26379, b:26379', REDIS_SENTINEL_NAME: 'prod' }, 'worker');
    expect(good.env?.REDIS_SENTINELS).toEqual(['a:26379', 'b:26379']);
    expect(parseEnv({ REDIS_SENTINELS: '' }, 'worker').env?.REDIS_SENTINELS).toEqual([]);
  });
});
