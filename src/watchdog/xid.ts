/**
 * NVIDIA Xid lines from a host's kernel log (`journalctl -k` or `dmesg`), and what each means for
 * the next step, so an alert can say what to do. Pure. Lines look like
 *   `NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus`              (NVIDIA/NVSentinel #155)
 *   `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.`
 * and newer drivers also print, with no Xid, `NVRM: The NVIDIA GPU 0000:b3:00.0 … has fallen off
 * the bus and is not responding to commands.` (the same #155), which is read as Xid 79.
 * The rest of a line is machine text: it is kept as data (`detail`), never interpreted.
 */

export interface XidEvent {
  xid: number;
  /** PCI address as the line gives it, lower case (e.g. `0000:44:00`). */
  pci: string;
  /** What followed the number on the line (machine text). */
  detail: string;
  /** The whole line, for the record. */
  line: string;
}

const XID = /NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\): (\d{1,4}),\s*(.*)$/;
const FELL_OFF = /NVRM: The NVIDIA GPU ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)/;
const FELL_OFF_TAIL = /fallen off the bus and is not responding/;

/** Every Xid in a piece of kernel log, in order; a line that is not an Xid is skipped. */
export function parseXids(log: string): XidEvent[] {
  const out: XidEvent[] = [];
  const lines = log.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? '';
    const m = XID.exec(line);
    if (m) {
      out.push({ xid: Number(m[2]), pci: (m[1] ?? '').toLowerCase(), detail: (m[3] ?? '').trim(), line: line.trim() });
      continue;
    }
    const f = FELL_OFF.exec(line);
    // The no-Xid form spans up to three lines.
    if (f && lines.slice(i, i + 3).some((l) => FELL_OFF_TAIL.test(l))) {
      out.push({
        xid: 79,
        pci: (f[1] ?? '').toLowerCase(),
        detail: 'GPU has fallen off the bus (no Xid number in the log)',
        line: line.trim(),
      });
    }
  }
  return out;
}

export interface XidMeaning {
  /** NVIDIA's name for it. */
  name: string;
  /** What to do next, in plain words. */
  next: string;
  /** A GPU reset (after the holders are gone) is the fix NVIDIA recommends. */
  resetHelps: boolean;
}

/** The Xids an on-call person meets on compute GPUs (NVIDIA's Xid catalogue), by number. */
const MEANINGS: Readonly<Record<number, XidMeaning>> = {
  13: {
    name: 'Graphics engine exception',
    next: 'usually the application (bad kernel, out-of-range access): check its log; restart it.',
    resetHelps: false,
  },
  31: {
    name: 'GPU memory page fault',
    next: 'usually the application (illegal address): check its log; restart it.',
    resetHelps: false,
  },
  43: {
    name: 'GPU stopped processing',
    next: 'the application faulted and was stopped; restart it.',
    resetHelps: false,
  },
  45: {
    name: 'Preemptive cleanup, due to previous errors',
    next: 'the driver ended the processes after an earlier error: read the Xid before this one.',
    resetHelps: false,
  },
  48: {
    name: 'Double-bit ECC error',
    next: 'uncorrectable memory error: stop the work on this GPU, reset it, and check its ECC counters; repeats mean hardware.',
    resetHelps: true,
  },
  63: {
    name: 'ECC page retirement or row remapping recorded',
    next: 'a reset (or reboot) applies the remapping; schedule it.',
    resetHelps: true,
  },
  64: {
    name: 'ECC page retirement or row remapping failed',
    next: 'the GPU could not retire bad memory: reset it; if it repeats, the board needs service.',
    resetHelps: true,
  },
  74: {
    name: 'NVLink error',
    next: 'reset the GPUs on that NVLink; if it repeats, check the links and the board.',
    resetHelps: true,
  },
  79: {
    name: 'GPU has fallen off the bus',
    next: 'a reset will not help: reboot the host, then check power, cooling and seating of the GPU.',
    resetHelps: false,
  },
  92: {
    name: 'High single-bit ECC error rate',
    next: 'correctable but frequent: watch it and schedule service of the GPU.',
    resetHelps: false,
  },
  94: {
    name: 'Contained ECC error',
    next: 'only the affected application was stopped: restart it; no reset needed.',
    resetHelps: false,
  },
  95: {
    name: 'Uncontained ECC error',
    next: 'every process on the GPU is affected: reset the GPU (after its holders are gone).',
    resetHelps: true,
  },
  119: {
    name: 'GSP RPC timeout',
    next: 'the GPU firmware stopped answering: reset the GPU, or reboot the host if the reset fails.',
    resetHelps: true,
  },
  120: {
    name: 'GSP error',
    next: 'the GPU firmware reported an error: reset the GPU, or reboot the host if the reset fails.',
    resetHelps: true,
  },
};

/** The meaning of an Xid, or null for one not in the table (said as "Xid N", no guess). */
export function xidMeaning(xid: number): XidMeaning | null {
  return MEANINGS[xid] ?? null;
}

/**
 * What an Xid means and what to do next, in the words every Xid alert uses (the watchdog's from
 * the kernel log, Alertmanager's from DCGM): NVIDIA's name and the next step, or where to look
 * for one not in the table.
 */
export function xidWords(xid: number): string {
  const m = xidMeaning(xid);
  return m ? `${m.name}; ${m.next}` : "not in gpu-medic's table; look it up in NVIDIA's Xid catalogue.";
}

/**
 * `nvidia-smi --query-gpu=gpu_recovery_action` values (newer drivers) and what they ask for. An
 * unknown value is shown as it is, with no advice.
 */
export function recoveryActionAdvice(value: string): string | null {
  switch (value.trim()) {
    case 'None':
      return null;
    case 'GPU Reset':
      return 'the driver asks for a GPU reset (after its holders are gone).';
    case 'Node Reboot':
      return 'the driver asks for a reboot of the host: a GPU reset will not do.';
    case 'Drain P2P':
      return 'the driver asks to stop peer-to-peer (NVLink) traffic to this GPU, then reset it.';
    case 'Drain and Reset':
      return 'the driver asks to move the work off this GPU, then reset it.';
    default:
      return null;
  }
}
