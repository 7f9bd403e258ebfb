import { describe, expect, it } from 'vitest';
import { buildHolders, identityOf, recheckTarget } from '../../src/gpu/holders.ts';
import { containerHolderRows } from '../../src/gpu/gpu-holder-rows.ts';
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

describe('buildHolders: users through the container’s uid map, membership through its cgroup', () => {
  const DEFAULT_MAP = { kind: 'default' as const, ranges: [{ inside: 0, host: 100_000, count: 65_536 }] };
  const OWN_MAP = { kind: 'custom' as const, ranges: [{ inside: 0, host: 200_000, count: 65_536 }] };
  const noContainerView = { holders: [], procs: [] };

  it('a holder the container did not read is shown as the container’s user by its map, with its host uid', () => {
    const { host } = seedS2();
    const r = buildHolders({ ...host, uidMap: DEFAULT_MAP }, noContainerView);
    const tp0 = r.holders.find((h) => h.process.hostPid === TP0.pid);
    expect(tp0?.process).toMatchObject({ uid: 0, hostUid: 100_000 });
  });

  it('a container with its own map: host uid 201001 is its uid 1001; the default shift is not assumed', () => {
    const { host } = seedS2();
    const procs = readings([TP0.pid, TP2.pid], [{ ...TP0, uid: 201_001 }, TP2]);
    const r = buildHolders({ ...host, procs, uidMap: OWN_MAP }, noContainerView);
    expect(r.holders.find((h) => h.process.hostPid === TP0.pid)?.process).toMatchObject({
      uid: 1001,
      hostUid: 201_001,
    });
    // Host uid 100000 is outside this map: its container uid is unknown, not 0.
    const tp2 = r.holders.find((h) => h.process.hostPid === TP2.pid)?.process;
    expect(tp2?.hostUid).toBe(100_000);
    expect(tp2?.uid).toBeUndefined();
  });

  it('without the map (pct config not read) the container uid stays unknown', () => {
    const { host } = seedS2();
    const r = buildHolders({ ...host, uidMap: null }, noContainerView);
    const tp0 = r.holders.find((h) => h.process.hostPid === TP0.pid)?.process;
    expect(tp0?.uid).toBeUndefined();
    expect(tp0?.hostUid).toBe(100_000);
  });

  it('in the target only when its cgroup is lxc/<vmid> too: same PID namespace in another cgroup, or none read, is outside', () => {
    const { host, container } = seedS2();
    const procs = readings(
      [TP0.pid, TP2.pid, CT131_JOB.pid],
      [
        { ...TP0, cgroup: '0::/lxc/129/ns\n' },
        { ...TP2, cgroup: '0::/lxc/130/ns\n' },
        { ...CT131_JOB, cgroup: '0::/lxc/131/ns\n' },
      ],
    );
    const r = buildHolders({ ...host, procs, targetVmid: 129 }, container);
    expect(r.holders.filter((h) => h.inTarget).map((h) => h.process.hostPid)).toEqual([TP0.pid]);
    const noCgroup = buildHolders({ ...host, targetVmid: 129 }, container);
    expect(noCgroup.holders.filter((h) => h.inTarget)).toEqual([]);
  });

  it('recheckTarget on the host refuses a process no longer in the container’s cgroup', () => {
    const planned = identityOf(
      readings([TP0.pid], [TP0])[0] ?? { pid: 0, stat: null, nsPids: null, uid: null, pidNs: null, cmdline: null },
    );
    if (planned === null) throw new Error('fixture');
    const x = { view: 'host' as const, targetPidNs: CT129_NS, gpuHostPids: new Set([TP0.pid]), vmid: 129 };
    expect(
      recheckTarget(planned, { ...x, reading: readings([TP0.pid], [{ ...TP0, cgroup: '0::/lxc/129/ns\n' }])[0] }),
    ).toBeNull();
    expect(
      recheckTarget(planned, { ...x, reading: readings([TP0.pid], [{ ...TP0, cgroup: '0::/lxc/130/ns\n' }])[0] }),
    ).toBe('left_cgroup');
    expect(recheckTarget(planned, { ...x, reading: readings([TP0.pid], [TP0])[0] })).toBe('left_cgroup');
  });
});

describe('containerHolderRows (status): the host’s apps placed in the container only by its PID namespace and cgroup', () => {
  it('a host app in the container’s PID namespace but in lxc/130 gets no row in ct129', () => {
    const { host } = seedS2();
    const procs = readings(
      [TP0.pid, TP2.pid],
      [
        { ...TP0, cgroup: '0::/lxc/129/ns\n' },
        { ...TP2, cgroup: '0::/lxc/130/ns\n' },
      ],
    );
    const passing = {
      vmid: 129,
      minors: [0, 1, 2, 3, 4, 5, 6, 7],
      problem: null,
      hostMinors: host.gpus.map((g, i) => ({ uuid: g.uuid, busId: null, minor: i })),
    };
    const side = { hostId: 'kpro5', gpus: host.gpus, passing, readings: { ...host, procs, targetVmid: 129 } };
    const rows = containerHolderRows(host.gpus, [], [], side, null).rows;
    expect(rows.map((r) => [r.gpuIndex, r.containerPid, r.hostPid])).toEqual([[0, 57, TP0.pid]]);
    // Without the vmid (membership by PID namespace alone) both were placed.
    const loose = containerHolderRows(host.gpus, [], [], { ...side, readings: { ...host, procs } }, null).rows;
    expect(loose.map((r) => r.hostPid)).toEqual([TP0.pid, TP2.pid]);
  });
});
