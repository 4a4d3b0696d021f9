// Parsers of repeatable and typed options shared by the `berth` commands; a bad value is a usage
// error (exit 2), raised through commander's InvalidArgumentError.
import { InvalidArgumentError } from 'commander';
import { parseDuration } from '../kernel/durations';

/** A commander collector for repeatable `key=value` options into an object; a key given twice is a usage error. */
export function pairs(what: string) {
  return (value: string, previous: Record<string, string> = {}): Record<string, string> => {
    const at = value.indexOf('=');
    if (at <= 0) throw new InvalidArgumentError(`expected ${what}, got "${value}"`);
    const key = value.slice(0, at);
    if (Object.hasOwn(previous, key)) throw new InvalidArgumentError(`"${key}" is given twice`);
    return { ...previous, [key]: value.slice(at + 1) };
  };
}

/** A commander collector for a repeatable option into an array. */
export const list = (value: string, previous: string[] = []) => [...previous, value];

/** A commander collector for a repeatable `key=value` option kept as strings (the server checks them). */
export const labelList = (value: string, previous: string[] = []) => {
  if (!value.includes('=')) throw new InvalidArgumentError(`expected key=value, got "${value}"`);
  return [...previous, value];
};

/** A duration option in the server's grammar (`90s`, `10m`, `1h30m`); a bad one is a usage error. */
export function durationOption(value: string): string {
  try {
    parseDuration(value, 'duration');
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message.replace(/^duration: /, '') : String(error));
  }
  return value;
}

/** A count option: a whole number from 0 up; anything else is a usage error. */
export function countOption(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('must be a whole number (0, 1, 2, …)');
  return Number(value);
}
