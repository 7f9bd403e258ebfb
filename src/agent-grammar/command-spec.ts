/**
 * What a template builds: the argv (and the agent verb it is) of one command, with its limits. It sits
 * beside the grammar, under the executor that runs it, so the templates never import the SSH layer.
 */

/**
 * The agent verb a template is (agent/grammar.json, src/agent-grammar/): what the worker sends in
 * `agent` access mode instead of argv. The agent runs the grammar's `run` for it, which is argv.
 */
export interface AgentCall {
  verb: string;
  args: string[];
}

/** A command from a fixed template: argv words are quoted by the executor, never interpolated. */
export interface CommandSpec {
  argv: string[];
  /** The same command as an agent verb; every template sets it. Agent mode refuses a spec without one. */
  agent?: AgentCall;
  /** Written to the command's stdin, then EOF (the envelopes of a destructive verb). None: stdin is closed at once. */
  stdin?: string;
  /** Per-command timeout; the remote side is wrapped in `timeout -k` and the client signals too. */
  timeoutMs: number;
  /** Output cap per stream; past it the command is ended and `truncated` is set. Default 1 MiB. */
  maxOutputBytes?: number;
}
