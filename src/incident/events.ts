import { z } from 'zod';
import type { Finding } from '../doctor/judge.ts';
import type { ErrorCode } from '../errors.ts';
import type { MachineSnapshot } from '../gpu/snapshot.ts';

/** `alert`: one watchdog alert episode (src/watchdog/alert-events.ts), rendered as one message edited in place. */
export type IncidentKind = 'status' | 'status_all' | 'unstick' | 'doctor' | 'alert';

export const IncidentMetaSchema = z.object({
  id: z.string().regex(/^inc_[a-z0-9_]+$/),
  kind: z.enum(['status', 'status_all', 'unstick', 'doctor', 'alert']),
  requester: z.string(),
  channel: z.string(),
  /** Machine ids the incident is about, resolved against the inventory. */
  targets: z.array(z.string()),
  /** What the user typed, kept for the record only: never reaches a shell. */
  text: z.string(),
  reason: z.string().nullable(),
  createdAt: z.string(),
});
export type IncidentMeta = z.infer<typeof IncidentMetaSchema>;

/** The literal command a step ran, as the incident log keeps it. */
export interface CommandRecord {
  machineId: string;
  command: string;
  code: number | null;
  signal: string | null;
  durationMs: number;
  timedOut: boolean;
}

export type IncidentEvent =
  /**
   * `name`: the requester's Slack user name as the slash command carried it (`user_name`), for the
   * post-mortem's `@name`; the id stays in the meta. Absent in logs from before it was recorded.
   */
  | { type: 'requested'; at: string; name?: string }
  | { type: 'started'; at: string; worker: string }
  | {
      type: 'snapshot';
      at: string;
      label: 'status' | 'before' | 'after';
      snapshot: MachineSnapshot;
      commands: CommandRecord[];
    }
  | {
      type: 'machine_error';
      at: string;
      machineId: string;
      code: ErrorCode;
      message: string;
      commands: CommandRecord[];
    }
  | { type: 'finished'; at: string; outcome: 'ok' | 'partial' | 'failed'; durationMs: number }
  /** `/gpu doctor`'s result: every finding on the machines it was asked about (see src/doctor/). */
  | { type: 'doctor_report'; at: string; machines: string[]; findings: Finding[]; failed: number; warned: number }
  | { type: 'error'; at: string; code: ErrorCode; message: string };

/** An event as read back from the log, with its stream id (ordered, unique). */
export type LoggedEvent = IncidentEvent & { id: string };

const EventEnvelope = z.object({ type: z.string(), at: z.string() }).passthrough();

/** Parses one stored event; unknown shapes are kept out rather than trusted. */
export function decodeEvent<E extends { type: string; at: string } = IncidentEvent>(
  id: string,
  json: string,
): (E & { id: string }) | null {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    return null;
  }
  const env = EventEnvelope.safeParse(raw);
  if (!env.success) return null;
  // Events are written only by our own processes through `IncidentLog.append`, typed at compile time.
  return { ...(env.data as unknown as E), id };
}
