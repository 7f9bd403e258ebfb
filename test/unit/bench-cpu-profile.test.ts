/**
 * bench/cpu.ts summarizeCpuProfiles (what to make cheaper): a V8 CPU profile's self time by category. A native
 * or node-internal frame counts for its nearest caller that is neither (a socket write made by
 * ioredis is ioredis's); one with no such caller is node's own.
 */
import { describe, expect, it } from 'vitest';
import { type CpuProfile, summarizeCpuProfiles } from '../../bench/cpu.ts';

const NM = 'file:///app/node_modules';
const frame = (id: number, functionName: string, url: string, hitCount: number, children: number[] = []) => ({
  id,
  callFrame: { functionName, url },
  hitCount,
  children,
});

describe('summarizeCpuProfiles', () => {
  // 100 ms profiled, 10 samples: 10 ms a sample.
  const profile: CpuProfile = {
    startTime: 0,
    endTime: 100_000,
    nodes: [
      frame(1, '(root)', '', 0, [2, 3, 4, 5, 8]),
      frame(2, '(idle)', '', 4),
      frame(3, '(garbage collector)', '', 1),
      frame(4, 'sendCommand', `${NM}/ioredis/built/Redis.js`, 1, [6]),
      frame(5, 'onStreamRead', 'node:internal/stream_base_commons', 1),
      frame(6, 'write', 'node:net', 0, [7]),
      frame(7, 'writeUtf8String', '', 2),
      frame(8, 'decrypt', `${NM}/ssh2/lib/protocol/crypto.js`, 1),
    ],
  };

  it('gives native and node frames to the nearest package caller, event-loop frames to node, idle and GC their own', () => {
    const s = summarizeCpuProfiles([profile]);
    expect(s.profiledMs).toBe(100);
    expect(s.byCategoryMs).toEqual({
      idle: 40,
      ioredis: 30,
      GC: 10,
      'node internals (event loop, stream reads, timers)': 10,
      'ssh2 crypto': 10,
    });
    expect(s.topSelfMs[1]).toEqual({ fn: 'writeUtf8String', where: '', ms: 20 });
  });

  it('adds profiles up, each scaled by its own duration', () => {
    const s = summarizeCpuProfiles([profile, { ...profile, endTime: 200_000 }]);
    expect(s.profiledMs).toBe(300);
    expect(s.byCategoryMs.ioredis).toBe(90);
  });
});
