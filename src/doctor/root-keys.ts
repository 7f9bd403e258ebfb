/**
 * Root's key lines holding the worker's key, from what the agent's `root-keys` read printed
 * (src/agent-grammar/templates/doctor-probes.ts rootKeysRead). Pure. A line with the worker's key and
 * no forced command is a root shell for whoever steals the key; the forced one is the `--root-forced`
 * login (agent/install.sh), fine when it is the login this worker uses, a second way in otherwise.
 */
import { ROOT_KEYS_FILE_CAP } from '../agent-grammar/templates/doctor-probes.ts';

/** One key line of an authorized_keys file, as sshd reads it: options (if any), key type, key blob. */
export interface KeyLine {
  options: string[];
  type: string;
  blob: string;
}

const KEY_TYPE = /^(ssh|ecdsa|sk)-\S+$/;
const BLOB = /^AAAA[A-Za-z0-9+/]+=*$/;

/** Splits `text` at `sep` outside double quotes (a quote inside quotes is escaped `\"`, as sshd reads it). */
function splitUnquoted(text: string, sep: (c: string) => boolean): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i] ?? '';
    if (quoted && c === '\\' && text[i + 1] === '"') {
      cur += '\\"';
      i++;
    } else if (c === '"') {
      quoted = !quoted;
      cur += c;
    } else if (!quoted && sep(c)) {
      out.push(cur);
      cur = '';
    } else cur += c;
  }
  out.push(cur);
  return out;
}

/** One line of an authorized_keys file, or null when it holds no key (comment, blank, garbage). */
export function parseKeyLine(line: string): KeyLine | null {
  const text = line.trim();
  if (text === '' || text.startsWith('#')) return null;
  const words = splitUnquoted(text, (c) => c === ' ' || c === '\t').filter((w) => w !== '');
  // A line begins with its key type, or with one options field (no unquoted blank in it) before it.
  const at = KEY_TYPE.test(words[0] ?? '') ? 0 : 1;
  const type = words[at];
  const blob = words[at + 1];
  if (type === undefined || blob === undefined || !KEY_TYPE.test(type) || !BLOB.test(blob)) return null;
  return { options: at === 0 ? [] : splitUnquoted(words[0] ?? '', (c) => c === ','), type, blob };
}

