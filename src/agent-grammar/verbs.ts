import { probeSpecs, lxcInitPid, pidNamespaceOf, rootKeysRead, type ProbeName } from './templates/doctor-probes.ts';
import { fuserDevices, hostMemory, queryComputeApps, queryGpus } from './templates/snapshot-commands.ts';
import { signalCommand, type SignalName, type SignalSide } from './templates/signal.ts';
import {
  containerConfig,
  containerInitPid,
  gpuReset,
  hostGpuApps,
  hostGpuByUuid,
  hostGpuReport,
  persistenceMode,
  readProcs,
  setPersistence,
} from './templates/unstick-commands.ts';
import { kernelLogRead, queryRecoveryAction, stuckProcesses } from './templates/watch-commands.ts';
import type { CommandSpec } from './command-spec.ts';
import type { ArgType } from './arg-types.ts';

/**
 * The agent's verbs, the one list of what the worker's key may run on a host: every command template the
 * worker runs, by name, with its typed arguments and where it may run. `build` calls the template itself;
 * src/agent-grammar/grammar.ts reads each verb's `run` (the argv the agent executes) off what the template
 * builds for the two sample calls, so the templates stay the one source and agent/grammar.json is their data
 * form.
 */

/** `host`: the machine the key logs into; `ct`: inside a container through `pct exec`; `self`: a container's own agent. */
export type Where = 'host' | 'ct' | 'self';

export interface VerbDef {
  args: ArgType[];
  /** The type of the arguments after `args` (at least one), or null. */
  variadic: ArgType | null;
  on: Where[];
  /**
   * Two sample calls whose every argument differs between them (and from every constant word),
   * with the same number of variadic arguments: a word of the argv that differs is an argument's.
   */
  samples: [string[], string[]];
  /** The template's spec for these (already type-checked) arguments. */
  build(args: readonly string[]): CommandSpec;
}

const T = { timeoutMs: 15_000 };
const ANY: Where[] = ['host', 'ct', 'self'];
const HOST: Where[] = ['host'];
const CONTAINER: Where[] = ['ct', 'self'];

const U1 = 'GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0';
const U2 = 'GPU-11112222-3333-4444-5555-666677778888';
const INC1 = 'inc_20261130_092000_k3x9q2';
const INC2 = 'inc_alert_0123456789abcdef0123';
const APR = 'apr_AAAAAAAAAAAAAAAAAAAAAA';

const arg = (args: readonly string[], i: number): string => {
  const a = args[i];
  if (a === undefined) throw new RangeError(`argument ${i} missing`);
  return a;
};

function noArgs(build: () => CommandSpec, on: Where[]): VerbDef {
  return { args: [], variadic: null, on, samples: [[], []], build };
}

function probe(name: ProbeName, kind: 'host' | 'container', on: Where[]): VerbDef {
  return noArgs(() => {
    const spec = probeSpecs(kind, T.timeoutMs)[name];
    if (spec === undefined) throw new Error(`no ${kind} probe ${name}`);
    return spec;
  }, on);
}

function onUuid(template: (uuid: string, o: typeof T) => CommandSpec): VerbDef {
  return { args: ['uuid'], variadic: null, on: HOST, samples: [[U1], [U2]], build: (a) => template(arg(a, 0), T) };
}

function onVmid(template: (vmid: number) => CommandSpec): VerbDef {
  return {
    args: ['vmid'],
    variadic: null,
    on: HOST,
    samples: [['129'], ['231']],
    build: (a) => template(Number(arg(a, 0))),
  };
}

/** `signal <side> <TERM|KILL> <ns inode|0> <incident> <approval> (<pid> <start> <ctpid|0>)...`. */
function buildSignal(a: readonly string[]): CommandSpec {
  const side = arg(a, 0) as SignalSide;
  const ns = arg(a, 2);
  const rest = a.slice(5).map(Number);
  const targets = [];
  for (let i = 0; i + 2 < rest.length; i += 3)
    targets.push({
      pid: rest[i] ?? 0,
      startTimeTicks: rest[i + 1] ?? 0,
      containerPid: side === 'host' ? (rest[i + 2] ?? 0) : null,
    });
  return signalCommand(side, arg(a, 1) as SignalName, ns === '0' ? null : `pid:[${ns}]`, targets, {
    ...T,
    incidentId: arg(a, 3),
    approvalId: arg(a, 4),
  });
}

