/**
 * The executor's `agent` access mode against a real OpenSSH sshd whose PATH holds a stand-in
 * `gpu-medic` (test/harness/sshd.ts runs the line through a shell, as a root-shell host does; the
 * stand-in records what reached it). The real agent and its refusals are agent/'s own tests.
 */
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_VERSION } from '../../src/agent-grammar/arg-types.ts';
import { withEnvelopes } from '../../src/agent-grammar/envelopes.ts';
import { CodedError, ErrorCode } from '../../src/errors.ts';
import { queryGpus } from '../../src/agent-grammar/templates/snapshot-commands.ts';
import { gpuReset } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor, Route, SshEndpoint } from '../../src/ssh/types.ts';
import { generateKeyPair, startSshd, type Sshd } from '../harness/sshd.ts';

// Records its words and its whole stdin (so it returns only after EOF); an old agent: `nosuch` is refused.
const FAKE_AGENT = `#!/bin/sh
printf '%s\\n' "$*" >> "$AGENT_LOG"
[ "$2" = version ] && { echo "gpu-medic-agent 0.9.0 protocol 1"; exit 0; }
case "$4" in
  nosuch) echo "gpu-medic-agent: refused: unknown verb nosuch" >&2; exit 126;;
  gpus) echo "0, GPU-x"; exit 0;;
  ram)
    # Busy while the count file says so: each answer takes one off.
    n=$(cat "$AGENT_LOG.busy" 2>/dev/null || echo 0)
    if [ "$n" -gt 0 ]; then echo $((n - 1)) > "$AGENT_LOG.busy"; echo "gpu-medic-agent: busy: 8 runs at once on this host already (max_runs=); try again" >&2; exit 75; fi
    echo "MemTotal: 1"; exit 0;;
esac
cat > "$AGENT_LOG.stdin"
echo done
`;

let root: string;
let sshd: Sshd;
let ex: Executor;
let base: SshEndpoint;
const U = 'GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0';

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'gpu-medic-agentmode-'));
  const key = await generateKeyPair(root, 'worker');
  const bin = join(root, 'bin');
  await mkdir(bin);
  await writeFile(join(bin, 'gpu-medic'), FAKE_AGENT);
  await chmod(join(bin, 'gpu-medic'), 0o755);
  sshd = await startSshd({
    dir: join(root, 'sshd'),
    authorizedKeys: [key.publicKey],
    pathPrefix: bin,
    env: { AGENT_LOG: join(root, 'agent.log') },
  });
  base = {
    machineId: 'kpro5',
    host: '127.0.0.1',
    port: sshd.port,
    username: userInfo().username,
    privateKeyPath: key.privateKeyPath,
    hostKeyFingerprints: [sshd.hostKeyFingerprint],
  };
  ex = createSshExecutor({ connectTimeoutMs: 8000 });
});

afterAll(async () => {
  await ex?.close();
  await sshd?.stop();
  if (root) await rm(root, { recursive: true, force: true });
});

const direct = (): Route => ({ kind: 'direct', endpoint: base });

describe('agent access mode (the default)', () => {
  it('sends the verb line, not the argv, and returns the output as it came', async () => {
    const r = await ex.exec(direct(), queryGpus({ timeoutMs: 5000 }));
    expect(r.command).toBe('gpu-medic 1 5000 host gpus');
    expect(r.stdout).toBe('0, GPU-x\n');
    expect(await readFile(join(root, 'agent.log'), 'utf8')).toContain('1 5000 host gpus\n');
  });

  it("writes a destructive verb's envelopes on stdin, then EOF", async () => {
    const env = { body: 'gpu-medic request v1\nincident=inc_x\n', sig: `${'A'.repeat(86)}==` };
    const spec = withEnvelopes(
      gpuReset(U, { timeoutMs: 5000, incidentId: 'inc_20261130_092000_k3x9q2', approvalId: 'none' }),
      { request: env, decisions: [], plan: env },
    );
    const r = await ex.exec(direct(), spec);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('done\n');
    expect(await readFile(join(root, 'agent.log.stdin'), 'utf8')).toBe(spec.stdin);
  });

  it('a busy host (exit 75, `busy:`) ran nothing: the same line is sent again and its answer returned; busy through every try: told, nothing run', async () => {
    const spec = { argv: ['free', '-b'], timeoutMs: 5000, agent: { verb: 'ram', args: [] } };
    const lines = async () =>
      (await readFile(join(root, 'agent.log'), 'utf8')).split('\n').filter((l) => l.endsWith(' ram'));
    const before = (await lines()).length;
    await writeFile(join(root, 'agent.log.busy'), '2');
    const r = await ex.exec(direct(), spec);
    expect(r).toMatchObject({ code: 0, stdout: 'MemTotal: 1\n' });
    expect(await lines()).toHaveLength(before + 3);
    await writeFile(join(root, 'agent.log.busy'), '99');
    const err = await ex.exec(direct(), spec).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CodedError);
    expect((err as CodedError).code).toBe(ErrorCode.AgentRefused);
    expect((err as CodedError).message).toMatch(
      /^The gpu-medic agent on kpro5 was busy .* through 5 tries; nothing was run/,
    );
    expect(await lines()).toHaveLength(before + 3 + 5);
    await writeFile(join(root, 'agent.log.busy'), '0');
  });

  it("turns the agent's refusal (exit 126, `refused:`) into agent_refused naming what is there and the version to install", async () => {
    const spec = { argv: ['x'], timeoutMs: 5000, agent: { verb: 'nosuch', args: [] } };
    const e = await ex.exec(direct(), spec).then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(CodedError);
    expect((e as CodedError).code).toBe(ErrorCode.AgentRefused);
    expect((e as CodedError).message).toContain(AGENT_VERSION);
    // It read the agent's own version first (agent/PROTOCOL.md), and says what is there.
    expect((e as CodedError).message).toContain('kpro5 (0.9.0) does not know this verb');
  });

  it('an endpoint set to root-shell gets the `exec timeout …` line instead', async () => {
    const r = await ex.exec(
      { kind: 'direct', endpoint: { ...base, access: 'root-shell' } },
      { argv: ['echo', 'plain'], timeoutMs: 5000 },
    );
    expect(r.command).toMatch(/^exec timeout /);
    expect(r.stdout).toBe('plain\n');
  });
});
