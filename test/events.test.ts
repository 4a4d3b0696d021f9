// The in-process event bus (src/platform/events.ts): what a slow subscriber or a faulty handler may do to
// the publisher — nothing. Before, a subscriber that left 1024 payloads unread made the publish
// throw inside PostgreSQL's notification listener, which ended the process for every tenant.
import { expect, it } from 'vitest';
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
