/**
 * A push-fed async iterator that is live from the moment it is made: what is pushed before the
 * consumer's first `next()` waits in order. (A Repeater starts only at the first `next()`, so a
 * subscription built on one could miss what happens between the subscribe call and its first
 * read.) `onClose` runs once, when the consumer returns or the producer ends it.
 */
export class Channel<T> implements AsyncIterableIterator<T> {
  private readonly queue: T[] = [];
  private waiter: ((result: IteratorResult<T, undefined>) => void) | undefined;
  private closed = false;

  constructor(private readonly onClose: () => void = () => undefined) {}

  push(value: T): void {
    if (this.closed) return;
    if (this.waiter) {
      const wake = this.waiter;
      this.waiter = undefined;
      wake({ value, done: false });
    } else {
      this.queue.push(value);
    }
  }

  /** No more values: the consumer still gets those already pushed, then the end. */
  end(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose();
    this.waiter?.({ value: undefined, done: true });
    this.waiter = undefined;
  }

  next(): Promise<IteratorResult<T, undefined>> {
    if (this.queue.length > 0) return Promise.resolve({ value: this.queue.shift()!, done: false });
    if (this.closed) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }

  return(): Promise<IteratorResult<T, undefined>> {
    this.queue.length = 0;
    this.end();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
