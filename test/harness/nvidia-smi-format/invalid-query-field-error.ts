/** What nvidia-smi does for a `--query-*` field it doesn't know: this message and exit code 2. */
export class InvalidQueryFieldError extends Error {
  readonly code = 'invalid_query_field';
  /** nvidia-smi's exit code for an invalid argument (man page: 2). */
  readonly exitCode = 2;

  constructor(readonly field: string) {
    super(`Field "${field}" is not a valid field to query.`);
    this.name = 'InvalidQueryFieldError';
  }
}
