import type { Inventory } from '../config/inventory.ts';
import type { ExternalAlert } from '../watchdog/alert-events.ts';
import { conditionKey } from '../watchdog/condition.ts';
import { type Alert, type AlertKind, CONDITION_KINDS } from '../watchdog/judge.ts';
import { xidWords } from '../watchdog/xid.ts';
import type { WebhookAlert } from './payload.ts';

/**
 * From an Alertmanager alert to what gpu-medic shows and acts on, pure: the inventory machine and
 * GPU its labels name, the watchdog's kind its name maps to, and the condition it shares with the
 * watchdog (src/watchdog/condition.ts). Label values are data: they choose among inventory ids and
 * are otherwise only shown, escaped; nothing from them ever reaches a machine.
 */
export interface MappingSettings {
  /** Labels naming the machine, first match wins (default DCGM exporter's `Hostname`, then `instance`). */
  machineLabels: readonly string[];
  /** The GPU's UUID label (DCGM exporter: `UUID`). */
  uuidLabel: string;
  /** The GPU's host index label (DCGM exporter: `gpu`). */
  gpuLabel: string;
  /** A label value → machine id, where the names differ (GPU_MEDIC_ALERTMANAGER_RENAME). */
  rename: Readonly<Record<string, string>>;
}

export const DEFAULT_MAPPING: MappingSettings = {
  machineLabels: ['Hostname', 'instance'],
  uuidLabel: 'UUID',
  gpuLabel: 'gpu',
  rename: {},
};

/**
 * Alert names → the watchdog's kinds (docs/alertmanager.md lists them; the rules there use these
 * names). A rule of another name can say its kind with a `gpu_medic_kind` label; any other alert is
 * `external`: shown with its own name, with the buttons when it names a machine, never merged.
 */
export const KIND_OF_ALERTNAME: Readonly<Record<string, AlertKind>> = {
  DcgmXidError: 'xid',
  DcgmGpuMemoryHeldWhileIdle: 'ghost_memory',
  DcgmRowRemapFailure: 'gpu_error',
  DcgmUncorrectableRemappedRows: 'gpu_error',
  DcgmEccDoubleBitErrors: 'gpu_error',
  DcgmRowRemapPending: 'recovery_action',
  GpuMedicGpuMemoryHeldWithNoProcess: 'ghost_memory',
  GpuMedicGpuError: 'gpu_error',
  GpuMedicHostRamHigh: 'ram_high',
};

const KINDS: ReadonlySet<string> = new Set(CONDITION_KINDS);

export interface MappedAlert {
  status: 'firing' | 'resolved';
  /** The member key: `alertmanager:<fingerprint>`. */
  key: string;
  machineId: string | null;
  /** The condition it shares with the watchdog; null when it names no machine or maps to no kind. */
  condition: string | null;
  alert: Alert;
  external: ExternalAlert;
  /** When it resolved (endsAt), for a resolved alert. */
  endsAt: number | null;
}

/** A machine as labels may name it: its inventory id or its SSH address. */
export interface NamedMachine {
  id: string;
  address?: string;
}

export function namedMachines(inv: Inventory): NamedMachine[] {
  return [
    ...inv.hosts.map((h) => ({ id: h.id, address: h.address })),
    ...inv.containers.map((c) => (c.address ? { id: c.id, address: c.address } : { id: c.id })),
  ];
}

const shown = (s: string, n: number): string => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

function findMachine(
  value: string,
  machines: readonly NamedMachine[],
  rename: Readonly<Record<string, string>>,
): NamedMachine | null {
  const candidates = [value, value.replace(/:\d{1,5}$/, '').replace(/^\[(.*)\]$/, '$1')];
  for (const v of candidates) {
    const renamed = rename[v];
    const id = renamed ?? v;
    const byId = machines.find((m) => m.id === id || m.id === id.toLowerCase());
    if (byId) return byId;
  }
  for (const v of candidates) {
    const byAddress = machines.filter((m) => m.address !== undefined && m.address === v);
    if (byAddress.length === 1) return byAddress[0] ?? null;
  }
  return null;
}

