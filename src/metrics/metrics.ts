import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/**
 * gpu-medic's Prometheus metrics, all on one registry that is passed in (no global default
 * registry): `start` serves the bot's and the worker's on one endpoint. Labels are bounded: kinds
 * and outcomes are fixed sets, machines are inventory ids, error codes come from src/errors.ts.
 */
export interface Metrics {
  registry: Registry;
  /** Incidents that finished, by kind (status, status_all, unstick, doctor) and outcome (ok, partial, failed). */
  incidents: Counter<'kind' | 'outcome'>;
  /** Unstick steps from start to finish, by step kind and outcome. */
  stepSeconds: Histogram<'kind' | 'outcome'>;
  /** Destructive steps (every unstick step signals or resets), by kind and result. */
  destructiveSteps: Counter<'kind' | 'result'>;
  /** Signals sent or not sent to GPU holders, by signal and result (sent, gone, skipped). */
  signals: Counter<'signal' | 'result'>;
  /** SSH commands, by machine and result (ok, exit_nonzero, timed_out, or the error code when it could not run). */
  sshCommands: Counter<'machine' | 'result'>;
  /** SSH failures, by error code (host_key_mismatch, connect_timeout, command_timeout, ...) and machine. */
  sshErrors: Counter<'code' | 'machine'>;
  /** Jobs by kind, from being queued (minus any deliberate delay) to a worker taking them. */
  jobWaitSeconds: Histogram<'kind'>;
  /** Jobs by kind and result (completed, failed), from taken to done. */
  jobRunSeconds: Histogram<'kind' | 'result'>;
  /** Jobs per site queue and state, read from Redis at scrape time. */
  queueJobs: Gauge<'site' | 'state'>;
  /** Slack Web API calls the outbox made, by method and result (ok or Slack's error code). */
  slackCalls: Counter<'method' | 'result'>;
  /** Slack Web API retries: rate-limited waits (429) and calls the outbox will send again. */
  slackRetries: Counter<'method' | 'reason'>;
  /** Approval decisions by outcome: approved, denied, expired, or refused (with the refusal reason). */
  approvals: Counter<'outcome' | 'reason'>;
  /** Watchdog rounds, by site and outcome (ok: every machine judged; failed: some machine not judged). */
  watchRounds: Counter<'site' | 'outcome'>;
  /** Watchdog rounds from start to end (every machine of the site read and judged), by site. */
  watchRoundSeconds: Histogram<'site'>;
  /** Adds a reader the queue gauge calls at each scrape (the worker's queue counts); returns its removal. */
  onScrape(reader: (queueJobs: Gauge<'site' | 'state'>) => Promise<void>): () => void;
}

const DURATION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900];

export function createMetrics(registry: Registry = new Registry()): Metrics {
  const registers = [registry];
  const readers = new Set<(g: Gauge<'site' | 'state'>) => Promise<void>>();
  const queueJobs: Gauge<'site' | 'state'> = new Gauge({
    name: 'gpu_medic_queue_jobs',
    help: 'Jobs per site queue and state (waiting, active, delayed, prioritized, failed), read at scrape time.',
    labelNames: ['site', 'state'],
    registers,
    async collect() {
      for (const read of readers) await read(queueJobs);
    },
  });
  return {
    onScrape(reader) {
      readers.add(reader);
      return () => readers.delete(reader);
    },
    queueJobs,
    registry,
    incidents: new Counter({
      name: 'gpu_medic_incidents_total',
      help: 'Incidents that finished, by kind and outcome.',
      labelNames: ['kind', 'outcome'],
      registers,
    }),
    stepSeconds: new Histogram({
      name: 'gpu_medic_step_duration_seconds',
      help: 'Unstick step durations, by step kind and outcome.',
      labelNames: ['kind', 'outcome'],
      buckets: DURATION_BUCKETS,
      registers,
    }),
    destructiveSteps: new Counter({
      name: 'gpu_medic_destructive_steps_total',
      help: 'Destructive steps (signals, resets) by kind and result.',
      labelNames: ['kind', 'result'],
      registers,
    }),
    signals: new Counter({
      name: 'gpu_medic_signals_total',
      help: 'Signals to GPU holders by signal and result (sent, gone, skipped).',
      labelNames: ['signal', 'result'],
      registers,
    }),
    sshCommands: new Counter({
      name: 'gpu_medic_ssh_commands_total',
      help: 'SSH commands by machine and result.',
      labelNames: ['machine', 'result'],
      registers,
    }),
    sshErrors: new Counter({
      name: 'gpu_medic_ssh_errors_total',
      help: 'SSH failures by error code and machine.',
      labelNames: ['code', 'machine'],
      registers,
    }),
    jobWaitSeconds: new Histogram({
      name: 'gpu_medic_job_wait_seconds',
      help: 'Time a job waited in its queue before a worker took it.',
      labelNames: ['kind'],
      buckets: DURATION_BUCKETS,
      registers,
    }),
    jobRunSeconds: new Histogram({
      name: 'gpu_medic_job_run_seconds',
      help: 'Time a worker spent on a job, by kind and result.',
      labelNames: ['kind', 'result'],
      buckets: DURATION_BUCKETS,
      registers,
    }),
    slackCalls: new Counter({
      name: 'gpu_medic_slack_api_calls_total',
      help: 'Slack Web API calls by method and result (ok or the Slack error).',
      labelNames: ['method', 'result'],
      registers,
    }),
    slackRetries: new Counter({
      name: 'gpu_medic_slack_api_retries_total',
      help: 'Slack Web API retries by method and reason (rate_limited, will_retry).',
      labelNames: ['method', 'reason'],
      registers,
    }),
    watchRounds: new Counter({
      name: 'gpu_medic_watch_rounds_total',
      help: 'Watchdog rounds by site and outcome (ok, failed: some machine not judged).',
      labelNames: ['site', 'outcome'],
      registers,
    }),
    watchRoundSeconds: new Histogram({
      name: 'gpu_medic_watch_round_duration_seconds',
      help: 'Watchdog round durations (every machine of the site read and judged), by site.',
      labelNames: ['site'],
      buckets: DURATION_BUCKETS,
      registers,
    }),
    approvals: new Counter({
      name: 'gpu_medic_approval_decisions_total',
      help: 'Approval decisions by outcome (approved, denied, expired, refused) and refusal reason.',
      labelNames: ['outcome', 'reason'],
      registers,
    }),
  };
}
