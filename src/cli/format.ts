// Small text formats of the `berth` command's readable output.

/** Prints `value` as indented JSON: what every `--json` prints. */
export const json = (value: unknown): void => console.log(JSON.stringify(value, null, 2));

/** Columns padded to their widest cell, two spaces apart; the last column is not padded. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** An age such as `45s`, `12m`, `3h`, `2d`. */
export function age(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/** How long ago a time of the API was, as `age` writes it; `-` for none. */
export const since = (time: string | null | undefined): string => (time ? age(Date.now() - Date.parse(time)) : '-');

/** A byte count in binary units: `512 B`, `1.5 KiB`, `73.4 MiB`, `2.00 GiB`. */
export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}
