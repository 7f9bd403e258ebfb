import { readFileSync } from 'node:fs';

/**
 * Reads `KEY=value` lines from a .env file and returns only the keys `keep` accepts. A value whose
 * key is not kept is never turned into a string, and the file's bytes are zeroed once read: a
 * worker started next to a .env holding the Slack tokens keeps no copy of them in its memory.
 * Syntax: `KEY=value`, optional `export `, `#` comments, optional matching quotes around the value.
 * Returns null when there is no such file. `badLines` are the numbers of lines that are neither
 * blank, a comment nor `KEY=value` (named, never shown: such a line may hold a secret).
 */
export function readEnvFile(
  path: string,
  keep: (key: string) => boolean,
): { values: Record<string, string>; badLines: number[] } | null {
  let buf: Buffer;
  try {
    buf = readFileSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new Error(`cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
  const values: Record<string, string> = {};
  const badLines: number[] = [];
  try {
    let start = 0;
    for (let line = 1; start < buf.length; line++) {
      let end = buf.indexOf(0x0a, start);
      if (end < 0) end = buf.length;
      const key = keyOf(buf, start, end);
      if (key !== null && keep(key.name)) values[key.name] = fieldValue(buf.toString('utf8', key.valueAt, end));
      else if (key === null && !blankOrComment(buf, start, end)) badLines.push(line);
      start = end + 1;
    }
  } finally {
    buf.fill(0);
  }
  return { values, badLines };
}

function blankOrComment(buf: Buffer, start: number, end: number): boolean {
  let i = start;
  while (i < end && isSpace(buf[i])) i++;
  return i === end || buf[i] === 0x23;
}

const isSpace = (c: number | undefined): boolean => c === 0x20 || c === 0x09 || c === 0x0d;
const isKeyChar = (c: number, first: boolean): boolean =>
  (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || (!first && c >= 0x30 && c <= 0x39);

/** The key of one line and where its value starts, read byte by byte (the value stays bytes). */
function keyOf(buf: Buffer, start: number, end: number): { name: string; valueAt: number } | null {
  let i = start;
  while (i < end && isSpace(buf[i])) i++;
  if (buf.toString('latin1', i, Math.min(i + 7, end)) === 'export ') i += 7;
  const from = i;
  while (i < end && isKeyChar(buf[i] ?? 0, i === from)) i++;
  if (i === from) return null;
  const name = buf.toString('latin1', from, i);
  while (i < end && isSpace(buf[i])) i++;
  if (buf[i] !== 0x3d) return null;
  return { name, valueAt: i + 1 };
}

function fieldValue(raw: string): string {
  const v = raw.trim();
  const q = v[0];
  if ((q === '"' || q === "'") && v.length >= 2 && v.endsWith(q)) return v.slice(1, -1);
  const hash = v.search(/\s#/);
  return (hash >= 0 ? v.slice(0, hash) : v).trim();
}
