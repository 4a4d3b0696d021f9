// The environment state machine's table (src/kernel/environment-states.ts): every pair of states
// allowed or refused as docs/environments.md says, refused pairs failing to compile and throwing
// before transition() touches the database, and the named source lists and the idle push.
import { describe, expect, it } from 'vitest';
import type { Deps } from '../src/app/context';
import {
  allowed,
  assertTransitions,
  ENDED_STATES,
  isEnded,
  isLive,
  isStoppable,
  LIVE_STATES,
  ON_NODE,
  pushedIdleUntil,
  RUNNING,
  STATES,
  STOPPABLE,
} from '../src/kernel/environment-states';
import { transition } from '../src/modules/environments/transitions';

// Written out apart from the table, as docs/environments.md lists them.
const EXPECTED = new Set([
  'pending→starting',
  'pending→stopping',
  'starting→ready',
  'starting→stopping',
  'starting→failed',
  'ready→stopping',
  'ready→failed',
  'stopping→stopped',
  'stopping→failed',
]);

describe('the environment state machine', () => {
  const pairs = STATES.flatMap((from) => STATES.map((to) => [from, to] as const));

  it.each(pairs)('%s → %s is allowed only when listed', (from, to) => {
    const listed = EXPECTED.has(`${from}→${to}`);
    expect(allowed(from, to)).toBe(listed);
    if (listed) expect(() => assertTransitions([from], to)).not.toThrow();
    else expect(() => assertTransitions([from], to)).toThrow(`no transition ${from} → ${to}`);
  });

  it('splits the states into live and ended, and no transition leaves an ended one', () => {
    expect([...LIVE_STATES, ...ENDED_STATES].sort()).toEqual([...STATES].sort());
    for (const state of STATES) expect(isLive(state)).toBe(!isEnded(state));
    for (const ended of ENDED_STATES) expect(STATES.some((to) => allowed(ended, to))).toBe(false);
    // Every live state has a way out to an ended one.
    for (const live of LIVE_STATES) expect(STATES.some((to) => allowed(live, to))).toBe(true);
  });

  it('refuses a list with one disallowed state, an empty list and unknown states', () => {
    expect(() => assertTransitions(['starting', 'stopped'], 'failed')).toThrow('no transition stopped → failed');
    expect(() => assertTransitions([], 'stopping')).toThrow('names no state it leaves');
    expect(allowed('paused', 'ready')).toBe(false);
    expect(allowed('ready', 'paused')).toBe(false);
    expect(allowed('toString', 'ready')).toBe(false);
  });

  it('names the source lists the call sites use, each allowed by the table', () => {
    for (const from of STOPPABLE) expect(allowed(from, 'stopping')).toBe(true);
    for (const from of RUNNING) expect(allowed(from, 'stopping') && allowed(from, 'failed')).toBe(true);
    for (const from of ON_NODE) expect(allowed(from, 'failed')).toBe(true);
    expect(STATES.filter(isStoppable)).toEqual(['pending', 'starting', 'ready']);
  });

  it('transition() refuses a pair the table lacks before it reads the database', async () => {
    // No database at all: the check comes first.
    const deps = {} as Deps;
    // @ts-expect-error stopped → ready is not in the table: it does not compile.
    await expect(transition(deps, 'env_x', ['stopped'], 'ready')).rejects.toThrow('no transition stopped → ready');
    // @ts-expect-error pending → failed neither (a lease fails only once a node has it).
    await expect(transition(deps, 'env_x', ['pending', 'starting'], 'failed')).rejects.toThrow('no transition pending → failed');
    // A target computed at run time needs every one of its states allowed.
    const endsAs = (failed: boolean) => (failed ? 'failed' : 'stopped');
    // @ts-expect-error ready → stopped is not allowed, though ready → failed is.
    await expect(transition(deps, 'env_x', ['ready'], endsAs(false))).rejects.toThrow('no transition ready → stopped');
  });

  it('activity pushes the idle time-out to now + idle, never back', () => {
    const now = new Date('2026-01-01T00:00:00Z');
    const idleMs = 60_000;
    expect(pushedIdleUntil({ idleUntil: new Date(now.getTime() + 1000), idleMs }, now)).toEqual(new Date(now.getTime() + idleMs));
    const later = new Date(now.getTime() + 5 * idleMs);
    expect(pushedIdleUntil({ idleUntil: later, idleMs }, now)).toEqual(later);
  });
});
