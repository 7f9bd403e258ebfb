/**
 * Each watchdog alert kind on the real fleet (it warns before a user has to ask): raised once, edited in
 * place where what it says changes, cleared, snoozed; a hung machine delays only its own alert; nothing is
 * ever signalled and no command but reads runs. Rounds are run by the test (`runWatchJob`), each test on its
 * own site so one test's rounds never read another's machines.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { watchKeys } from '../../src/watch-store/watch-keys.ts';
import { startWatchRig, type WatchRig } from './watch-rig.ts';

// Long enough for a loaded machine's reads; the hung and frozen hosts wait it out once or twice.
const COMMAND_TIMEOUT_SEC = 10;

describe('watchdog alert kinds on the fleet', () => {
  let rig: WatchRig;
  const types = async (m: string, kind: string) => (await rig.eventsOf(m, kind)).map((e) => e.type);
  const sentences = async (m: string, kind: string) =>
    (await rig.eventsOf(m, kind)).map((e) => ('alert' in e ? `${e.type}: ${e.alert.sentence}` : e.type));

  beforeAll(async () => {
    const h = (id: string, site: string) => ({ id, site, gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 });
    rig = await startWatchRig(
      {
        hosts: [
          h('g1', 'ghost'),
          h('z1', 'stuck'),
          h('e1', 'err'),
          h('u1', 'unreach'),
          h('x1', 'xid'),
          h('x2', 'xid2'),
          h('x3', 'xid3'),
          h('r1', 'recovery'),
          h('r2', 'recovery'),
          h('s1', 'snooze'),
          h('h1', 'hang'),
          h('h2', 'hang'),
          h('h3', 'hang'),
          h('w1', 'why'),
          { id: 'm1', site: 'missing', gpus: 4 },
        ],
        containers: [{ id: 'ct201', vmid: 201, host: 'z1', ownAddress: true }],
      },
      { settings: { ghostMinutes: 0, xidQuietMinutes: 0 }, commandTimeoutSec: COMMAND_TIMEOUT_SEC },
    );
  }, 180_000);
  afterAll(async () => {
    await rig?.stop();
  });

  it('ghost memory: raised once, edited when the amount changes, cleared when a reset freed it', async () => {
    await rig.fleet.setLeak('g1', 0, 8192);
    await rig.round({ site: 'ghost' });
    await rig.round({ site: 'ghost' });
    await rig.fleet.setLeak('g1', 0, 16384);
    await rig.round({ site: 'ghost' });
    await rig.fleet.setLeak('g1', 0, 0);
    await rig.round({ site: 'ghost' });
    expect(await sentences('g1', 'ghost_memory')).toEqual([
      'alert_raised: GPU 0: 8,192 MiB in use that no process on the host holds.',
      'alert_updated: GPU 0: 16,384 MiB in use that no process on the host holds.',
      'alert_cleared: GPU 0: 16,384 MiB in use that no process on the host holds.',
    ]);
  });

  it('a zombie holder and a holder in uninterruptible sleep (in a container, seen from its host): each raised once, cleared once they are let go', async () => {
    const z = await rig.fleet.spawnHolder('z1', { gpus: [{ index: 0, mib: 30000 }], stuck: 'Z' });
    const d = await rig.fleet.spawnHolder('ct201', { gpus: [{ index: 1, mib: 20000 }], stuck: 'D' });
    await rig.round({ site: 'stuck' });
    await rig.round({ site: 'stuck' });
    const raised = await sentences('z1', 'holder_stuck');
    expect(raised.sort()).toEqual(
      [
        `alert_raised: host PID ${z.hostPid} holds 30,000 MiB on GPU 0 and is a zombie (Z): it is dead, but its memory is not yet released.`,
        `alert_raised: host PID ${d.hostPid} holds 20,000 MiB on GPU 1 and is in uninterruptible sleep (D): signals wait until the kernel call returns.`,
      ].sort(),
    );
    await rig.fleet.releaseStuck(z);
    await rig.fleet.releaseStuck(d);
    await rig.round({ site: 'stuck' });
    expect((await types('z1', 'holder_stuck')).sort()).toEqual([
      'alert_cleared',
      'alert_cleared',
      'alert_raised',
      'alert_raised',
    ]);
  });

  it('a GPU in error and a broken driver: each raised once and cleared when it answers again', async () => {
    await rig.fleet.setGpuError('e1', 'gpu_lost', 1);
    await rig.round({ site: 'err' });
    await rig.round({ site: 'err' });
    await rig.fleet.setGpuError('e1', null);
    await rig.round({ site: 'err' });
    await rig.fleet.setGpuError('e1', 'nvml_version_mismatch');
    await rig.round({ site: 'err' });
    await rig.fleet.setGpuError('e1', null);
    await rig.round({ site: 'err' });
    expect(await types('e1', 'gpu_error')).toEqual(['alert_raised', 'alert_cleared']);
    expect(await sentences('e1', 'nvidia_smi_failing')).toEqual([
      'alert_raised: nvidia-smi fails for every GPU (nvml_version_mismatch).',
      'alert_cleared: nvidia-smi fails for every GPU (nvml_version_mismatch).',
    ]);
  });

  it('fewer GPUs than seen before (one fell off the bus): raised once, cleared when it is back', async () => {
    await rig.round({ site: 'missing' });
    await rig.fleet.setGpuGone('m1', 2, true);
    await rig.round({ site: 'missing' });
    await rig.round({ site: 'missing' });
    await rig.fleet.setGpuGone('m1', 2, false);
    await rig.round({ site: 'missing' });
    expect(await sentences('m1', 'gpus_missing')).toEqual([
      'alert_raised: 3 GPUs answer, 4 were seen before: a GPU may have fallen off the bus.',
      'alert_cleared: 3 GPUs answer, 4 were seen before: a GPU may have fallen off the bus.',
    ]);
  });

  it('a host that stops answering SSH: raised once, cleared when it is back', async () => {
    await rig.round({ site: 'unreach' });
    await rig.fleet.stopMachine('u1');
    await rig.round({ site: 'unreach' });
    await rig.round({ site: 'unreach' });
    await rig.fleet.startMachine('u1');
    await rig.round({ site: 'unreach' });
    const said = await sentences('u1', 'unreachable');
    // The first failed read finds the pool's connection from the round before either already closed
    // (connect_failed) or not yet noticed as closed (connection_lost: seen on a loaded machine); the
    // alert may then be updated to the later reason, but it is raised once and cleared once.
    expect(said[0]).toMatch(/^alert_raised: the watchdog could not read it \((connect_failed|connection_lost)\)\.$/);
    expect(said.slice(1, -1).every((l) => l.startsWith('alert_updated: '))).toBe(true);
    expect(said.at(-1)).toBe('alert_cleared: the watchdog could not read it (connect_failed).');
    expect(said.filter((l) => l.startsWith('alert_raised')).length).toBe(1);
  });

  it('an Xid in the journal: raised once with what it means, not again for a line already read, cleared when the log is quiet', async () => {
    await rig.round({ site: 'xid' });
    await rig.fleet.logXid('x1', 1, 79);
    await rig.round({ site: 'xid' });
    await rig.restartWorker();
    await rig.round({ site: 'xid' });
    expect(await sentences('x1', 'xid')).toEqual([
      'alert_raised: Xid 79 on PCI 0000:02:00 (GPU 1): GPU has fallen off the bus; a reset will not help: reboot the host, then check power, cooling and seating of the GPU.',
      // xidQuietMinutes is 0 here: the round after the line, with nothing new, clears it.
      'alert_cleared: Xid 79 on PCI 0000:02:00 (GPU 1): GPU has fallen off the bus; a reset will not help: reboot the host, then check power, cooling and seating of the GPU.',
    ]);
    const cmds = rig.fleet.commandLog('x1').filter((c) => c.via === 'tool' && c.cmd.startsWith('journalctl'));
    expect(cmds.length).toBeGreaterThanOrEqual(3);
  });

  it('an Xid on a host without a journal is read from dmesg, once', async () => {
    await rig.fleet.removeTool('x2', 'journalctl');
    await rig.round({ site: 'xid2' });
    await rig.fleet.logXid('x2', 0, 48);
    await rig.round({ site: 'xid2' });
    await rig.fleet.logXid('x2', 0, 48);
    await rig.round({ site: 'xid2' });
    const ev = await rig.eventsOf('x2', 'xid');
    expect(ev.map((e) => e.type)).toEqual(['alert_raised']);
    expect(ev[0] && 'alert' in ev[0] ? ev[0].alert.sentence : '').toMatch(
      /^Xid 48 on PCI 0000:01:00 \(GPU 0\): Double-bit ECC error; /,
    );
    expect(rig.fleet.commandLog('x2').some((c) => c.via === 'tool' && c.cmd === 'dmesg')).toBe(true);
  });

  it('a host whose kernel log cannot be read at all: no Xid alert, the gap is logged, the rest of the reading still counts', async () => {
    await rig.fleet.removeTool('x3', 'journalctl');
    await rig.fleet.removeTool('x3', 'dmesg');
    await rig.fleet.logXid('x3', 0, 79);
    await rig.fleet.setRam('x3', { totalGiB: 449, usedGiB: 440 });
    await rig.round({ site: 'xid3' });
    expect(await types('x3', 'xid')).toEqual([]);
    expect(await types('x3', 'ram_high')).toEqual(['alert_raised']);
    expect(rig.logText()).toMatch(/"machine":"x3".*kernel log: neither journalctl -k nor dmesg could be read/);
  });

  it('a recovery action the driver reports: raised with what it asks for, cleared at None; a driver without the field raises nothing and is read as before', async () => {
    await rig.fleet.setRecoveryActionSupported('r2', false);
    await rig.fleet.setRecoveryAction('r1', 1, 'Node Reboot');
    await rig.round({ site: 'recovery' });
    await rig.round({ site: 'recovery' });
    await rig.fleet.setRecoveryAction('r1', 1, null);
    await rig.round({ site: 'recovery' });
    expect(await sentences('r1', 'recovery_action')).toEqual([
      'alert_raised: GPU 1: the driver asks for a reboot of the host: a GPU reset will not do.',
      'alert_cleared: GPU 1: the driver asks for a reboot of the host: a GPU reset will not do.',
    ]);
    expect(
      (await rig.alerts()).filter((a) => a.events.some((e) => 'alert' in e && e.alert.machineId === 'r2')),
    ).toEqual([]);
    const glance = JSON.parse((await rig.redis.hget(watchKeys(rig.prefix).last, 'r2')) ?? '{}') as {
      ok?: boolean;
      gpus?: number;
    };
    expect(glance).toMatchObject({ ok: true, gpus: 2 });
  });

  it('snoozed: a machine snooze holds its alert back, a GPU snooze holds back only that GPU; each is raised once the snooze ends', async () => {
    const now = Date.now();
    await rig.snooze('s1', now + 3_600_000);
    await rig.fleet.setRam('s1', { totalGiB: 449, usedGiB: 440 });
    await rig.fleet.setLeak('s1', 1, 8192);
    await rig.round({ site: 'snooze' });
    expect(await types('s1', 'ram_high')).toEqual([]);
    expect(await types('s1', 'ghost_memory')).toEqual([]);
    // The machine snooze ends (an expired one is ignored); GPU 1 is snoozed on its own.
    await rig.redis.hset(watchKeys(rig.prefix).snoozes, 's1', String(now - 1));
    await rig.snooze('s1/1', now + 3_600_000);
    await rig.round({ site: 'snooze' });
    expect(await types('s1', 'ram_high')).toEqual(['alert_raised']);
    expect(await types('s1', 'ghost_memory')).toEqual([]);
    await rig.redis.hdel(watchKeys(rig.prefix).snoozes, 's1/1');
    await rig.round({ site: 'snooze' });
    await rig.round({ site: 'snooze' });
    expect(await types('s1', 'ghost_memory')).toEqual(['alert_raised']);
    expect(await types('s1', 'ram_high')).toEqual(['alert_raised']);
  });

  it("host RAM high says why when the holders' launch line does (the seed: per-rank host cache × ranks over the host's RAM)", async () => {
    await rig.fleet.spawnHolder('w1', {
      gpus: [{ index: 0, mib: 96413 }],
      title:
        'python3 -m sglang.launch_server --model-path /models/x --tp-size 8 --enable-hierarchical-cache --hicache-size 300',
    });
    await rig.round({ site: 'why' });
    expect(await sentences('w1', 'ram_high')).toEqual([]);
    await rig.fleet.setRam('w1', { totalGiB: 449, usedGiB: 440 });
    await rig.round({ site: 'why' });
    await rig.round({ site: 'why' });
    expect(await sentences('w1', 'ram_high')).toEqual([
      'alert_raised: host RAM 98 % used (440 of 449 GiB). Why: 8 ranks × 300 GB host cache (`--hicache-size` is per rank) = 2.4 TB requested on a 449 GiB host: more than its RAM.',
    ]);
  });

  it("a host whose nvidia-smi hangs, and a frozen host, delay only their own alerts: the other host's alert is committed while their reads still wait", async () => {
    await rig.round({ site: 'hang' });
    await rig.fleet.setRam('h2', { totalGiB: 449, usedGiB: 440 });
    await rig.fleet.setHang('h1', true);
    await rig.fleet.freezeMachine('h3', true);
    let done = false;
    const round = rig.round({ site: 'hang' }).finally(() => {
      done = true;
    });
    const until = Date.now() + 60_000;
    while ((await types('h2', 'ram_high')).length === 0) {
      if (Date.now() > until) throw new Error('h2 alert never came');
      await new Promise((r) => setTimeout(r, 50));
    }
    // h2's alert is in while h1's read is still bounded by its timeout.
    expect(done).toBe(false);
    expect(await types('h1', 'nvidia_smi_failing')).toEqual([]);
    expect(await types('h3', 'nvidia_smi_failing')).toEqual([]);
    await round;
    expect(await sentences('h1', 'nvidia_smi_failing')).toEqual([
      'alert_raised: nvidia-smi did not answer within the command timeout (a wedged driver often hangs it).',
    ]);
    // The frozen host's pooled connection stays open and silent: its read ends at the client deadline.
    expect(await types('h3', 'nvidia_smi_failing')).toEqual(['alert_raised']);
    await rig.fleet.setHang('h1', false);
    await rig.fleet.freezeMachine('h3', false);
    await rig.round({ site: 'hang' });
    expect(await types('h1', 'nvidia_smi_failing')).toEqual(['alert_raised', 'alert_cleared']);
    expect(await types('h3', 'nvidia_smi_failing')).toEqual(['alert_raised', 'alert_cleared']);
  });

  it('no holder was ever signalled and no machine ran anything but reads', () => {
    expect(rig.fleet.signals()).toEqual([]);
    for (const m of rig.inventory.hosts.map((x) => x.id)) {
      const cmds = rig.fleet.commandLog(m).map((c) => c.cmd);
      expect(
        cmds.filter((c) =>
          /\bkill\b|pkill|nvidia-smi (-r|--gpu-reset)|-pm |pct (stop|shutdown|reboot)|\breboot\b/.test(c),
        ),
      ).toEqual([]);
    }
  });
});
