// When relay traffic asks the database about its environment's idle time-out
// (src/modules/environments/relay.ts activityRecorder): at most once a step, and, given the idle
// time-out just read with the environment, not before traffic would move it by more than a step.
// The database is a stand-in that counts the reads and writes; the rules are the recorder's.
import { expect, it } from 'vitest';
import type { Deps } from '../src/app/context';
import { activityRecorder } from '../src/modules/environments';
import { relayActivityStep } from '../src/modules/environments/relay';

const IDLE_MS = 30 * 60_000;
const STEP = relayActivityStep(IDLE_MS);

/** Deps whose clock the test moves and whose environment row is `row`, counting the recorder's statements. */
function world(row: { state: string; idleUntil: Date; idleMs: number }) {
  let now = Date.parse('2026-11-30T12:00:00Z');
  const counts = { reads: 0, writes: 0 };
  const environment = {
    async findUnique() {
      counts.reads++;
      return row;
    },
    async updateMany({ data }: { data: { idleUntil: Date } }) {
      counts.writes++;
      row.idleUntil = data.idleUntil;
      return { count: 1 };
    },
  };
  const deps = { clock: { now: () => new Date(now) }, prisma: { environment } } as unknown as Deps;
  const settled = () => new Promise<void>((resolve) => setImmediate(resolve));
  return { deps, counts, settled, advance: (ms: number) => (now += ms), at: () => now };
}

it('a new connection to an environment whose idle time-out was just pushed asks the database nothing', async () => {
  const row = { state: 'ready', idleUntil: new Date(0), idleMs: IDLE_MS };
  const w = world(row);
  row.idleUntil = new Date(w.at() + IDLE_MS - 1000);
  const traffic = activityRecorder(w.deps, { id: 'env_1', idleMs: IDLE_MS, idleUntil: row.idleUntil }, () => undefined);
  traffic();
  traffic();
  await w.settled();
  expect(w.counts).toEqual({ reads: 0, writes: 0 });
  // Once traffic would move it by more than a step, it is checked and moved, once.
  w.advance(STEP + 1000);
  traffic();
  traffic();
  await w.settled();
  expect(w.counts).toEqual({ reads: 1, writes: 1 });
  expect(row.idleUntil.getTime()).toBe(w.at() + IDLE_MS);
});

it('a connection to an environment idle for more than a step pushes its idle time-out at its first bytes', async () => {
  const row = { state: 'ready', idleUntil: new Date(0), idleMs: IDLE_MS };
  const w = world(row);
  row.idleUntil = new Date(w.at() + IDLE_MS - STEP - 1000);
  const traffic = activityRecorder(w.deps, { id: 'env_1', idleMs: IDLE_MS, idleUntil: row.idleUntil }, () => undefined);
  traffic();
  await w.settled();
  expect(w.counts).toEqual({ reads: 1, writes: 1 });
  expect(row.idleUntil.getTime()).toBe(w.at() + IDLE_MS);
});

it('without the idle time-out at hand, the first bytes check, and no more than once a step', async () => {
  const row = { state: 'ready', idleUntil: new Date(0), idleMs: IDLE_MS };
  const w = world(row);
  row.idleUntil = new Date(w.at() + IDLE_MS);
  const traffic = activityRecorder(w.deps, { id: 'env_1', idleMs: IDLE_MS }, () => undefined);
  for (let i = 0; i < 100; i++) traffic();
  await w.settled();
  expect(w.counts).toEqual({ reads: 1, writes: 0 });
});
