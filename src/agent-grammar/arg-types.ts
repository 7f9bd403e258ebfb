/**
 * The argument types of the agent's grammar (agent/PROTOCOL.md), so no free text reaches a host: every
 * argument a verb takes is one of these, checked by the agent with these exact patterns before anything runs.
 * A leaf (imports nothing), so the templates, the executor and the generator share it without cycles.
 */
export const AGENT_PROTOCOL = 1;

/** The agent version this worker needs (grammar.json's `agentVersion`): bump it when a verb is added or changed. */
export const AGENT_VERSION = '2.0.0';

/**
 * What one read-only session may ask of a host (agent/PROTOCOL.md, "Limits"), written into
 * grammar.json so the agent enforces exactly what the worker sends: a batch of at most `batchParts`
 * parts (a snapshot sends 4 to 6), and reads under at most `readTimeoutMs` each (destructive verbs keep
 * the protocol's 600 s ceiling).
 */
export const AGENT_LIMITS = { batchParts: 16, readTimeoutMs: 120_000 } as const;

export const ARG_TYPES = {
  int: '^(0|[1-9][0-9]{0,14})$',
  pid: '^[1-9][0-9]{0,9}$',
  vmid: '^[1-9][0-9]{0,9}$',
  uuid: '^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$',
  // Both incident shapes the worker makes: a request's (src/incident/ids.ts) and an alert episode's (alert-id.ts).
  incident: '^inc_([0-9]{8}_[0-9]{6}_[a-z0-9]{4,16}|alert_[0-9a-f]{20})$',
  approval: '^(none|apr_[A-Za-z0-9_-]{22})$',
  side: '^(host|container)$',
  signal: '^(TERM|KILL)$',
  onoff: '^(0|1)$',
} as const;

export type ArgType = keyof typeof ARG_TYPES;

/** The approval argument of a tier-1 destructive verb (no approval: the bot-signed request is the authority). */
export const NO_APPROVAL = 'none';

/** The ids every destructive verb carries, for the agent's checks and its audit line (not passed to the program). */
export interface DestructiveIds {
  incidentId: string;
  /** `apr_…` for a tier-2 step, `none` for tier 1. */
  approvalId: string;
}

/** The verbs that change a machine: each carries the ids above and the envelopes on stdin (envelopes.ts). */
export const DESTRUCTIVE_VERBS: readonly string[] = ['signal', 'persistence', 'reset'];
