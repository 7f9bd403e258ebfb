import type { Result } from '../types.ts';

/** Why a text could not be read; one line, for users and logs. */
export interface ParseFailure {
  reason: string;
}

export type ParseResult<T> = Result<T, ParseFailure>;

export function ok<T>(value: T): ParseResult<T> {
  return { ok: true, value };
}

export function fail<T>(reason: string): ParseResult<T> {
  return { ok: false, error: { reason } };
}

/** Thrown inside a parser to abort with a reason; caught at the module's entry point. */
class ParseAbort extends Error {
  constructor(readonly reason: string) {
    super(reason);
    this.name = 'ParseAbort';
  }
}

export function abort(reason: string): never {
  throw new ParseAbort(reason);
}

export function guard<T>(run: () => T): ParseResult<T> {
  try {
    return ok(run());
  } catch (e) {
    if (e instanceof ParseAbort) return fail(e.reason);
    throw e;
  }
}

/** Strict non-negative integer (no sign, no decimals, no exponent), safe range only. */
export function toInt(text: string): number | null {
  if (!/^\d{1,15}$/.test(text)) return null;
  return Number(text);
}
