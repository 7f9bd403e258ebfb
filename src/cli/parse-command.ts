import { readFile, stat } from 'node:fs/promises';
import { formatSnapshotText } from './snapshot-text.ts';
import { MAX_INPUT_CHARS, parseNvidiaOutput } from '../gpu/parse/index.ts';

export interface ParseCommandIo {
  stdin: NodeJS.ReadableStream;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

const USAGE = 'usage: parse [--json] [--exit-code N] [--fields a,b,c] FILE|-';
const MAX_BYTES = MAX_INPUT_CHARS;

class InputRefused extends Error {}

async function readStdin(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    size += buf.length;
    // Stop reading as soon as the limit is passed: a 100 MB pipe is refused, not buffered.
    if (size > MAX_BYTES)
      throw new InputRefused(`input is larger than ${MAX_BYTES / 1024 / 1024} MiB; nvidia-smi output never is`);
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}

async function readInput(file: string, stdin: NodeJS.ReadableStream): Promise<Buffer> {
  if (file === '-') return readStdin(stdin);
  const info = await stat(file);
  if (!info.isFile()) throw new InputRefused(`${file} is not a regular file`);
  if (info.size > MAX_BYTES)
    throw new InputRefused(
      `${file} is ${info.size} bytes, larger than ${MAX_BYTES / 1024 / 1024} MiB; nvidia-smi output never is`,
    );
  return readFile(file);
}

function decode(bytes: Buffer): string {
  if (bytes.includes(0)) throw new InputRefused('input is binary (contains NUL bytes), not command output');
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new InputRefused('input is not valid UTF-8 text');
  }
}

interface Args {
  json: boolean;
  file: string;
  exitCode: number | null;
  fields: string[] | null;
}

function parseArgs(args: readonly string[]): Args | string {
  let json = false;
  let exitCode: number | null = null;
  let fields: string[] | null = null;
  const files: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] ?? '';
    if (a === '--json') json = true;
    else if (a === '--exit-code') {
      const v = args[++i] ?? '';
      if (!/^\d{1,3}$/.test(v)) return `--exit-code needs a number 0-255; ${USAGE}`;
      exitCode = Number(v);
    } else if (a === '--fields') {
      const v = args[++i] ?? '';
      if (v === '') return `--fields needs a comma-separated field list; ${USAGE}`;
      fields = v.split(',').map((f) => f.trim());
    } else if (a.startsWith('--')) return `unknown option ${a}; ${USAGE}`;
    else files.push(a);
  }
  const [file] = files;
  if (file === undefined || files.length > 1) return USAGE;
  return { json, file, exitCode, fields };
}

/** `parse [--json] FILE|-`: detect the format, print one JSON object (or a readable table). Exit 0 on success. */
export async function runParseCommand(args: string[], io: ParseCommandIo): Promise<number> {
  const parsed = parseArgs(args);
  if (typeof parsed === 'string') {
    io.stderr.write(`parse: ${parsed}\n`);
    return 2;
  }
  let text: string;
  try {
    text = decode(await readInput(parsed.file, io.stdin));
  } catch (e) {
    const reason =
      e instanceof InputRefused
        ? e.message
        : e instanceof Error && 'code' in e
          ? `cannot read ${parsed.file} (${String(e.code)})`
          : 'cannot read input';
    io.stderr.write(`parse: ${reason}\n`);
    return 1;
  }
  let result: ReturnType<typeof parseNvidiaOutput>;
  try {
    result = parseNvidiaOutput(text, { exitCode: parsed.exitCode, csvFields: parsed.fields });
  } catch (e) {
    // A parser bug must still end in one line, not a stack trace.
    io.stderr.write(
      `parse: internal error while parsing (${e instanceof Error ? e.message.split('\n')[0] : 'unknown'})\n`,
    );
    return 1;
  }
  if (!result.ok) {
    io.stderr.write(`parse: ${result.error.reason}\n`);
    return 1;
  }
  io.stdout.write(parsed.json ? `${JSON.stringify(result.value)}\n` : formatSnapshotText(result.value));
  return 0;
}
