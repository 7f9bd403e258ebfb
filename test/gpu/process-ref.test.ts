import { describe, expect, it } from 'vitest';
import {
  pidIn,
  type ProcessIdentity,
  processKey,
  sameProcess,
  sameProcessAndNamespace,
} from '../../src/gpu/process-ref.ts';
import { signalTargetOf } from '../../src/agent-grammar/templates/signal.ts';

const p: ProcessIdentity = {
  hostPid: 41234,
  containerPid: 812,
  startTimeTicks: 987654,
  cmdline: 'python train.py',
  pidNs: 'pid:[4026532845]',
};

describe('process-ref', () => {
  it('is the same process only with the same host PID and start time', () => {
    expect(sameProcess(p, { hostPid: 41234, startTimeTicks: 987654 })).toBe(true);
    expect(sameProcess(p, { hostPid: 41234, startTimeTicks: 987655 })).toBe(false);
    expect(sameProcess(p, { hostPid: 41235, startTimeTicks: 987654 })).toBe(false);
  });

  it('with the namespace too, also needs the same PID namespace and container PID', () => {
    const reread: ProcessIdentity = { ...p, cmdline: 'other' };
    expect(sameProcessAndNamespace(p, reread)).toBe(true);
    expect(sameProcessAndNamespace(p, { ...p, pidNs: 'pid:[4026531836]' })).toBe(false);
    expect(sameProcessAndNamespace(p, { ...p, containerPid: 813 })).toBe(false);
    expect(sameProcessAndNamespace(p, { ...p, startTimeTicks: 1 })).toBe(false);
  });

  it('keys a process by host PID and start time', () => {
    expect(processKey(p)).toBe('41234@987654');
  });

  it('names a process by its host PID on the host and its container PID inside', () => {
    expect(pidIn(p, 'host')).toBe(41234);
    expect(pidIn(p, 'container')).toBe(812);
  });

  it('makes the signal target each side checks: the host side also checks the container PID', () => {
    expect(signalTargetOf(p, 'host')).toEqual({ pid: 41234, startTimeTicks: 987654, containerPid: 812 });
    expect(signalTargetOf(p, 'container')).toEqual({ pid: 812, startTimeTicks: 987654, containerPid: null });
  });
});
