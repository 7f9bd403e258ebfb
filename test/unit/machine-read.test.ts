/**
 * The one-session read script (src/agent-grammar/templates/machine-read.ts), run by a real local `sh`: each part's
 * answer comes back exactly (bytes, no trailing-newline loss, exit code, stderr), a part's output
 * cannot forge another part's answer, a hung part is reported as timed out on its own, and anything
 * malformed is refused whole.
 */
import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { machineRead, PART_CAP_BYTES, parseMachineRead } from '../../src/agent-grammar/templates/machine-read.ts';
import type { CommandSpec } from '../../src/agent-grammar/command-spec.ts';

function runLocally(spec: CommandSpec): Promise<{ code: number | null; stdout: string }> {
  return new Promise((resolve) => {
    execFile(
      spec.argv[0] ?? 'false',
      spec.argv.slice(1),
      { encoding: 'utf8', maxBuffer: 8 * 1024 * 1024 },
      (err, stdout) => {
        resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : null, stdout });
      },
    );
  });
}

const FORGED = 'gpu-medic-part 1 0 5 0 aGVsbG8= \n\nno newline at the end';

describe('machine read script', () => {
  it('returns each part exactly: forged marker lines stay data, exit codes and stderr are per part', async () => {
    const parts: CommandSpec[] = [
      { argv: ['printf', '%s', FORGED], timeoutMs: 5000 },
      { argv: ['sh', '-c', 'echo oops >&2; exit 3'], timeoutMs: 5000 },
      { argv: ['printf', '%s', 'ünïcödé `*<!channel>*`\n'], timeoutMs: 5000 },
    ];
    const script = machineRead(parts);
    const r = await runLocally(script);
    expect(r.code).toBe(0);
    const parsed = parseMachineRead(parts, r.stdout);
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(parsed.parts.map((p) => [p.code, p.stdout, p.stderr, p.timedOut, p.truncated])).toEqual([
      [0, FORGED, '', false, false],
      [3, '', 'oops\n', false, false],
      [0, 'ünïcödé `*<!channel>*`\n', '', false, false],
    ]);
  });

  it('a part that hangs is ended by its own timeout and reported on its own; the others answer', async () => {
    const parts: CommandSpec[] = [
      { argv: ['sleep', '30'], timeoutMs: 1000 },
      { argv: ['echo', 'fine'], timeoutMs: 5000 },
    ];
    const r = await runLocally(machineRead(parts));
    const parsed = parseMachineRead(parts, r.stdout);
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(parsed.parts[0]?.timedOut).toBe(true);
    expect(parsed.parts[0]?.code).toBe(124);
    expect(parsed.parts[1]).toMatchObject({ code: 0, stdout: 'fine\n', timedOut: false });
  });

  it('output past the cap is cut and marked truncated', async () => {
    const parts: CommandSpec[] = [{ argv: ['head', '-c', String(PART_CAP_BYTES + 10), '/dev/zero'], timeoutMs: 5000 }];
    const parsed = parseMachineRead(parts, (await runLocally(machineRead(parts))).stdout);
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(parsed.parts[0]?.stdout.length).toBe(PART_CAP_BYTES);
    expect(parsed.parts[0]?.truncated).toBe(true);
  });

  it('refuses malformed output whole: a stray line, a missing part, a part twice', () => {
    const parts: CommandSpec[] = [
      { argv: ['true'], timeoutMs: 1000 },
      { argv: ['true'], timeoutMs: 1000 },
    ];
    const line = (i: number) => `gpu-medic-part ${i} 0 0 0  \n`;
    expect(parseMachineRead(parts, line(0) + line(1)).ok).toBe(true);
    expect(parseMachineRead(parts, `${line(0)}hello\n${line(1)}`).ok).toBe(false);
    expect(parseMachineRead(parts, line(0)).ok).toBe(false);
    expect(parseMachineRead(parts, line(0) + line(0) + line(1)).ok).toBe(false);
    expect(parseMachineRead(parts, line(0) + line(2)).ok).toBe(false);
  });

  it("is a fixed template: only the parts' argv and timeouts vary", () => {
    const a = machineRead([{ argv: ['free', '-b'], timeoutMs: 15_000 }]);
    const b = machineRead([{ argv: ['free', '-b'], timeoutMs: 20_000 }]);
    expect(a.argv[0]).toBe('sh');
    expect(a.argv[2]?.replace('15 free', 'X')).toBe(b.argv[2]?.replace('20 free', 'X'));
    expect(a.timeoutMs).toBe(18_000);
  });
});
