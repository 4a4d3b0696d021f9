import { describe, expect, it } from 'vitest';
import {
  checkMax,
  DAY_MS,
  formatCompactDuration,
  formatDuration,
  formatGoDuration,
  HOUR_MS,
  MINUTE_MS,
  parseDuration,
  parseDurationMax,
} from '../src/kernel/durations';
import { ValidationError } from '../src/kernel/errors';
import { thrown } from './helpers/thrown';

describe('parseDuration accepts Go-style durations plus days', () => {
  const cases: [string, number][] = [
    ['30m', 30 * MINUTE_MS],
    ['6h', 6 * HOUR_MS],
    ['1h30m', 90 * MINUTE_MS],
    ['1h0m0s', HOUR_MS],
    ['90s', 90_000],
    ['7d', 7 * DAY_MS],
    ['30d', 30 * DAY_MS],
    ['1.5h', 90 * MINUTE_MS],
    ['500ms', 500],
    ['0s', 0],
    ['0ms', 0],
    ['24h', DAY_MS],
    ['24h0m0s', DAY_MS],
    ['1d12h', 36 * HOUR_MS],
    ['1m30s', 90_000],
    ['1.5s', 1500],
    ['.5h', 30 * MINUTE_MS],
    ['0.25m', 15_000],
    ['1.001s', 1001],
    ['2.675s', 2675],
    ['1h1h', 2 * HOUR_MS], // Go accepts repeated units
    ['30s1m', 90_000], // and any order
    ['1m500ms', 60_500],
    ['01h', HOUR_MS],
    ['168h0m0s', 7 * DAY_MS],
    ['100000h', 100_000 * HOUR_MS],
  ];
  it.each(cases)('%s -> %d ms', (text, ms) => {
    expect(parseDuration(text, 'idle')).toBe(ms);
  });
});

describe('parseDuration refuses everything else', () => {
  const cases: string[] = [
    '',
    ' ',
    '5',
    '0',
    '1.5',
    '-5m',
    '+5m',
    '-0s',
    '1 hour',
    '1hour',
    '1 h',
    '1h 30m',
    ' 30m',
    '30m ',
    '30m\n',
    '\t6h',
    '1H',
    '1M',
    '1D',
    '5mo',
    '1w',
    '1y',
    '1us',
    '1µs',
    '1ns',
    '1.h',
    '1..5h',
    '1.5.5h',
    'h',
    'ms',
    '1e3ms',
    '1,5h',
    '1_000ms',
    'abc',
    '30m!',
    '0x10s',
    'Infinityh',
    'NaNs',
    '１h', // full-width digit
    '1h30',
    '0.5ms', // finer than a millisecond
    '1.0001s',
    '99999999999999999999d', // too long for a safe integer
    `${'1'.repeat(70)}s`, // absurdly long text
  ];
  it.each(cases)('%j', (text) => {
    const err = thrown(() => parseDuration(text, 'hard'));
    expect(err.field).toBe('hard');
    expect(err.message.startsWith('hard: ')).toBe(true);
    expect(err.code).toBe('invalid');
  });

  it('refuses non-strings at run time', () => {
    expect(() => parseDuration(5 as unknown as string, 'idle')).toThrow(ValidationError);
    expect(() => parseDuration(undefined as unknown as string, 'idle')).toThrow(/idle: must be a duration/);
  });

  it('names the field and the text in the message', () => {
    expect(thrown(() => parseDuration('1 hour', 'quota.idle')).message).toBe(
      'quota.idle: "1 hour" is not a valid duration (use forms like 30m, 6h, 1h30m, 90s, 500ms or 7d)',
    );
    expect(thrown(() => parseDuration('', 'idle')).message).toMatch(/^idle: must not be empty/);
  });
});