/**
 * What the Xid of an `xid` alert means and what to do next (src/watchdog/xid.ts, the watchdog's
 * own words): the Xid number as the rule's summary says it ("Xid 79 on GPU 1 …", the rule in
 * deploy/monitoring/dcgm-rules.yml, whose value is the last Xid), or where to read it.
 */
function xidSaid(summary: string, machineId: string | null): string {
  const n = /\bXid (\d{1,4})\b/i.exec(summary)?.[1];
  if (n !== undefined) return `Xid ${Number(n)}: ${xidWords(Number(n))}`;
  return `The alert does not say which Xid: look for \`NVRM: Xid\` lines in the kernel log of ${machineId ?? 'its host'} (\`journalctl -k\`).`;
}

export function mapAlert(
  a: WebhookAlert,
  machines: readonly NamedMachine[],
  s: MappingSettings,
  nowMs: number,
): MappedAlert {
  const alertname = a.labels.alertname ?? '(no alertname)';
  const labelKind = a.labels.gpu_medic_kind;
  const kind: AlertKind =
    labelKind !== undefined && KINDS.has(labelKind)
      ? (labelKind as AlertKind)
      : (KIND_OF_ALERTNAME[alertname] ?? 'external');
  let machine: NamedMachine | null = null;
  let named: { label: string; value: string } | null = null;
  for (const l of s.machineLabels) {
    const v = a.labels[l];
    if (v === undefined || v === '') continue;
    named = named ?? { label: l, value: v };
    machine = findMachine(v, machines, s.rename);
    if (machine) break;
  }
  const unmatched = machine
    ? null
    : named
      ? `its ${named.label} label (${shown(named.value, 80)}) names no machine of gpu-medic's inventory`
      : `it has none of the labels ${s.machineLabels.join(', ')} that name a machine`;
  const uuidRaw = a.labels[s.uuidLabel];
  const gpuUuid = uuidRaw !== undefined && /^GPU-[0-9a-fA-F-]{8,64}$/.test(uuidRaw) ? uuidRaw : null;
  const gpuRaw = a.labels[s.gpuLabel];
  const gpu = gpuRaw !== undefined && /^\d{1,2}$/.test(gpuRaw) ? Number(gpuRaw) : null;
  const startsAt = Date.parse(a.startsAt);
  const since = Number.isFinite(startsAt) && startsAt > 0 ? startsAt : nowMs;
  const endsAt = a.status === 'resolved' && Number.isFinite(Date.parse(a.endsAt)) ? Date.parse(a.endsAt) : null;
  const summary = a.annotations.summary ?? a.annotations.description ?? a.annotations.message ?? '';
  const said = shown(summary === '' ? `Alertmanager reports ${alertname}.` : summary, 1000);
  const machineId = machine?.id ?? null;
  const sentence = kind === 'xid' ? `${said} ${xidSaid(summary, machineId)}` : said;
  const key = `alertmanager:${a.fingerprint}`;
  const labelsKept: Record<string, string> = {};
  for (const [k, v] of Object.entries(a.labels).slice(0, 32)) labelsKept[k] = shown(v, 256);
  const alert: Alert = {
    key,
    kind,
    machineId: machineId ?? '',
    gpu,
    ...(gpuUuid ? { gpuUuid } : {}),
    since,
    raisedAt: since,
    sentence,
    lastSeenAt: nowMs,
  };
  return {
    status: a.status,
    key,
    machineId,
    condition: machineId !== null && kind !== 'external' ? conditionKey({ machineId, kind, gpu, gpuUuid }) : null,
    alert,
    external: {
      alertname: shown(alertname, 200),
      fingerprint: a.fingerprint,
      generatorURL: /^https?:\/\//.test(a.generatorURL) ? a.generatorURL : null,
      labels: labelsKept,
      unmatched,
    },
    endsAt,
  };
}
