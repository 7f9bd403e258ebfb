import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isCodedError } from '../../src/errors.ts';
import { buildRemoteCommand } from '../../src/ssh/remote-command.ts';
import { shellJoin, shellQuote } from '../../src/text/shell-quote.ts';
import type { SshEndpoint } from '../../src/ssh/types.ts';

/** What a real POSIX shell makes of the line: each argv word, NUL-separated (needs at least one word). */
function shellArgv(words: string[]): string[] {
  const out = execFileSync('/bin/sh', ['-c', `printf '%s\\0' ${shellJoin(words)}`]);
  const parts = out.toString('utf8').split('\0');
  parts.pop();
  return parts;
}

describe('shellQuote', () => {
  it('leaves plain words readable and single-quotes the rest', () => {
    expect(shellQuote('nvidia-smi')).toBe('nvidia-smi');
    expect(shellQuote('--query-gpu=index,memory.used')).toBe(`'--query-gpu=index,memory.used'`);
    expect(shellQuote('')).toBe(`''`);
    expect(shellQuote(`it's`)).toBe(`'it'\\''s'`);
    expect(shellQuote('a=b')).toBe(`'a=b'`);
  });

  it('refuses NUL with bad_command', () => {
    let err: unknown;
    try {
      shellQuote('a\0b');
    } catch (e) {
      err = e;
    }
    expect(isCodedError(err) && err.code).toBe('bad_command');
  });

  it('hostile words reach a real shell argv intact', () => {
    const words = [
      '$(touch /tmp/x)',
      '`id`',
      `'`,
      `"`,
      '\\',
      'a\nb',
      '\t',
      ' lead',
      '*',
      '~',
      '',
      ';ls',
      '|',
      '&&',
      '$HOME',
      'é漢🙂',
      '!',
      '#x',
      'a=b',
      '-n',
    ];
    expect(shellArgv(words)).toEqual(words);
  });

  it('any string without NUL round-trips through /bin/sh', () => {
    fc.assert(
      fc.property(
        fc
          .array(fc.oneof(fc.string({ unit: 'binary-ascii' }), fc.string({ unit: 'grapheme' })), {
            minLength: 1,
            maxLength: 6,
          })
          .map((ws) => ws.map((w) => w.replace(/\0/g, ''))),
        (words) => {
          expect(shellArgv(words)).toEqual(words);
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('buildRemoteCommand', () => {
  const endpoint: SshEndpoint = {
    machineId: 'kpro5',
    host: 'h',
    port: 22,
    username: 'root',
    privateKeyPath: '/k',
    hostKeyFingerprints: [],
  };

  it('direct: one timeout around the quoted argv', () => {
    const r = buildRemoteCommand(
      { kind: 'direct', endpoint },
      { argv: ['nvidia-smi', '-q', '-x'], timeoutMs: 1500 },
      1000,
    );
    expect(r.command).toBe('exec timeout -k 1 1.5 nvidia-smi -q -x');
    expect(r.lastRemoteKillMs).toBe(2500);
  });

  it('pct: the inner timeout runs in the container and fires first; the outer is a backstop', () => {
    const r = buildRemoteCommand(
      { kind: 'pct', host: endpoint, vmid: 129 },
      { argv: ['kill', '-9', '123'], timeoutMs: 10_000 },
      2000,
    );
    expect(r.command).toBe('exec timeout -k 2 13 pct exec 129 -- timeout -k 2 10 kill -9 123');
    expect(r.lastRemoteKillMs).toBe(15_000);
  });

  it('never emits `timeout 0` (which disables the timeout)', () => {
    const r = buildRemoteCommand({ kind: 'direct', endpoint }, { argv: ['true'], timeoutMs: 0.2 }, 0);
    expect(r.command).toBe('exec timeout -k 0.001 0.001 true');
  });

  it.each([
    [{ argv: [], timeoutMs: 1000 }, 1],
    [{ argv: ['true'], timeoutMs: 0 }, 1],
    [{ argv: ['true'], timeoutMs: Number.NaN }, 1],
    [{ argv: ['true'], timeoutMs: 1000 }, 0],
    [{ argv: ['true'], timeoutMs: 1000 }, 1.5],
  ])('refuses %j (vmid %s) with bad_command', (spec, vmid) => {
    let err: unknown;
    try {
      buildRemoteCommand({ kind: 'pct', host: endpoint, vmid }, spec, 1000);
    } catch (e) {
      err = e;
    }
    expect(isCodedError(err) && err.code).toBe('bad_command');
  });
});
