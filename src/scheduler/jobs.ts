import type { BackgroundJob } from './background';

/** Every periodic job of a Berth instance. */
export const backgroundJobs: BackgroundJob[] = [];