/** The value of `command="…"` (names are case-insensitive to sshd), unquoted, or null. */
function commandOf(options: readonly string[]): string | null {
  for (const o of options) {
    const m = /^command="(.*)"$/i.exec(o);
    if (m?.[1] !== undefined) return m[1].replace(/\\"/g, '"');
  }
  return null;
}

/** The agent's forced command: `command="<dir>/gpu-medic-agent"` (agent/install.sh writes the front's path). */
function forcedToAgent(line: KeyLine): boolean {
  const cmd = commandOf(line.options);
  return cmd !== null && /(^|\/)gpu-medic-agent$/.test(cmd.trim());
}

/** A line of root's that holds the worker's key. */
export interface RootHit {
  file: string;
  lineNo: number;
  forced: boolean;
}

export interface RootKeysParsed {
  /** `@end` came: the whole answer is here. */
  complete: boolean;
  /** Each file and what became of it: read (with its key lines), absent, unreadable, or cut at the cap. */
  files: Array<{ file: string; state: 'read' | 'absent' | 'unreadable'; keys: number; cut: boolean }>;
  hits: RootHit[];
}

/** The root-keys read's output, against the worker's key blob (base64, as in authorized_keys). */
export function parseRootKeys(stdout: string, workerBlob: string): RootKeysParsed {
  const files: RootKeysParsed['files'] = [];
  const hits: RootHit[] = [];
  let complete = false;
  let cur: RootKeysParsed['files'][number] | undefined;
  for (const raw of stdout.split('\n')) {
    const marker = /^@(file|absent|unreadable|cut) (\S+)$/.exec(raw);
    if (raw === '@end') {
      complete = true;
      break;
    }
    if (marker !== null) {
      const [, kind, file = ''] = marker;
      if (kind === 'cut') {
        if (cur !== undefined && cur.file === file) cur.cut = true;
        continue;
      }
      cur = { file, state: kind === 'file' ? 'read' : (kind as 'absent' | 'unreadable'), keys: 0, cut: false };
      files.push(cur);
      continue;
    }
    const numbered = /^(\d+):(.*)$/.exec(raw);
    if (numbered === null || cur?.state !== 'read') continue;
    const line = parseKeyLine(numbered[2] ?? '');
    if (line === null) continue;
    cur.keys++;
    if (line.blob === workerBlob)
      hits.push({ file: cur.file, lineNo: Number(numbered[1]), forced: forcedToAgent(line) });
  }
  return { complete, files, hits };
}

export interface RootKeysVerdict {
  status: 'ok' | 'warn' | 'fail';
  detail: string;
  hint: string | null;
}

const base = (file: string): string => file.replace(/^.*\//, '');
const where = (h: RootHit): string => `root's ${base(h.file)} line ${h.lineNo}`;

const STATUS_HINT =
  "On the machine, as root: `sh install.sh status` lists root's lines holding the worker's key, and `sh install.sh upgrade --remove-root-lines` removes them (on a Proxmox cluster /root/.ssh/authorized_keys is /etc/pve/priv/authorized_keys, shared by every node: one removal covers them all).";

/**
 * The verdict on root's lines: any line with the worker's key and no forced command fails (a stolen
 * worker key is a root shell); a forced one is ok when root is the login this worker uses (a
 * `--root-forced` install), else a warning (a second way in beside the agent's account); none is ok.
 * A file that could not be read, or was read only in part, is a warning when nothing failed.
 */
export function judgeRootKeys(p: RootKeysParsed, loginUser: string): RootKeysVerdict {
  const plain = p.hits.filter((h) => !h.forced);
  const forced = p.hits.filter((h) => h.forced);
  if (plain.length > 0)
    return {
      status: 'fail',
      detail: `${plain.map(where).join(', ')} ${plain.length === 1 ? 'holds' : 'hold'} the worker's key without the agent's forced command: a stolen worker key is a root shell here`,
      hint: STATUS_HINT,
    };
  const unread = p.files.filter((f) => f.state === 'unreadable');
  const cut = p.files.filter((f) => f.cut);
  const gaps = [
    ...(p.complete ? [] : ['the answer ended early']),
    ...unread.map((f) => `${f.file} could not be read (the agent does not run as root here?)`),
    ...cut.map((f) => `only the first ${ROOT_KEYS_FILE_CAP / 1024} KiB of ${f.file} was read`),
  ];
  if (forced.length > 0 && loginUser !== 'root')
    return {
      status: 'warn',
      detail: `${forced.map(where).join(', ')} ${forced.length === 1 ? 'holds' : 'hold'} the worker's key as root, forced to the agent (a --root-forced install): a second way in beside the ${loginUser} account`,
      hint: STATUS_HINT,
    };
  if (gaps.length > 0)
    return {
      status: 'warn',
      detail: `no line read holds the worker's key, but ${gaps.join('; ')}`,
      hint: STATUS_HINT,
    };
  if (forced.length > 0)
    return {
      status: 'ok',
      detail: `${forced.map(where).join(', ')}: the worker's key forced to the agent, the --root-forced login this worker uses`,
      hint: null,
    };
  const seen = p.files.map(
    (f) => `${base(f.file)} ${f.state === 'read' ? `${f.keys} key${f.keys === 1 ? '' : 's'}` : f.state}`,
  );
  return {
    status: 'ok',
    detail: `no root line holds the worker's key${seen.length > 0 ? ` (${seen.join(', ')})` : ''}`,
    hint: null,
  };
}
