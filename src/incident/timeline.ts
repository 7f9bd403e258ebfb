/**
 * An incident's durable log as plain text, one line per event: what a person reads in a
 * post-mortem, or at 3 a.m. when Slack itself is down. Pure; the CLI (src/cli/incidents-command.ts)
 * reads the log and prints this. Nothing here is a secret: the log never holds any.
 */
import type { AnyLoggedEvent } from './all-events.ts';
import { gpuTroubleOf } from '../gpu/gpu-trouble.ts';
import type { IncidentMeta } from './events.ts';
import { count, seconds } from '../text/units.ts';
import { OUTCOME_WORDS, signalOutcome } from './signal-outcome.ts';

/** `2026-11-30T03:12:45.123Z` → `03:12:45.123` (the header carries the date). */
const clock = (iso: string): string => /T(\d\d:\d\d:\d\d(?:\.\d+)?)/.exec(iso)?.[1] ?? iso;
/** Text from the log is shown, never interpreted: keep each event on one line. */
const lastOf = <T extends AnyLoggedEvent['type']>(
  events: readonly AnyLoggedEvent[],
  type: T,
): Extract<AnyLoggedEvent, { type: T }> | undefined => {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i];
    if (e?.type === type) return e as Extract<AnyLoggedEvent, { type: T }>;
  }
  return undefined;
};
const oneLine = (s: string): string => s.replace(/[\r\n\t]+/g, ' ').replace(/[\u0000-\u001f\u007f]/g, '?');

/** A multi-line script (the /proc reader) shows its first line; `--json` has it whole. */
const commandLine = (c: string): string => {
  const lines = c.split('\n');
  return lines.length === 1 ? oneLine(c) : `${oneLine(lines[0] ?? '')} … (${lines.length - 1} more lines)`;
};

/**
 * ` · GPU error on kpro5: GPU is lost` for every machine whose latest snapshot was read with its
 * GPUs in error or unreadable (empty when none): such an incident is never just "ok".
 */
function gpuTroubleNote(events: readonly AnyLoggedEvent[]): string {
  const latest = new Map<string, Extract<AnyLoggedEvent, { type: 'snapshot' }>['snapshot']>();
  for (const e of events) if (e.type === 'snapshot') latest.set(e.snapshot.machineId, e.snapshot);
  const notes = [...latest.values()].flatMap((s) => {
    const t = gpuTroubleOf(s);
    return t ? [`GPU error on ${oneLine(s.machineId)}: ${t.label}`] : [];
  });
  return notes.length > 0 ? ` · ${notes.join('; ')}` : '';
}

/** How the incident ended, from its events alone (`open` while nothing says it ended). */
export function incidentState(meta: IncidentMeta, events: readonly AnyLoggedEvent[]): string {
  const fin = lastOf(events, 'finished');
  const verdict = lastOf(events, 'verdict');
  const trouble = gpuTroubleNote(events);
  if (fin)
    return `${verdict ? `${verdict.verdict.title} (finished ${fin.outcome})` : `finished (${fin.outcome})`}${trouble}`;
  const pending = lastOf(events, 'approval_requested');
  if (
    pending &&
    !events.some(
      (e) => (e.type === 'approval_decided' || e.type === 'approval_expired') && e.approvalId === pending.approvalId,
    )
  ) {
    return `waiting for approval ${pending.approvalId}`;
  }
  if (meta.kind !== 'unstick') {
    const read = new Set(
      events.flatMap((e) =>
        e.type === 'snapshot' ? [e.snapshot.machineId] : e.type === 'machine_error' ? [e.machineId] : [],
      ),
    );
    if (meta.targets.every((t) => read.has(t))) return `done${trouble}`;
  }
  return events.some((e) => e.type === 'started') ? 'running' : 'queued';
}

