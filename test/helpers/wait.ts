// Bounded polling: the one way a test waits for what nothing announces. What is announced is
// waited on as an event instead (reaches() and recorded() of ./states, a process's output lines).
import { setTimeout as pause } from 'node:timers/promises';

export interface PollOptions {
  /** What happens between two tries: a round of the server's jobs, a move of its clock. By default a 50 ms pause. */
  between?: () => Promise<unknown>;
  /**
   * The bound, in real time (default 45 s: a container's prepare on a loaded 2-core machine, under
   * the tests' 60 s). In time rather than in tries, since a try is quick when the work is elsewhere.
   */
  timeout?: number;
}

/**
 * Asks `probe` until it answers something other than undefined, and answers that. A probe that
 * throws fails the wait at once (an end that is not the one waited for); past the bound it fails
 * naming `what` (a function is asked then, to name what was last seen).
 */
export async function poll<T>(what: string | (() => string), probe: () => Promise<T | undefined>, options: PollOptions = {}): Promise<T> {
  const { between = () => pause(50), timeout = 45_000 } = options;
  for (const deadline = Date.now() + timeout; ; ) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() >= deadline) throw new Error(`waited ${timeout / 1000} s for ${typeof what === 'string' ? what : what()}`);
    await between();
  }
}
