import { CodedError, ErrorCode } from '../errors.ts';

/**
 * One POSIX shell word for any string: wrapped in single quotes, where nothing is special,
 * and each `'` written as `'\''`. Safe for `$(...)`, backticks, newlines, globs and any
 * non-ASCII bytes. NUL cannot be passed in an argv word at all, so it is refused.
 */
export function shellQuote(word: string): string {
  if (word.includes('\0')) {
    throw new CodedError(
      ErrorCode.BadCommand,
      'A command word contains a NUL byte; it cannot be passed to a remote command, nothing was run.',
    );
  }
  // Plain words stay readable in the incident log. No `=`: a leading `a=b` word would be an assignment.
  if (word !== '' && /^[A-Za-z0-9_@%+:,./-]+$/.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/** A command line whose words reach the remote argv exactly as given. */
export function shellJoin(argv: readonly string[]): string {
  return argv.map(shellQuote).join(' ');
}
