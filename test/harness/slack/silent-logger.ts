import { LogLevel, type Logger } from '@slack/bolt';

/** WebClient logs platform errors and retries at warn/error; tests assert on them, so drop the noise. */
export const silentSlackLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  setLevel: () => {},
  getLevel: () => LogLevel.ERROR,
  setName: () => {},
};