describe('formatDuration prints what Go time.Duration.String() prints', () => {
  const cases: [number, string][] = [
    [0, '0s'],
    [1, '1ms'],
    [500, '500ms'],
    [999, '999ms'],
    [1000, '1s'],
    [1500, '1.5s'],
    [1001, '1.001s'],
    [45_000, '45s'],
    [59_999, '59.999s'],
    [60_000, '1m0s'],
    [90_000, '1m30s'],
    [30 * MINUTE_MS, '30m0s'],
    [59 * MINUTE_MS + 59_999, '59m59.999s'],
    [HOUR_MS, '1h0m0s'],
    [90 * MINUTE_MS, '1h30m0s'],
    [HOUR_MS + 1, '1h0m0.001s'],
    [HOUR_MS + 1000, '1h0m1s'],
    [6 * HOUR_MS, '6h0m0s'],
    [24 * HOUR_MS, '24h0m0s'],
    [7 * DAY_MS, '168h0m0s'],
    [30 * DAY_MS, '720h0m0s'],
    [5 * HOUR_MS + 6 * MINUTE_MS + 7001, '5h6m7.001s'],
    [-5 * MINUTE_MS, '-5m0s'],
    [-1, '-1ms'],
    [-1500, '-1.5s'],
    [1.5, '1.5ms'],
    [0.25, '250µs'],
    [0.000001, '1ns'],
  ];
  it.each(cases)('%d ms -> %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  // Go's own table (src/time/time_test.go, durationTests), in nanoseconds.
  const goCases: [bigint, string][] = [
    [0n, '0s'],
    [1n, '1ns'],
    [1100n, '1.1µs'],
    [2_200_000n, '2.2ms'],
    [3_300_000_000n, '3.3s'],
    [4n * 60_000_000_000n + 5_000_000_000n, '4m5s'],
    [4n * 60_000_000_000n + 5_001_000_000n, '4m5.001s'],
    [5n * 3_600_000_000_000n + 6n * 60_000_000_000n + 7_001_000_000n, '5h6m7.001s'],
    [8n * 60_000_000_000n + 1n, '8m0.000000001s'],
    [(1n << 63n) - 1n, '2562047h47m16.854775807s'],
    [-(1n << 63n), '-2562047h47m16.854775808s'],
  ];
  it.each(goCases)('%d ns -> %s (Go durationTests)', (ns, text) => {
    expect(formatGoDuration(ns)).toBe(text);
  });

  it('refuses non-finite numbers', () => {
    expect(() => formatDuration(Number.NaN)).toThrow(RangeError);
    expect(() => formatDuration(Number.POSITIVE_INFINITY)).toThrow(RangeError);
  });

  it('round-trips through parseDuration', () => {
    for (const ms of [0, 1, 500, 1500, 90_000, HOUR_MS, 90 * MINUTE_MS, DAY_MS, 7 * DAY_MS + 1]) {
      expect(parseDuration(formatDuration(ms), 'x')).toBe(ms);
    }
  });
});

describe('formatCompactDuration', () => {
  const cases: [number, string][] = [
    [0, '0s'],
    [DAY_MS, '24h'],
    [30 * DAY_MS, '720h'],
    [90 * MINUTE_MS, '1h30m'],
    [30 * MINUTE_MS, '30m'],
    [HOUR_MS + 5000, '1h0m5s'],
    [10_000, '10s'],
    [90_000, '1m30s'],
    [500, '500ms'],
  ];
  it.each(cases)('%d ms -> %s', (ms, text) => {
    expect(formatCompactDuration(ms)).toBe(text);
    expect(parseDuration(text, 'x')).toBe(ms);
  });
});

describe('checkMax and parseDurationMax', () => {
  it('passes values up to the maximum through', () => {
    expect(checkMax(DAY_MS, DAY_MS, 'hard')).toBe(DAY_MS);
    expect(checkMax(0, DAY_MS, 'hard')).toBe(0);
    expect(parseDurationMax('24h', 'hard', DAY_MS)).toBe(DAY_MS);
    expect(parseDurationMax('1d', 'hard', DAY_MS)).toBe(DAY_MS);
  });

  it('names the field, the text and the maximum', () => {
    const err = thrown(() => parseDurationMax('25h', 'hard', DAY_MS));
    expect(err.message).toBe('hard: "25h" exceeds the 24h maximum');
    expect(err.field).toBe('hard');
    expect(thrown(() => checkMax(DAY_MS + 1, DAY_MS, 'hard')).message).toBe('hard: 24h0m0.001s exceeds the 24h maximum');
    expect(thrown(() => parseDurationMax('31d', 'retention', 30 * DAY_MS, '30d')).message).toBe('retention: "31d" exceeds the 30d maximum');
  });

  it('still refuses malformed text', () => {
    expect(() => parseDurationMax('1 day', 'hard', DAY_MS)).toThrow(/not a valid duration/);
  });
});
