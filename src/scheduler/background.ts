import type { Deps } from '../context';

/**
 * Periodic work that finds what is due in the database (time-outs, expired artifacts, queued
 * environments) and does it. The timers only decide when to look: every deadline lives in a
 * row, so a restart loses nothing and several instances can run the same jobs.
 */
export interface BackgroundJob {
  name: string;
  intervalMs: number;
  run(deps: Deps): Promise<void>;
}

export interface Background {
  /** Runs every job once, now (tests move a clock, then tick). */
  tick(): Promise<void>;
  /** Runs one job soon, e.g. after a change that makes work due. */
  nudge(name: string): void;
  stop(): Promise<void>;
}

export function startBackground(deps: Deps, jobs: BackgroundJob[], log: (msg: string, err?: unknown) => void): Background {
  let stopped = false;
  const timers = new Map<string, NodeJS.Timeout>();
  const running = new Map<string, Promise<void>>();

  const runJob = (job: BackgroundJob): Promise<void> => {
    const current = running.get(job.name);
    if (current) return current.then(() => runJob(job));
    const run = job
      .run(deps)
      .catch((err) => {
        if (!stopped) log(`background job ${job.name} failed`, err);
      })
      .finally(() => running.delete(job.name));
    running.set(job.name, run);
    return run;
  };

  const schedule = (job: BackgroundJob, delay: number) => {
    if (stopped) return;
    clearTimeout(timers.get(job.name));
    const timer = setTimeout(async () => {
      await runJob(job);
      schedule(job, job.intervalMs);
    }, delay);
    timer.unref();
    timers.set(job.name, timer);
  };

  for (const job of jobs) schedule(job, job.intervalMs);

  return {
    async tick() {
      for (const job of jobs) await runJob(job);
    },
    nudge(name) {
      const job = jobs.find((j) => j.name === name);
      if (job) schedule(job, 0);
    },
    async stop() {
      stopped = true;
      for (const timer of timers.values()) clearTimeout(timer);
      await Promise.all(running.values());
    },
  };
}
