import { describe, expect, it } from 'vitest';
import { asCodedError, CodedError, ErrorCode } from '../../src/errors.ts';

describe('the one list of error codes', () => {
  it('holds the codes workers and the approval policy write: machine_error, job_mismatch, budget_exhausted, plan_unverified, escalation_not_due', () => {
    const listed: string[] = Object.values(ErrorCode);
    for (const code of ['machine_error', 'job_mismatch', 'budget_exhausted', 'plan_unverified', 'escalation_not_due'])
      expect(listed).toContain(code);
  });

  it('asCodedError wraps an unknown throw as internal with its message, and keeps the original as cause', () => {
    const original = new TypeError('x is not a function');
    const wrapped = asCodedError(original);
    expect(wrapped).toBeInstanceOf(CodedError);
    expect(wrapped.code).toBe(ErrorCode.Internal);
    expect(wrapped.message).toBe('x is not a function');
    expect(wrapped.cause).toBe(original);
    expect(asCodedError('plain text').cause).toBe('plain text');
  });

  it('asCodedError hands a CodedError back unchanged', () => {
    const e = new CodedError(ErrorCode.TargetUnknown, 'no such machine');
    expect(asCodedError(e)).toBe(e);
  });
});
