// Handshakes for tests of subscriptions: a change made before the server listens is not delivered,
// so a test waits until it listens instead of sleeping.
import { vi } from 'vitest';
import type { Events } from '../../src/platform/events';

/**
 * Resolves once the next subscription to a topic matching `topic` listens on the bus (its first
 * read: from then on what is published reaches it), whatever transport made it.
 */
export function nextListener(deps: { events: Events }, topic: RegExp): Promise<void> {
  const subscribe = deps.events.subscribe.bind(deps.events);
  return new Promise((resolve) => {
    const spy = vi.spyOn(deps.events, 'subscribe').mockImplementation((name) => {
      const source = subscribe(name);
      if (!topic.test(name)) return source;
      spy.mockRestore();
      return {
        [Symbol.asyncIterator]() {
          const iterator = source[Symbol.asyncIterator]();
          return {
            next() {
              const next = iterator.next();
              resolve();
              return next;
            },
            return: () => iterator.return?.() ?? Promise.resolve({ value: undefined, done: true }),
          };
        },
      };
    });
  });
}

/**
 * graphql-ws acknowledges no subscription: makes a change (`prime`) and waits for the subscribers
 * to have seen one (`seen`), making another when none arrives within `patienceMs`, until they have.
 * Returns what it made.
 */
export async function primeSubscribers<T>(prime: () => Promise<T>, seen: () => boolean, patienceMs = 2_000): Promise<T[]> {
  const made: T[] = [];
  while (!seen()) {
    made.push(await prime());
    await vi
      .waitFor(
        () => {
          if (!seen()) throw new Error('no subscriber has seen a change yet');
        },
        { timeout: patienceMs, interval: 20 },
      )
      .catch(() => undefined);
  }
  return made;
}
