import type { Clock } from '../../src/platform/clock';

/** Wall-clock time plus an offset the test moves forward. */
export class ManualClock implements Clock {
  private offsetMs = 0;
  now(): Date {
    return new Date(Date.now() + this.offsetMs);
  }
  advance(ms: number): void {
    this.offsetMs += ms;
  }
}
