/**
 * A subscription's source of values that any number of subscribers can share (see
 * src/edges/graphql/fanout.ts): subscribers whose sources have the same key, and whose operations have
 * the same document and variables, get the same values, so each value is executed and serialized
 * once for all of them. The key must therefore name everything that decides which values a
 * subscriber gets and how its selection resolves: the organization, the resolved filter.
 */
export class SharedSource<T> {
  constructor(
    readonly key: string,
    /** Starts listening; `emit` gets the values in order, once each; resolves once listening, with the stop function. */
    readonly listen: (emit: (values: T[]) => void) => Promise<() => void>,
  ) {}

  /** graphql-js wants an AsyncIterable from a subscribe resolver; a shared source is read through `listen` only. */
  [Symbol.asyncIterator](): AsyncIterator<T> {
    throw new Error('a shared subscription source is read by the fan-out, not iterated');
  }
}
