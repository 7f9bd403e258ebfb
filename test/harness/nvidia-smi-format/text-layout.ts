/** Small fixed-width helpers shared by the writers (nvidia-smi pads with spaces, never tabs). */

export function right(value: string, width: number): string {
  return value.padStart(width, ' ');
}

export function left(value: string, width: number): string {
  return value.padEnd(width, ' ');
}

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'] as const;
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'] as const;

function two(n: number): string {
  return String(n).padStart(2, '0');
}

/** `asctime`-style stamp as nvidia-smi prints it (`Fri Jul  3 22:11:09 2026`), in UTC so output is reproducible. */
export function asctimeUtc(date: Date): string {
  const day = DAYS[date.getUTCDay()] ?? 'Sun';
  const month = MONTHS[date.getUTCMonth()] ?? 'Jan';
  const dom = String(date.getUTCDate()).padStart(2, ' ');
  const time = `${two(date.getUTCHours())}:${two(date.getUTCMinutes())}:${two(date.getUTCSeconds())}`;
  return `${day} ${month} ${dom} ${time} ${date.getUTCFullYear()}`;
}

/** `2026/07/03 22:11:09.916`, the CSV `timestamp` field, in UTC. */
export function csvTimestampUtc(date: Date): string {
  const ms = String(date.getUTCMilliseconds()).padStart(3, '0');
  return (
    `${date.getUTCFullYear()}/${two(date.getUTCMonth() + 1)}/${two(date.getUTCDate())} ` +
    `${two(date.getUTCHours())}:${two(date.getUTCMinutes())}:${two(date.getUTCSeconds())}.${ms}`
  );
}

/** Short PCI form with a 4-digit domain (`0000:0B:00.0`), as some nvidia-smi messages print it. */
export function shortBusId(busId: string): string {
  const m = /^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$/.exec(busId);
  if (m === null) return busId;
  const domain = (m[1] ?? '').slice(-4).padStart(4, '0');
  return `${domain}:${m[2] ?? ''}`.toUpperCase();
}
