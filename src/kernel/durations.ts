// Durations as the interface spec uses them: strings such as `30m`, `6h` or `1h30m` on the way
// in, and the long form Go's time.Duration.String() prints (`30m0s`, `6h0m0s`) on the way out.
//
// Accepted input (a strict subset of Go's time.ParseDuration grammar, plus days):
//   one or more `<number><unit>` terms with nothing between them, where
//   <number> is `123`, `1.5` or `.5` (no sign, no exponent) and
//   <unit> is one of `ms`, `s`, `m`, `h`, `d` (lower case; `d` is exactly 24h).
// Like Go, terms may repeat and come in any order (`1h30m`, `90s`, `1h0m0s`, `1.5h`, `7d`). Anything
// else is refused: empty text, signs (`-5m`, `+5m`), spaces (`1h 30m`, ` 5m`), bare numbers (`5`,
// even `0`, which Go accepts), unknown or capitalised units (`1H`, `1hour`, `1 hour`, `5mo`, `1w`),
// and `ns`/`us`/`µs`, because values are kept in whole milliseconds; a value finer than a
// millisecond (`0.5ms`, `1.0001s`) is refused too. Zero (`0s`) parses; callers decide whether it
// is meaningful.
import parseDurationText from 'parse-duration';
import { ValidationError } from './errors';
import { show } from './show';

export const SECOND_MS = 1000;
export const MINUTE_MS = 60 * SECOND_MS;
export const HOUR_MS = 60 * MINUTE_MS;
export const DAY_MS = 24 * HOUR_MS;

/** Longest text accepted; far beyond any sensible duration, it only bounds the work done. */
const MAX_TEXT_LENGTH = 64;

const TERM = String.raw`(?:\d+(?:\.\d+)?|\.\d+)(?:ms|s|m|h|d)`;
const SHAPE = new RegExp(`^(?:${TERM})+$`);
const TERMS = /(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h|d)/g;

const HINT = 'use forms like 30m, 6h, 1h30m, 90s, 500ms or 7d';

/**
 * Parses a duration into milliseconds, refusing anything outside the shape described at the top
 * of this file with a ValidationError naming `field`.
 */
export function parseDuration(text: string, field: string): number {
  if (typeof text !== 'string') {
    throw new ValidationError(`${field}: must be a duration string (${HINT})`, field);
  }
  if (text.length === 0) {
    throw new ValidationError(`${field}: must not be empty (${HINT})`, field);
  }
  if (text.length > MAX_TEXT_LENGTH || !SHAPE.test(text)) {
    throw new ValidationError(`${field}: ${show(text)} is not a valid duration (${HINT})`, field);
  }
  let total = 0;
  for (const [, num, unit] of text.matchAll(TERMS)) {
    // parse-duration does the unit arithmetic; the shape check above guarantees it sees exactly
    // one clean `<number><unit>` term, where its `m` is minutes and `ms` milliseconds.
    const value = parseDurationText(`${num}${unit}`, 'ms');
    if (value === null || !Number.isFinite(value)) {
      throw new ValidationError(`${field}: ${show(text)} is not a valid duration (${HINT})`, field);
    }
    total += value;
  }
  const ms = Math.round(total);
  // Floating point: 1.001s comes out as 1000.9999999999999; a real sub-millisecond part does not.
  if (Math.abs(total - ms) > Math.max(1e-6, total * 1e-12)) {
    throw new ValidationError(`${field}: ${show(text)} is finer than a millisecond`, field);
  }
  if (!Number.isSafeInteger(ms)) {
    throw new ValidationError(`${field}: ${show(text)} is too long`, field);
  }
  return ms;
}

/**
 * Refuses `ms` above `maxMs` with a ValidationError such as `hard: "25h" exceeds the 24h maximum`.
 * `text` is the duration as the client wrote it (defaults to the long form of `ms`); `maxText`
 * how to print the maximum (defaults to the compact form of `maxMs`, e.g. `24h`; pass `30d` for
 * limits stated in days).
 */
export function checkMax(ms: number, maxMs: number, field: string, opts: { text?: string; maxText?: string } = {}): number {
  if (ms > maxMs) {
    const shown = opts.text !== undefined ? show(opts.text) : formatDuration(ms);
    const max = opts.maxText ?? formatCompactDuration(maxMs);
    throw new ValidationError(`${field}: ${shown} exceeds the ${max} maximum`, field);
  }
  return ms;
}

/** parseDuration followed by checkMax: the usual handling of a client-supplied limit. */
export function parseDurationMax(text: string, field: string, maxMs: number, maxText?: string): number {
  return checkMax(parseDuration(text, field), maxMs, field, { text, maxText });
}

/**
 * Exactly what Go's time.Duration.String() prints for `ms` milliseconds: `30m0s`, `6h0m0s`,
 * `24h0m0s`, `168h0m0s` (no days), `1h30m0s`, `1m30s`, `45s`, `1.5s`, `500ms`, `0s`, `-5m0s`.
 * Fractions of a millisecond are kept to the nanosecond (`1.5ms`, `250µs`), as Go would.
 */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) throw new RangeError(`formatDuration: ${ms} is not a finite number`);
  const ns = Number.isInteger(ms) ? BigInt(ms) * 1_000_000n : BigInt(Math.round(ms * 1e6));
  return formatGoDuration(ns);
}

/**
 * Go's time.Duration.String() for a count of nanoseconds (the algorithm of Go's
 * `Duration.format`, without Go's int64 bound).
 */
export function formatGoDuration(nanoseconds: bigint): string {
  const neg = nanoseconds < 0n;
  let u = neg ? -nanoseconds : nanoseconds;
  let out: string;
  if (u < 1_000_000_000n) {
    // Under a second: use a smaller unit, like 1.2ms.
    if (u === 0n) return '0s';
    let prec: number;
    let unit: string;
    if (u < 1_000n) {
      prec = 0;
      unit = 'ns';
    } else if (u < 1_000_000n) {
      prec = 3;
      unit = 'µs'; // U+00B5, as Go prints it
    } else {
      prec = 6;
      unit = 'ms';
    }
    const [frac, whole] = fmtFrac(u, prec);
    out = `${whole}${frac}${unit}`;
  } else {
    const [frac, seconds] = fmtFrac(u, 9);
    u = seconds;
    out = `${u % 60n}${frac}s`;
    u /= 60n;
    if (u > 0n) {
      out = `${u % 60n}m${out}`;
      u /= 60n;
      // Go stops at hours because days can be different lengths.
      if (u > 0n) out = `${u}h${out}`;
    }
  }
  return neg ? `-${out}` : out;
}

/**
 * Go's fmtFrac: the fraction of v/10^prec as `.12345` without trailing zeros (empty when the
 * fraction is 0), and v/10^prec.
 */
function fmtFrac(v: bigint, prec: number): [string, bigint] {
  let digits = '';
  let print = false;
  for (let i = 0; i < prec; i++) {
    const digit = v % 10n;
    print = print || digit !== 0n;
    if (print) digits = `${digit}${digits}`;
    v /= 10n;
  }
  return [print ? `.${digits}` : '', v];
}

/**
 * The long form with zero minutes and seconds dropped, for messages: `24h`, `1h30m`, `90m` is
 * `1h30m`, `45s`, `500ms`. Parses back with parseDuration.
 */
export function formatCompactDuration(ms: number): string {
  const long = formatDuration(ms);
  if (long === '0s') return long;
  return long.replace(/([hm])0s$/, '$1').replace(/h0m$/, 'h');
}