export const VERBS: Record<string, VerbDef> = {
  // ---- a snapshot (src/readings/snapshot.ts), on hosts and in containers
  gpus: noArgs(() => queryGpus(T), ANY),
  apps: noArgs(() => queryComputeApps(T), ANY),
  ram: noArgs(() => hostMemory(T), ANY),
  holders: noArgs(() => fuserDevices(T), ANY),
  // ---- unstick's reads (src/agent-grammar/templates/unstick-commands.ts)
  procs: {
    args: [],
    variadic: 'pid',
    on: ANY,
    samples: [
      ['4242', '4343'],
      ['5151', '5252'],
    ],
    build: (a) => readProcs(a.map(Number), T),
  },
  'ct-init': onVmid((v) => containerInitPid(v, T)),
  gpu: onUuid(hostGpuByUuid),
  'gpu-apps': onUuid(hostGpuApps),
  'pm-read': onUuid(persistenceMode),
  'gpu-report': noArgs(() => hostGpuReport(T), HOST),
  'pct-config': onVmid((v) => containerConfig(v, T)),
  // ---- the watchdog's reads (src/agent-grammar/templates/watch-commands.ts)
  'kernel-log': {
    args: ['int'],
    variadic: null,
    on: HOST,
    samples: [['1764558090'], ['1764000000']],
    build: (a) => kernelLogRead({ ...T, sinceSec: Number(arg(a, 0)) }),
  },
  stuck: noArgs(() => stuckProcesses(T), HOST),
  recovery: noArgs(() => queryRecoveryAction(T), HOST),
  // ---- the doctor's probes (src/agent-grammar/templates/doctor-probes.ts)
  'probe-uname': probe('uname', 'host', ANY),
  'probe-nvidia': probe('nvidia', 'host', ANY),
  'probe-perl': probe('perl', 'host', ANY),
  'probe-python3': probe('python3', 'host', ANY),
  'probe-proc': probe('proc', 'host', ANY),
  'pct-list': probe('pct', 'host', HOST),
  'probe-clock': probe('clock', 'host', HOST),
  // Root's key files, fixed paths: a host's, or a role=self container's own (never through pct exec).
  'root-keys': noArgs(() => rootKeysRead(T.timeoutMs), ['host', 'self']),
  'probe-fuser': probe('fuser', 'container', CONTAINER),
  'probe-ns': probe('ns', 'container', CONTAINER),
  'probe-init': onVmid((v) => lxcInitPid(v, T.timeoutMs)),
  'probe-pidns': {
    args: ['pid'],
    variadic: null,
    on: HOST,
    samples: [['4242'], ['5151']],
    build: (a) => pidNamespaceOf(Number(arg(a, 0)), T.timeoutMs),
  },
  // ---- destructive: each carries the incident and approval ids, and the envelopes on stdin
  signal: {
    args: ['side', 'signal', 'int', 'incident', 'approval'],
    variadic: 'int',
    on: ANY,
    samples: [
      ['host', 'KILL', '4026532845', INC1, APR, '811900', '48113902', '57'],
      ['container', 'TERM', '4026531836', INC2, 'none', '6161', '7171', '0'],
    ],
    build: buildSignal,
  },
  persistence: {
    args: ['onoff', 'uuid', 'incident', 'approval'],
    variadic: null,
    on: HOST,
    samples: [
      ['0', U1, INC1, APR],
      ['1', U2, INC2, 'none'],
    ],
    build: (a) => setPersistence(arg(a, 1), arg(a, 0) === '1', { ...T, incidentId: arg(a, 2), approvalId: arg(a, 3) }),
  },
  reset: {
    args: ['uuid', 'incident', 'approval'],
    variadic: null,
    on: HOST,
    samples: [
      [U1, INC1, APR],
      [U2, INC2, 'none'],
    ],
    build: (a) => gpuReset(arg(a, 0), { ...T, incidentId: arg(a, 1), approvalId: arg(a, 2) }),
  },
};
