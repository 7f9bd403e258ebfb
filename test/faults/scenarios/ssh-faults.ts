/**
 * SSH faults on some machines while others are healthy: host down, connection dropped
 * mid-command, authentication refused, host key changed, nvidia-smi hanging. Each ends within a
 * bound with a clear, coded error in the thread; the worker keeps serving the healthy machines.
 * (The target lock of a mutating job is part B: `status` takes none.)
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { IncidentLog } from '../../../src/incident/log.ts';
import { startStack, type Stack } from '../../harness/stack.ts';
import { checker, emptyFigures, mergeFigures, type Figures } from '../lib/figures.ts';
import { settleThread } from '../lib/threads.ts';
import { finalChecks } from './requests.ts';

const execFileP = promisify(execFile);

export interface SshFaultOptions {
  /** Rounds of the whole fault set (each round needs fresh faulty machines, so a new stack). */
  rounds: number;
  connectTimeoutSec: number;
  commandTimeoutSec: number;
}

const HEALTHY = ['ok1', 'ok2'];
/** machine → the error code its incident must end with. */
const FAULTS: Record<string, string> = {
  down: 'connect_failed',
  drop: 'connection_lost',
  auth: 'auth_failed',
  keychg: 'host_key_mismatch',
  hang: 'command_timeout',
};

async function errorCodeOf(s: Stack, incidentId: string, machine: string): Promise<string | null> {
  const events = await new IncidentLog(s.redis, s.prefix).events(incidentId);
  for (const e of events) {
    if (e.type === 'machine_error' && e.machineId === machine) return e.code;
    if (e.type === 'snapshot' && e.snapshot.machineId === machine) return 'ok';
  }
  return null;
}

async function oneRound(o: SshFaultOptions, round: number): Promise<Figures> {
  let f = emptyFigures();
  const check = checker(f);
  f.runs++;
  const keyDir = await mkdtemp(join(tmpdir(), 'gpu-medic-wrongkey-'));
  const wrongKey = join(keyDir, 'id_ed25519');
  await execFileP('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'not-authorized', '-f', wrongKey]);
  const ids = [...HEALTHY, ...Object.keys(FAULTS)];
  const s = await startStack({
    fleet: { hosts: ids.map((id) => ({ id, gpus: 1 })) },
    tweakInventory: (inv) => {
      inv.defaults.connectTimeoutSec = o.connectTimeoutSec;
      inv.defaults.commandTimeoutSec = o.commandTimeoutSec;
      const h = inv.hosts.find((x) => x.id === 'auth');
      if (h) h.keyFile = wrongKey;
    },
  });
  const bound = (o.connectTimeoutSec + o.commandTimeoutSec) * 1000 + 6000;
  try {
    await s.fleet.stopMachine('down');
    await s.fleet.replaceHostKey('keychg');
    await s.fleet.setHang('hang', true);
    // The fleet drops the connection to `drop` the moment its nvidia-smi starts (the tool server
    // kills the host's per-connection sshd), and that nvidia-smi hangs, so nothing else can end the
    // command first. (The test used to stop the machine itself after seeing the call in the tool log:
    // on a loaded machine its 2 s command timeout, or the connect, ran out before the test got there.)
    await s.fleet.setHang('drop', true);
    await s.fleet.setDrop('drop', true);
    f.faultsInjected += 5;
    const started = Date.now();
    const asked = new Map<string, string>();
    for (const m of Object.keys(FAULTS)) {
      const r = await s.slash(`status ${m}`);
      f.ackMs.push(r.elapsedMs);
      if (r.incidentId) asked.set(m, r.incidentId);
    }
    // Meanwhile a healthy machine is served at once.
    const okStart = Date.now();
    const ok = await s.slash('status ok1');
    f.ackMs.push(ok.elapsedMs);
    const okV = ok.incidentId ? await settleThread(s, ok.incidentId, 10_000) : null;
    const okMs = Date.now() - okStart;
    check(
      okV?.threadExact === true && (await errorCodeOf(s, ok.incidentId ?? '', 'ok1')) === 'ok',
      `round ${round}: healthy ok1 not served during the faults: ${okV?.detail}`,
    );
    check(okMs < 5000, `round ${round}: healthy ok1 took ${okMs} ms while other machines were failing`);
    for (const [m, want] of Object.entries(FAULTS)) {
      const id = asked.get(m);
      if (!check(id !== undefined, `round ${round}: status ${m} was not queued`) || !id) continue;
      const v = await settleThread(s, id, bound + 5000);
      const took = Date.now() - started;
      const code = await errorCodeOf(s, id, m);
      if (!v.eventsComplete) f.eventsLost++;
      f.messagesLost += v.messagesOff;
      check(v.threadExact, `round ${round}: ${m}: ${v.detail}`);
      check(code === want, `round ${round}: ${m} ended with ${code}, expected ${want}`);
      check(took < bound, `round ${round}: ${m} took ${took} ms (bound ${bound})`);
      const parent = s.slack.messages('C0ONCALL01').find((x) => JSON.stringify(x.blocks ?? []).includes(id));
      const reply = parent ? s.slack.thread('C0ONCALL01', parent.ts)[1] : undefined;
      check(
        reply?.text.includes(m) === true && reply.text.length > 30,
        `round ${round}: ${m}: the thread does not say why: ${reply?.text.slice(0, 200)}`,
      );
    }
    // `drop` is down from here on (a machine that did not come back): status all cannot connect.
    check(
      s.fleet.commandLog('drop').some((e) => e.via === 'tool' && e.cmd.startsWith('nvidia-smi')),
      `round ${round}: drop: the connection was lost before its nvidia-smi started`,
    );
    await s.fleet.stopMachine('drop');
    // status all with every fault at once: one row per machine, bounded, healthy ones read.
    const all = await s.slash('status all');
    f.ackMs.push(all.elapsedMs);
    const allStart = Date.now();
    const v = all.incidentId ? await settleThread(s, all.incidentId, bound + 5000) : null;
    check(v?.threadExact === true && v.eventsComplete, `round ${round}: status all: ${v?.detail}`);
    check(Date.now() - allStart < bound, `round ${round}: status all took ${Date.now() - allStart} ms`);
    for (const m of HEALTHY)
      check((await errorCodeOf(s, all.incidentId ?? '', m)) === 'ok', `round ${round}: status all: ${m} not read`);
    for (const [m, want] of Object.entries(FAULTS))
      check(
        (await errorCodeOf(s, all.incidentId ?? '', m)) === (m === 'drop' ? 'connect_failed' : want),
        `round ${round}: status all: ${m} ended with ${await errorCodeOf(s, all.incidentId ?? '', m)}`,
      );
    // And the worker still serves afterwards.
    const after = await s.slash('status ok2');
    const av = after.incidentId ? await settleThread(s, after.incidentId, 10_000) : null;
    check(
      av?.threadExact === true && (await errorCodeOf(s, after.incidentId ?? '', 'ok2')) === 'ok',
      `round ${round}: ok2 not served after the faults`,
    );
    await s.fleet.setHang('hang', false);
    f = mergeFigures(f, await finalChecks(s, ids, {}));
    // The refused key's private half is a secret too.
  } finally {
    await s.stop();
    await rm(keyDir, { recursive: true, force: true });
  }
  return f;
}

export async function sshFaults(o: SshFaultOptions): Promise<Figures> {
  let f = emptyFigures();
  for (let r = 0; r < o.rounds; r++) f = mergeFigures(f, await oneRound(o, r));
  return f;
}