/** One event in words. */
export function describeEvent(meta: IncidentMeta, e: AnyLoggedEvent): string {
  switch (e.type) {
    case 'requested':
      return `requested by ${meta.requester} in ${meta.channel}: "${oneLine(meta.text)}"${meta.reason ? ` (reason: ${oneLine(meta.reason)})` : ''}`;
    case 'started':
      return `taken by worker ${e.worker}`;
    case 'snapshot': {
      const s = e.snapshot;
      const gpus = s.gpus
        .map((g) => `${g.index ?? '?'}:${count(g.memoryUsedMiB)}/${count(g.memoryTotalMiB)}`)
        .join(' ');
      const procs = s.processes.map((p) => `${p.pid}${p.name ? ` ${p.name}` : ''}`).join(', ');
      const ram = s.ram
        ? ` · RAM ${(s.ram.usedBytes / 2 ** 30).toFixed(0)}/${(s.ram.totalBytes / 2 ** 30).toFixed(0)} GiB`
        : '';
      const err = s.gpuError ? ` · nvidia-smi error ${s.gpuError.kind}` : '';
      return `snapshot (${e.label}) of ${s.machineId}, ${s.view} view: GPU MiB ${gpus || 'none'}${procs ? ` · processes ${procs}` : ''}${ram}${err}`;
    }
    case 'machine_error':
      return `${e.machineId} could not be read: ${e.code}: ${oneLine(e.message)}`;
    case 'error':
      return `error ${e.code}: ${oneLine(e.message)}`;
    case 'finished':
      return `finished: ${e.outcome} after ${seconds(e.durationMs)}`;
    case 'diagnosis': {
      const d = e.diagnosis;
      const gpus = d.gpus
        .filter((g) => g.kind !== 'idle')
        .map(
          (g) =>
            `GPU ${g.index ?? '?'} ${g.kind} (${count(g.usedMiB)} MiB, ${g.holders.length} holder${g.holders.length === 1 ? '' : 's'} inside, ${g.outside.length} outside)`,
        );
      return `diagnosis (${e.label}) of ${d.target} on ${d.host}: ${d.error ? `nvidia-smi error ${d.error.kind}` : gpus.length ? gpus.join('; ') : 'every GPU idle'}`;
    }
    case 'step_started':
      return `step ${e.stepId} started: ${e.kind}, tier ${e.tier}, on ${e.machineId}: ${oneLine(e.explanation)}`;
    case 'command': {
      const r = e.record;
      const end = r.timedOut ? 'timed out' : r.code !== null ? `exit ${r.code}` : `signal ${r.signal ?? '?'}`;
      return `  $ ${commandLine(r.command)}   [${e.role} on ${e.on} ${r.machineId}: ${end}, ${r.durationMs} ms]`;
    }
    case 'signal_intent':
      return `  about to send SIG${e.signal} on the ${e.on} to host PID${e.targets.length === 1 ? '' : 's'} ${e.targets.map((t) => `${t.hostPid} (container PID ${t.containerPid}, start ${t.startTimeTicks})`).join(', ')}`;
    case 'signalled':
      return `  ${e.signal} host PID ${e.hostPid} (container PID ${e.containerPid}, "${oneLine(e.cmdline)}"): ${e.result === 'sent' ? 'sent' : OUTCOME_WORDS[signalOutcome(e)]}${e.reason ? ` (${oneLine(e.reason)})` : ''}`;
    case 'step_finished':
      return `step ${e.stepId} ${e.outcome} after ${seconds(e.durationMs)}${e.message ? `: ${oneLine(e.message)}` : ''}`;
    case 'approval_requested':
      return `approval ${e.approvalId} requested for step ${e.stepId} (${e.step.kind} on ${e.host}, vmid ${e.vmid}; host PIDs ${e.step.targets.map((t) => t.hostPid).join(', ') || 'none'}), expires ${e.expiresAt}`;
    case 'approval_decided':
      return `approval ${e.approvalId} ${e.decision} by ${e.by}`;
    case 'approval_expired':
      return `approval ${e.approvalId} expired with no decision`;
    case 'approval_reminded':
      return `approval ${e.approvalId} still undecided at half its time: reminded ${e.pinged.join(', ') || 'nobody'} (expires ${e.expiresAt})`;
    case 'approval_escalated':
      return `approval ${e.approvalId} escalated to ${e.pinged.join(', ') || 'nobody'}, who may decide it too from now on (expires ${e.expiresAt})`;
    case 'approval_refused':
      return `a click on approval ${e.approvalId} by ${e.by} was refused: ${e.reason}`;
    case 'verdict': {
      const v = e.verdict;
      const outside = v.outside ?? [];
      return `verdict: ${v.title}, ${count(v.totalFreedMiB)} MiB freed by this incident${outside.length > 0 ? `; outside it: ${oneLine(outside.join(' '))}` : ''}${v.nextStep ? `; next: ${oneLine(v.nextStep)}` : ''}`;
    }
    case 'doctor_report':
      return `doctor: ${e.failed} failed, ${e.warned} warnings on ${e.machines.join(', ')}${e.findings
        .filter((f) => f.status === 'fail')
        .map((f) => `; ${f.machineId} ${f.check}: ${oneLine(f.detail)}`)
        .join('')}`;
    case 'alert_raised':
      return `alert raised: ${e.alert.kind} on ${e.alert.machineId}: ${oneLine(e.alert.sentence)}`;
    case 'alert_updated':
      return `alert now says: ${oneLine(e.alert.sentence)}`;
    case 'alert_cleared':
      return `alert cleared (${e.alert.kind} on ${e.alert.machineId})`;
    case 'alert_snoozed':
      return `${e.scope} snoozed until ${e.until} by ${e.by}`;
    case 'alert_action':
      return `${e.action} clicked by ${e.by}${e.incidentId ? `: opened ${e.incidentId}` : ''}${e.refused ? ` (refused: ${oneLine(e.refused)})` : ''}`;
    default: {
      const unknown: never = e;
      return `(unknown event ${JSON.stringify(unknown).slice(0, 200)})`;
    }
  }
}

/** The whole incident: a header, then `HH:MM:SS.mmm  what happened` per event, in log order. */
export function renderTimeline(meta: IncidentMeta, events: readonly AnyLoggedEvent[]): string {
  const head = [
    `incident ${meta.id} · ${meta.kind} of ${meta.targets.join(', ') || '(none)'} · ${incidentState(meta, events)}`,
    `opened ${meta.createdAt} by ${meta.requester} in ${meta.channel} · ${events.length} event${events.length === 1 ? '' : 's'}`,
    '',
  ];
  return `${[...head, ...events.map((e) => `${clock(e.at)}  ${describeEvent(meta, e)}`)].join('\n')}\n`;
}

/** One line for a list of incidents. */
export function incidentListLine(meta: IncidentMeta, events: readonly AnyLoggedEvent[]): string {
  return `${meta.id}  ${meta.createdAt}  ${meta.kind.padEnd(10)}  ${meta.targets.join(',').padEnd(14)}  ${meta.requester.padEnd(11)}  ${incidentState(meta, events)}`;
}
