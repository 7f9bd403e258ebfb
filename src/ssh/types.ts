import type { CommandSpec } from '../agent-grammar/command-spec.ts';

/** One SSH endpoint. The host key is pinned: unknown or changed keys are refused. */
export interface SshEndpoint {
  /** Inventory id of the machine this endpoint belongs to (for logs and errors). */
  machineId: string;
  host: string;
  port: number;
  username: string;
  /** Path to the private key file; read by the worker only, never logged. */
  privateKeyPath: string;
  /** Pinned host key fingerprints, `SHA256:...` as `ssh-keygen -l` prints them. */
  hostKeyFingerprints: string[];
  /** How this endpoint is spoken to; default the executor's (`agent` unless set otherwise). */
  access?: 'agent' | 'root-shell';
}

/** pino-compatible subset; a pino Logger fits. */
export interface SshLogger {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** How to reach the machine a command is for. */
export type Route =
  | { kind: 'direct'; endpoint: SshEndpoint }
  /** A container with no address of its own: `pct exec <vmid> -- argv` on its Proxmox host. */
  | { kind: 'pct'; host: SshEndpoint; vmid: number };

export interface ExecResult {
  /** The literal command line sent to the SSH server (for the incident log). */
  command: string;
  machineId: string;
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
}

export interface Executor {
  /** Runs one command; rejects with a CodedError (connect/auth/host-key/connection-lost) when it could not run. */
  exec(route: Route, spec: CommandSpec): Promise<ExecResult>;
  /**
   * Sends `line` exactly as it is, with an empty stdin, and returns whatever came back (a refusal
   * included): only the doctor's forced-key probes use it (src/agent-grammar/templates/doctor-probes.ts AGENT_PROBES), to
   * see what the machine does with a line that is not a template's.
   */
  probeLine?(endpoint: SshEndpoint, line: string, timeoutMs: number): Promise<ExecResult>;
  /** How it speaks to machines whose endpoint does not say (GPU_MEDIC_SSH_ACCESS). */
  readonly access?: 'agent' | 'root-shell';
  /** Closes every pooled connection. */
  close(): Promise<void>;
}
