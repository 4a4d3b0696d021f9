/** Time source. Production uses the wall clock; tests inject one they can move. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };
