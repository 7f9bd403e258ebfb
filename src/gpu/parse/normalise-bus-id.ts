const BUS_ID = /^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$/;

/**
 * PCI bus id in nvidia-smi's 8-hex-digit domain form, upper case (`00000000:0B:00.0`), from any
 * spelling drivers print (`0000:0b:00.0`, `0B:00.0`, `GPU0000:07:00.0`). Null when it isn't one.
 */
export function normaliseBusId(text: string): string | null {
  const m = BUS_ID.exec(text.trim().replace(/^GPU\s*/i, ''));
  if (m === null) return null;
  const [, domain = '0', bus = '', device = '', fn = ''] = m;
  return `${domain.padStart(8, '0')}:${bus}:${device}.${fn}`.toUpperCase();
}

/** First bus id found anywhere in a message, normalised. */
export function findBusId(text: string): string | null {
  const m = /(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\b/.exec(text);
  return m === null ? null : normaliseBusId(m[0]);
}
