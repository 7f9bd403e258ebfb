/**
 * A signal that went out but whose answer was lost (the connection dropped, or the worker died,
 * after the kernel delivered it and before the worker wrote `signalled`). The log records the
 * intent before the command is sent, so the thread never says "Nothing was signalled" about a
 * process that was in fact signalled. Real sshd fleet; the executor loses the signal command's
 * answer after running it for real.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CodedError, ErrorCode } from '../../src/errors.ts';
import { isSignalCommand } from '../../src/agent-grammar/templates/signal.ts';
import { renderThread } from '../../src/render/thread.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { runUnstickJob } from '../../workers/unstick.ts';
import { ofType, startRig, type Rig } from './rig.ts';

let rig: Rig;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 2 }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
});

afterAll(async () => {
  await rig?.stop();
});

/** Runs every command for real; the first signal command's answer is then lost, as a dropped connection loses it. */
function losingFirstSignalAnswer(base: Executor): Executor {
  let lost = false;
  return {
    async exec(route, spec) {
      const r = await base.exec(route, spec);
      if (!lost && isSignalCommand(spec.argv)) {
        lost = true;
        throw new CodedError(ErrorCode.ConnectionLost, 'the connection dropped before the command answered');
      }
      return r;
    },
    close: () => base.close(),
  };
}

describe('a signal command whose answer is lost after it ran', () => {
  it('is recorded as about to be sent before it runs, and the thread says the process may have been signalled, never "Nothing was signalled"', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 20_000 }],
      title: 'sglang::scheduler_TP0',
    });
    const ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
    try {
      const id = await rig.newIncident('ct129');
      await runUnstickJob(
        { kind: 'unstick', incidentId: id, machineId: 'ct129' },
        rig.deps({ executor: losingFirstSignalAnswer(ex) }),
      );
      // The kernel delivered it: the holder logged the SIGTERM.
      expect(
        rig.fleet
          .signals()
          .filter((s) => s.hostPid === h.hostPid)
          .map((s) => s.signal),
      ).toContain('SIGTERM');
      const ev = await rig.events(id);
      const intents = ofType(ev, 'signal_intent');
      expect(intents[0]?.signal).toBe('TERM');
      expect(intents[0]?.targets.map((t) => t.hostPid)).toEqual([h.hostPid]);
      // Before the signal command: no command event of that signal precedes the intent.
      const types = ev.map((e) => `${e.type}${e.type === 'command' ? `:${e.role}` : ''}`);
      expect(types.indexOf('signal_intent')).toBeGreaterThan(-1);
      expect(types.slice(0, types.indexOf('signal_intent'))).not.toContain('command:term');
      const meta = await rig.log.meta(id);
      if (!meta) throw new Error('no meta');
      const text = renderThread(meta, ev)
        .map((v) => v.text)
        .join('\n');
      expect(text).not.toMatch(/Nothing was signalled/);
      expect(text).toMatch(/may have been (sent|signalled)/);
      expect(text).toContain(String(h.hostPid));
    } finally {
      await ex.close();
      await rig.fleet.endProcess(h).catch(() => undefined);
      const holder = await rig.lock.holder('ct129');
      if (holder) await rig.lock.release('ct129', holder.incidentId);
    }
  });
});
