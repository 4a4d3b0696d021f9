// How values are shown: sizes in binary units, times in the reader's locale with UTC on hover.

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return '–';
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${UNITS[unit]}`;
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

export function when(iso: string | null | undefined): string {
  if (!iso) return '–';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : dateTime.format(date);
}

export function millis(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '–';
  return ms < 10_000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** `{team: "infra"}` as `team=infra`, the form filters and forms take. */
export function labelPairs(labels: Record<string, unknown> | null | undefined): string[] {
  return Object.entries(labels ?? {}).map(([k, v]) => `${k}=${String(v)}`);
}

/** Items separated by commas or new lines, trimmed, empty ones left out. */
export function splitList(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((p) => p.trim())
    .filter(Boolean);
}

/** Parses `key=value` pairs separated by commas or new lines; a pair without `=` is reported. */
export function parsePairs(text: string): { pairs: string[]; bad?: string } {
  const pairs = splitList(text);
  const bad = pairs.find((p) => p.indexOf('=') <= 0);
  return bad ? { pairs, bad } : { pairs };
}

export function pairsToObject(pairs: string[]): Record<string, string> {
  return Object.fromEntries(pairs.map((p) => [p.slice(0, p.indexOf('=')), p.slice(p.indexOf('=') + 1)]));
}

/** A template's warm containers: `1 of 2 ready` (ready for a lease of those it asks for), `–` when it asks for none. */
export function warmState(t: { warm: number; warmReady: number }): string {
  return t.warm ? `${t.warmReady} of ${t.warm} ready` : '–';
}

/** A template's limits in one line, in `berth template ls`'s order (CPUs, memory, processes, disk); `–` when it sets none. */
export function limits(r: { cpus?: number | null; memory?: string | null; pids?: number | null; disk?: string | null }): string {
  const parts = [
    r.cpus !== null && r.cpus !== undefined ? `${r.cpus} ${r.cpus === 1 ? 'CPU' : 'CPUs'}` : '',
    r.memory ? `${r.memory} memory` : '',
    r.pids !== null && r.pids !== undefined ? `${r.pids} processes` : '',
    r.disk ? `${r.disk} disk` : '',
  ];
  return parts.filter(Boolean).join(', ') || '–';
}
