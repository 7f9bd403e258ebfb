import type { Logger as BoltLogger, LogLevel } from '@slack/bolt';
import type { Logger } from '../logger.ts';

/** Bolt's logger interface on top of pino (which already redacts secrets). */
export function boltLogger(base: Logger): BoltLogger {
  let level = base.level as LogLevel;
  let log = base.child({ component: 'bolt' });
  const text = (msg: unknown[]): string => msg.map((m) => (typeof m === 'string' ? m : JSON.stringify(m))).join(' ');
  return {
    debug: (...m: unknown[]) => log.debug(text(m)),
    info: (...m: unknown[]) => log.info(text(m)),
    warn: (...m: unknown[]) => log.warn(text(m)),
    error: (...m: unknown[]) => log.error(text(m)),
    setLevel: (l: LogLevel) => {
      level = l;
    },
    getLevel: () => level,
    setName: (name: string) => {
      log = base.child({ component: name });
    },
  };
}
