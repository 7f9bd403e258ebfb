/**
 * `gpu-medic doctor` with agent access, on fleet hosts whose root authorized_keys (each host's own, bound in
 * its sshd's mount namespace, never this machine's /root) also hold the worker's key: kpro5 as a plain line,
 * the root shell a root-shell setup leaves behind, which the doctor must report as the failure it is; kpro6,
 * its twin, with none; kpro7 forced to the agent, as `install.sh --root-forced` writes it; ct129's own
 * agent (role=self, reached at its own address as its root, forced). The doctor reads them through the
 * agent's root-keys verb and never logs in to a host as root.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { runDoctorCommand } from '../../src/cli/doctor-command.ts';
import type { DoctorReport, Finding } from '../../src/doctor/judge.ts';
import { startFleet, type Fleet } from '../harness/fleet/index.ts';

let fleet: Fleet;
let report: DoctorReport;
let code: number;

function sink(): { stream: Writable; text: () => string } {
  let buf = '';
  return {
    stream: new Writable({
      write(chunk: Buffer, _enc, cb) {
        buf += chunk.toString('utf8');
        cb();
      },
    }),
    text: () => buf,
  };
}

beforeAll(async () => {
  fleet = await startFleet({
    access: 'agent',
    hosts: [
      { id: 'kpro5', gpus: 1, rootKeys: ['worker'] },
      { id: 'kpro6', gpus: 1, rootKeys: [] },
      { id: 'kpro7', gpus: 1, rootKeys: ['worker-forced'] },
    ],
    // Its own agent (role=self), installed --root-forced: the worker logs in as the container's root, forced.
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro6', ownAddress: true }],
  });
  const inventoryPath = join(fleet.dir, 'inventory.yaml');
  writeFileSync(inventoryPath, stringify(fleet.inventory()));
  const out = sink();
  code = await runDoctorCommand(['all', '--json'], {
    env: { GPU_MEDIC_INVENTORY: inventoryPath, GPU_MEDIC_SSH_ACCESS: 'agent' },
    out: out.stream,
    err: sink().stream,
  });
  report = JSON.parse(out.text()) as DoctorReport;
}, 180_000);

afterAll(async () => {
  await fleet?.stop();
});

const find = (machine: string): Finding => {
  const f = report.findings.find((x) => x.machineId === machine && x.check === 'root keys');
  if (!f) throw new Error(`no root keys finding for ${machine}: ${JSON.stringify(report.findings)}`);
  return f;
};

describe("doctor's root keys check on the fleet (agent access, real sshd and sudo, install.sh's agent)", () => {
  it("a plain root line with the worker's key fails, naming it, and the doctor exits 1", () => {
    expect(find('kpro5')).toMatchObject({
      status: 'fail',
      detail:
        "root's authorized_keys line 1 holds the worker's key without the agent's forced command: a stolen worker key is a root shell here",
      hint: expect.stringContaining('sh install.sh upgrade --remove-root-lines'),
    });
    expect(code).toBe(1);
  });

  it('its twin without that line is ok, and passes every other check kpro5 passes', () => {
    expect(find('kpro6')).toMatchObject({
      status: 'ok',
      detail: "no root line holds the worker's key (authorized_keys 0 keys, authorized_keys2 absent)",
    });
    const failed = (id: string) =>
      report.findings.filter((f) => f.machineId === id && f.status === 'fail').map((f) => f.check);
    expect(failed('kpro5')).toEqual(['root keys']);
    expect(failed('kpro6')).toEqual([]);
  });

  it('a --root-forced line beside the agent account is a warning, a second way in', () => {
    expect(find('kpro7')).toMatchObject({
      status: 'warn',
      detail: expect.stringContaining(
        'forced to the agent (a --root-forced install): a second way in beside the gpu-medic account',
      ),
    });
  });

  it("a role=self container's own agent reads its root's lines: the forced line of the --root-forced login this worker uses is ok", () => {
    expect(find('ct129')).toMatchObject({
      status: 'ok',
      detail: expect.stringMatching(
        /^root's authorized_keys line \d+: the worker's key forced to the agent, the --root-forced login this worker uses$/,
      ),
    });
  });

  it('read through the agent (its root-keys verb ran), never by logging in as root', () => {
    for (const id of ['kpro5', 'kpro6', 'kpro7']) {
      expect(fleet.commandLog(id).some((c) => /\broot-keys\b/.test(c.cmd))).toBe(true);
      const sshdLog = readFileSync(join(fleet.machine(id).dir, 'sshd', 'sshd.log'), 'utf8');
      expect(sshdLog).toMatch(/Accepted publickey for gpu-medic /);
      expect(sshdLog).not.toMatch(/\b(for|user) root\b/);
    }
  });
});
