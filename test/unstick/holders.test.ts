import { describe, expect, it } from 'vitest';
import { buildHolders, identityOf, recheckTarget } from '../../src/gpu/holders.ts';
import { sameProcess } from '../../src/gpu/process-ref.ts';
import {
  CT129_INIT,
  CT129_NS,
  CT131_JOB,
  MONITOR_CT_PID,
  TP0,
  TP2,
  app,
  ctView,
  readings,
  seedS2,
} from './seed-fleet.ts';

describe('buildHolders', () => {
  it('places the seed ranks in ct129 with host and container PIDs, start time, cmdline and the container uid', () => {
    const { host, container } = seedS2();
    const r = buildHolders(host, container);
    const inTarget = r.holders.filter((h) => h.inTarget);
    expect(
      inTarget.map((h) => [h.gpuIndex, h.usedMiB, h.process.hostPid, h.process.containerPid, h.process.cmdline]),
    ).toEqual([
      [0, 96_413, 812_345, 57, 'sglang::scheduler_TP0'],
      [2, 96_417, 812_351, 63, 'sglang::scheduler_TP2'],
    ]);
    expect(inTarget[0]?.process).toMatchObject({ startTimeTicks: 48_113_902, pidNs: CT129_NS, uid: 0, state: 'S' });
    expect(inTarget.every((h) => h.seenInContainer && !h.isContainerInit)).toBe(true);
  });

  it('marks another container’s GPU job as outside, never in the target', () => {
    const r = buildHolders(seedS2().host, seedS2().container);
    const outside = r.holders.filter((h) => !h.inTarget);
    expect(outside).toHaveLength(1);
    expect(outside[0]).toMatchObject({ gpuIndex: 5, inTarget: false, isContainerInit: false, seenInContainer: false });
    expect(outside[0]?.process).toMatchObject({
      hostPid: 823_001,
      containerPid: 44,
      cmdline: 'python3 train.py --epochs 3',
    });
  });

  it('reports the monitor (device open, no memory) apart, once, with both devices', () => {
    const r = buildHolders(seedS2().host, seedS2().container);
    expect(r.deviceOnly).toEqual([
      { containerPid: MONITOR_CT_PID, devices: ['/dev/nvidiactl', '/dev/nvidia0'], user: 'root', command: 'python3' },
    ]);
    expect(r.holders.some((h) => h.process.containerPid === MONITOR_CT_PID)).toBe(false);
  });

  it('flags the container init (PID 1 in its namespace)', () => {
    const { host, container } = seedS2();
    const r = buildHolders(
      { ...host, apps: [app(CT129_INIT, 0, 96_413)], procs: readings([CT129_INIT.pid], [CT129_INIT]) },
      { ...container, holders: [] },
    );
    expect(r.holders[0]).toMatchObject({ inTarget: true, isContainerInit: true });
    expect(r.holders[0]?.process.containerPid).toBe(1);
  });

  it('does not lend the container reading to a different process reusing the container PID', () => {
    const { host } = seedS2();
    const reused = { ...ctView(TP0), start: TP0.start + 5_000, uid: 1000 };
    const r = buildHolders(host, {
      holders: [{ device: '/dev/nvidia0', pid: 57, user: 'bob', access: 'F', command: 'python3' }],
      procs: readings([57], [reused]),
    });
    const tp0 = r.holders.find((h) => h.process.hostPid === TP0.pid);
    expect(tp0?.seenInContainer).toBe(false);
    expect(tp0?.process.uid).toBeUndefined();
  });

  it('keeps a compute app whose host PID exited meanwhile as unresolved, not as a holder', () => {
    const { host, container } = seedS2();
    const r = buildHolders(
      { ...host, procs: readings([TP0.pid, TP2.pid, CT131_JOB.pid], [TP0, CT131_JOB]) },
      container,
    );
    expect(r.unresolved).toEqual([
      { gpuIndex: 2, gpuUuid: host.apps[1]?.gpuUuid, usedMiB: 96_417, hostPid: TP2.pid, reason: 'gone' },
    ]);
    expect(r.holders.some((h) => h.process.hostPid === TP2.pid)).toBe(false);
  });
});

describe('sameProcess and recheckTarget', () => {
  const planned = identityOf(
    readings([TP0.pid], [TP0])[0] ?? { pid: 0, stat: null, nsPids: null, uid: null, pidNs: null, cmdline: null },
  );
  if (planned === null) throw new Error('fixture');

  it('sameProcess needs PID and start time', () => {
    expect(sameProcess(planned, { hostPid: 812_345, startTimeTicks: 48_113_902 })).toBe(true);
    expect(sameProcess(planned, { hostPid: 812_345, startTimeTicks: 48_113_903 })).toBe(false);
    expect(sameProcess(planned, { hostPid: 812_346, startTimeTicks: 48_113_902 })).toBe(false);
  });

  const base = { view: 'host' as const, targetPidNs: CT129_NS, gpuHostPids: new Set([TP0.pid]) };
  it('passes the unchanged process still holding memory', () => {
    expect(recheckTarget(planned, { ...base, reading: readings([TP0.pid], [TP0])[0] })).toBeNull();
  });
  it('refuses an exited process, a reused PID, one that left the namespace, one no longer holding memory', () => {
    expect(recheckTarget(planned, { ...base, reading: readings([TP0.pid], [])[0] })).toBe('gone');
    expect(
      recheckTarget(planned, { ...base, reading: readings([TP0.pid], [{ ...TP0, start: TP0.start + 1 }])[0] }),
    ).toBe('pid_reused');
    expect(recheckTarget(planned, { ...base, reading: readings([TP0.pid], [{ ...TP0, ns: CT131_JOB.ns }])[0] })).toBe(
      'left_namespace',
    );
    expect(
      recheckTarget(planned, { ...base, gpuHostPids: new Set([TP2.pid]), reading: readings([TP0.pid], [TP0])[0] }),
    ).toBe('no_gpu_memory');
  });
  it('re-checks by container PID from inside the container (tier-1 survivors)', () => {
    const ct = readings([57], [ctView(TP0)])[0];
    expect(
      recheckTarget(planned, { view: 'container', targetPidNs: CT129_NS, gpuHostPids: null, reading: ct }),
    ).toBeNull();
    expect(
      recheckTarget(planned, {
        view: 'container',
        targetPidNs: CT129_NS,
        gpuHostPids: null,
        reading: readings([57], [{ ...ctView(TP0), start: 1 }])[0],
      }),
    ).toBe('pid_reused');
  });
});
