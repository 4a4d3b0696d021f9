import { describe, expect, it } from 'vitest';
import { formatSize, GIB, KIB, MIB, parseSize, TIB } from '../src/kernel/sizes';
import { thrown } from './helpers/thrown';

describe('parseSize reads a number and a binary unit', () => {
  const cases: [string, number][] = [
    ['0B', 0],
    ['1B', 1],
    ['1000B', 1000],
    ['4KiB', 4 * KIB],
    ['512MiB', 512 * MIB],
    ['6MiB', 6 * MIB],
    ['1.5GiB', 1.5 * GIB],
    ['0.5KiB', 512],
    ['8GiB', 8 * GIB],
    ['1.25TiB', 1.25 * TIB],
    ['64TiB', 64 * TIB],
    ['007MiB', 7 * MIB],
  ];
  it.each(cases)('%s is %d bytes', (text, bytes) => expect(parseSize(text)).toBe(bytes));

  const bad = ['', '12XB', '4GB', '4gib', '4 GiB', '-1MiB', '.5GiB', '1.GiB', 'GiB', '1e3B', ' 1MiB', '1MiB ', '0x10B', '1,5GiB'];
  it.each(bad)('refuses %j, naming the field', (text) => {
    const err = thrown(() => parseSize(text, 'resources.memory'));
    expect(err.message).toMatch(/^resources\.memory: /);
    expect(err.message).toContain('is not a size');
    expect(err.field).toBe('resources.memory');
  });

  it('refuses fractions of a byte, huge numbers and non-strings', () => {
    expect(thrown(() => parseSize('0.1B')).message).toBe('size: "0.1B" is not a whole number of bytes');
    expect(thrown(() => parseSize('1.0000001KiB')).message).toMatch(/not a whole number of bytes/);
    expect(thrown(() => parseSize('9999999999999TiB')).message).toBe('size: "9999999999999TiB" is too large');
    expect(thrown(() => parseSize(42 as unknown as string)).message).toBe('size: must be a size such as "512MiB" or "8GiB"');
  });
});

describe('formatSize', () => {
  const cases: [number, string][] = [
    [0, '0B'],
    [1000, '1000B'],
    [1024, '1KiB'],
    [1536, '1.5KiB'],
    [128 * MIB, '128MiB'],
    [1.5 * GIB, '1.5GiB'],
    [1.25 * GIB, '1.25GiB'],
    [GIB + 1, '1073741825B'],
    [TIB, '1TiB'],
    [64 * TIB, '64TiB'],
  ];
  it.each(cases)('%d is %s', (bytes, text) => expect(formatSize(bytes)).toBe(text));

  it('reads back to the same number', () => {
    for (const bytes of [0, 1, 1023, 1025, 6 * MIB, 3 * GIB + 512 * MIB, 10 * TIB + 1, Number.MAX_SAFE_INTEGER]) {
      expect(parseSize(formatSize(bytes))).toBe(bytes);
    }
  });

  it('refuses what is not a whole number of bytes', () => {
    for (const bytes of [-1, 0.5, Number.NaN, Number.POSITIVE_INFINITY]) expect(() => formatSize(bytes)).toThrow(RangeError);
  });
});
