import type { Redis } from 'ioredis';
import { asCodedError } from '../errors.ts';
import type { AnyEvent } from '../incident/all-events.ts';
import { IncidentLog } from '../incident/log.ts';
import { slackErrorCode, type SlackPoster } from '../slack/outbox.ts';
import type { Executor } from '../ssh/types.ts';
import type { Metrics } from './metrics.ts';
import { eventObserver } from './observe-events.ts';

/**
 * The three doors metrics are read at: the incident log's append, the SSH executor, the Slack
 * poster. Each wraps the real thing and changes nothing it does; a metrics failure never fails the
 * call it observes.
 */
export class ObservedIncidentLog extends IncidentLog {
  private readonly observe: (incidentId: string, e: AnyEvent) => Promise<void>;

  constructor(redis: Redis, prefix: string, metrics: Metrics) {
    super(redis, prefix);
    this.observe = eventObserver(metrics, async (id) => (await this.meta(id))?.kind ?? null);
  }

  override async append(id: string, event: AnyEvent): Promise<string> {
    const eventId = await super.append(id, event);
    await this.observe(id, event).catch(() => undefined);
    return eventId;
  }
}

/** SSH commands and failures by machine (the SSH endpoint's: a container reached by `pct exec` counts on its host). */
export function observedExecutor(inner: Executor, m: Metrics): Executor {
  return {
    async exec(route, spec) {
      const machine = route.kind === 'direct' ? route.endpoint.machineId : route.host.machineId;
      try {
        const r = await inner.exec(route, spec);
        const result = r.timedOut
          ? 'timed_out'
          : r.truncated
            ? 'output_too_large'
            : r.code === 0
              ? 'ok'
              : 'exit_nonzero';
        m.sshCommands.inc({ machine, result });
        if (r.timedOut) m.sshErrors.inc({ code: 'command_timeout', machine });
        else if (r.truncated) m.sshErrors.inc({ code: 'output_too_large', machine });
        return r;
      } catch (e) {
        const code = asCodedError(e).code;
        m.sshCommands.inc({ machine, result: code });
        m.sshErrors.inc({ code, machine });
        throw e;
      }
    },
    // The doctor's forced-key probes and the access mode pass through uncounted (they are not commands of a job).
    ...(inner.probeLine ? { probeLine: inner.probeLine.bind(inner) } : {}),
    ...(inner.access ? { access: inner.access } : {}),
    close: () => inner.close(),
  };
}

/** One Slack call counted by method and result (ok or Slack's error code); a failure also counts as a retry to come. */
export function observedSlackCall(m: Metrics): <T>(method: string, call: () => Promise<T>) => Promise<T> {
  return async <T>(method: string, call: () => Promise<T>): Promise<T> => {
    try {
      const r = await call();
      m.slackCalls.inc({ method, result: 'ok' });
      return r;
    } catch (e) {
      const code = slackErrorCode(e) ?? 'request_failed';
      m.slackCalls.inc({ method, result: code });
      m.slackRetries.inc({ method, reason: code });
      throw e;
    }
  };
}

/** Slack calls by method and result; a failed call is one the outbox sends again (without blocks, or on a later pass). */
export function observedPoster(inner: SlackPoster, m: Metrics): SlackPoster {
  const observe = observedSlackCall(m);
  return {
    post: (msg) => observe('chat.postMessage', () => inner.post(msg)),
    update: (msg) => observe('chat.update', () => inner.update(msg)),
    findTagged: (q) =>
      observe(q.threadTs === undefined ? 'conversations.history' : 'conversations.replies', () => inner.findTagged(q)),
  };
}
