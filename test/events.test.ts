// The in-process event bus (src/platform/events.ts): what a slow subscriber or a faulty handler may do to
// the publisher — nothing. Before, a subscriber that left 1024 payloads unread made the publish
// throw inside PostgreSQL's notification listener, which ended the process for every tenant.
import { describe, expect, it } from 'vitest';
import { createEvents, MAX_UNREAD, SubscriberOverflowError, type Topic } from '../src/platform/events';

// A topic of these tests' own (real topics are built by `topics` only).
const t = 't' as Topic<{ i?: number; n?: number }>;

it('drops a subscriber that falls behind, with an error for it alone; the publisher and the others go on', async () => {
  const events = await createEvents({});
  const slow = events.subscribe(t)[Symbol.asyncIterator]();
  const fast = events.subscribe(t)[Symbol.asyncIterator]();
  // Listening starts with the first next().
  const first = slow.next();
  let received = 0;
  const reading = (async () => {
    for (let next = await fast.next(); !next.done; next = await fast.next()) if (++received === MAX_UNREAD + 10) return;
  })();
  for (let i = 0; i < MAX_UNREAD + 10; i++) await events.publish(t, { i });
  await reading;
  expect(received).toBe(MAX_UNREAD + 10);
  expect(await first).toEqual({ value: { i: 0 }, done: false });
  // The slow one had MAX_UNREAD + 9 waiting: it is ended with an error, and then done.
  await expect(slow.next()).rejects.toBeInstanceOf(SubscriberOverflowError);
  expect(await slow.next()).toEqual({ value: undefined, done: true });
  await fast.return?.();
});

it('keeps a throwing handler from stopping the other handlers, the subscribers or the publisher', async () => {
  const failures: string[] = [];
  const events = await createEvents({ log: (message) => failures.push(message) });
  const heard: unknown[] = [];
  events.listen(t, () => {
    throw new Error('a faulty handler');
  });
  events.listen(t, (payload) => heard.push(payload));
  const sub = events.subscribe(t)[Symbol.asyncIterator]();
  const next = sub.next();
  await events.publish(t, { n: 1 });
  expect(heard).toEqual([{ n: 1 }]);
  expect(await next).toEqual({ value: { n: 1 }, done: false });
  expect(failures).toEqual(['a handler of t failed']);
});

it('ends a pending next() when the subscription is returned, and delivers to concurrent next() calls in order', async () => {
  const events = await createEvents({});
  const sub = events.subscribe(t)[Symbol.asyncIterator]();
  const a = sub.next();
  const b = sub.next();
  await events.publish(t, { n: 1 });
  await events.publish(t, { n: 2 });
  expect([await a, await b]).toEqual([
    { value: { n: 1 }, done: false },
    { value: { n: 2 }, done: false },
  ]);
  const pending = sub.next();
  await sub.return?.();
  expect(await pending).toEqual({ value: undefined, done: true });
});

describe.skipIf(!process.env.TEST_DATABASE_URL)('send on a shared PostgreSQL', () => {
  it('hands a payload straight to a subscriber in this process, and crosses the database only for one elsewhere', async () => {
    const schema = `events_send_${Date.now()}`;
    const opts = { databaseUrl: process.env.TEST_DATABASE_URL, schema };
    const here = await createEvents(opts);
    const there = await createEvents(opts);
    try {
      const mine = here.subscribe(t)[Symbol.asyncIterator]();
      const theirs = there.subscribe(t)[Symbol.asyncIterator]();
      const first = mine.next();
      const seen = theirs.next();
      await here.send(t, { n: 1 });
      expect(await first).toEqual({ value: { n: 1 }, done: false });
      // A notification after it: had the send gone through the database, `there` would hear it first.
      await here.publish(t, { n: 2 });
      expect(await seen).toEqual({ value: { n: 2 }, done: false });
      expect(await mine.next()).toEqual({ value: { n: 2 }, done: false });
      // A topic nobody here listens on goes through the database to the instance that does.
      const u = 'u' as Topic<{ n: number }>;
      const away = there.subscribe(u)[Symbol.asyncIterator]();
      const arrived = away.next();
      await here.send(u, { n: 3 });
      expect(await arrived).toEqual({ value: { n: 3 }, done: false });
      // Many sent at once through the database arrive in the order sent.
      const order = away.next();
      const burst = Array.from({ length: 50 }, (_, n) => here.send(u, { n: 100 + n }));
      const got = [await order];
      for (let n = 1; n < 50; n++) got.push(await away.next());
      await Promise.all(burst);
      expect(got.map((g) => g.value?.n)).toEqual(Array.from({ length: 50 }, (_, n) => 100 + n));
      await mine.return?.();
      await theirs.return?.();
      await away.return?.();
    } finally {
      await here.close();
      await there.close();
    }
  });
});
