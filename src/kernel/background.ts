import type { Deps } from '../app/context';

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
  /** Starts the timers: each job looks once right away, then every interval. */
  start(deps: Deps): void;
  /** Runs every job once, now (tests move a clock, then tick). */
  tick(): Promise<void>;
  /** Runs one job soon (after `delayMs`), e.g. after a change that makes work due. */
  nudge(name: string, delayMs?: number): void;
  /** Aborted when stop() begins: a job's wait on something outside (a node's answer) ends then, its work left for the next start. */
  readonly stopping: AbortSignal;
  stop(): Promise<void>;
}

/**
 * The jobs, not yet running: Deps holds the Background and the jobs need Deps, so the composition
 * root builds this first and starts it once Deps is whole.
 */
export function createBackground(jobs: BackgroundJob[], log: (msg: string, err?: unknown) => void): Background {
  let deps: Deps | undefined;
  let stopped = false;
  const stopping = new AbortController();
  const timers = new Set<NodeJS.Timeout>();
  const running = new Map<string, Promise<void>>();
  // A run asked for while one is going waits for it, so runs of one job never overlap.
  const runJob = (job: BackgroundJob): Promise<void> => {
    const previous = running.get(job.name) ?? Promise.resolve();
    const run = previous.then(() =>
      stopped || !deps
        ? undefined
        : job.run(deps).catch((err) => {
            if (!stopped) log(`background job ${job.name} failed`, err);
          }),
    );
    running.set(job.name, run);
    void run.finally(() => {
      if (running.get(job.name) === run) running.delete(job.name);
    });
    return run;
  };

  const later = (delayMs: number, fn: () => void) => {
    if (stopped) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      fn();
    }, delayMs);
    timer.unref();
    timers.add(timer);
  };

  const every = (job: BackgroundJob, delayMs = job.intervalMs) => later(delayMs, () => void runJob(job).then(() => every(job)));

  return {
    start(built) {
      if (deps) return;
      deps = built;
      // Each job looks once right at start: work that fell due while no instance ran (an
      // interrupted shred, a time-out) is done now, not an interval later.
      for (const job of jobs) every(job, 0);
    },
    async tick() {
      for (const job of jobs) await runJob(job);
    },
    nudge(name, delayMs = 0) {
      const job = jobs.find((j) => j.name === name);
      if (job) later(delayMs, () => void runJob(job));
    },
    stopping: stopping.signal,
    async stop() {
      stopped = true;
      stopping.abort();
      for (const timer of timers) clearTimeout(timer);
      await Promise.all(running.values());
    },
  };
}
