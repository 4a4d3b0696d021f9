// Sizes as templates write them (`resources.memory`, `resources.disk`): a whole or decimal number
// and a binary unit, `B`, `KiB`, `MiB`, `GiB` or `TiB` — `512MiB`, `1.5GiB`, `8GiB`. The runtime
// turns them into bytes for a container's limits (parseSize) and back into text for its messages,
// e.g. `out of memory (limit 128MiB)` (formatSize).
import { ValidationError } from './errors';
import { show } from './show';

export const KIB = 1024;
export const MIB = 1024 * KIB;
export const GIB = 1024 * MIB;
export const TIB = 1024 * GIB;

const UNITS = [
  ['TiB', TIB],
  ['GiB', GIB],
  ['MiB', MIB],
  ['KiB', KIB],
  ['B', 1],
] as const;

const SHAPE = /^(\d+)(?:\.(\d+))?(B|KiB|MiB|GiB|TiB)$/;
const MAX_TEXT = 40;

/**
 * The number of bytes `text` names, refusing anything but `<number><unit>` (and fractions of a
 * byte) with a ValidationError naming `field`:
 * `resources.memory: "12XB" is not a size such as "512MiB" or "8GiB"`.
 */
export function parseSize(text: string, field = 'size'): number {
  const m = typeof text === 'string' && text.length <= MAX_TEXT ? SHAPE.exec(text) : null;
  if (!m) {
    const shown = typeof text === 'string' ? `${show(text)} is not` : 'must be';
    throw new ValidationError(`${field}: ${shown} a size such as "512MiB" or "8GiB"`, field);
  }
  const [, whole, fraction = '', unitName] = m;
  const unit = BigInt(UNITS.find(([name]) => name === unitName)![1]);
  // Exact arithmetic: 1.5GiB is 1610612736 bytes, 0.1B no whole number of bytes.
  const scaled = BigInt(whole! + fraction) * unit;
  const divisor = 10n ** BigInt(fraction.length);
  if (scaled % divisor !== 0n) throw new ValidationError(`${field}: ${show(text)} is not a whole number of bytes`, field);
  const bytes = scaled / divisor;
  if (bytes > BigInt(Number.MAX_SAFE_INTEGER)) throw new ValidationError(`${field}: ${show(text)} is too large`, field);
  return Number(bytes);
}

/**
 * `bytes` in the largest unit that shows it exactly with at most two decimals (`128MiB`,
 * `1.5GiB`, `1000B`); parseSize reads it back to the same number.
 */
export function formatSize(bytes: number): string {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new RangeError(`formatSize: ${bytes} is not a whole number of bytes`);
  for (const [name, unit] of UNITS) {
    if (bytes < unit) continue;
    const hundredths = BigInt(bytes) * 100n;
    if (hundredths % BigInt(unit) === 0n) return `${Number(hundredths / BigInt(unit)) / 100}${name}`;
  }
  return `${bytes}B`;
}
