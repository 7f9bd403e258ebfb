import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/logger.ts';

/** A real pino logger (with the app's redaction) whose lines are kept in memory, for secret and content checks. */
export function captureLogger(
  name: string,
  level: 'debug' | 'info' | 'silent' = 'debug',
): { logger: Logger; lines: string[]; text(): string } {
  const lines: string[] = [];
  const destination = new Writable({
    write(c: Buffer, _e, cb) {
      lines.push(c.toString());
      cb();
    },
  });
  return { logger: createLogger({ name, level, destination }), lines, text: () => lines.join('') };
}
