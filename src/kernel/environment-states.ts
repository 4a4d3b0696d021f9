// The environment state machine, as one table: its states, which are live and which ended, and
// the transitions allowed between them (docs/environments.md, "States and transitions"). The
// service, the background jobs and the GraphQL enum read it, and the web console imports it
// (console/src/live.ts, pages/Environments.tsx, pages/Environment.tsx), so this file imports nothing.

/** Every state, in the order a lease passes through them. */
export const STATES = ['pending', 'starting', 'ready', 'stopping', 'stopped', 'failed'] as const;
export type EnvironmentState = (typeof STATES)[number];

/** States holding (or waiting for) a node: a list's `live` filter, quotas, the node's count. */
export const LIVE_STATES = ['pending', 'starting', 'ready', 'stopping'] as const satisfies readonly EnvironmentState[];
/** Final states: no transition leaves them. */
export const ENDED_STATES = ['stopped', 'failed'] as const satisfies readonly EnvironmentState[];

/** Each state and the states it may move to: the one place a transition is allowed. */
export const TRANSITIONS = {
  // A node of the pool claimed it; or a stop, the hard time-out.
  pending: ['starting', 'stopping'],
  // Prepared; a stop, a time-out, a system end (the node leaving, the disk limit); or it failed to
  // start, its container ended, its node was lost.
  starting: ['ready', 'stopping', 'failed'],
  ready: ['stopping', 'failed'],
  // Its node released it (`failed` when the end was the environment's own fault, or the node could
  // not release it, or was lost meanwhile).
  stopping: ['stopped', 'failed'],
  stopped: [],
  failed: [],
} as const satisfies Record<EnvironmentState, readonly EnvironmentState[]>;

type Targets<S extends EnvironmentState> = (typeof TRANSITIONS)[S][number];

/** The states from which every one of `To` may be reached (a union `To` needs all of them allowed). */
export type SourceOf<To extends EnvironmentState> = {
  [S in EnvironmentState]: [To] extends [Targets<S>] ? S : never;
}[EnvironmentState];

/** Whether the table allows `from` → `to`. */
export function allowed(from: string, to: string): boolean {
  return Object.hasOwn(TRANSITIONS, from) && (TRANSITIONS as Record<string, readonly string[]>)[from]!.includes(to);
}

/**
 * Checks at run time what the types check at compile time, for a caller whose states are computed:
 * each of `from` → `to` must be in the table. A programming error, so it throws at once.
 */
export function assertTransitions(from: readonly string[], to: string): void {
  if (from.length === 0) throw new Error(`a transition to ${to} names no state it leaves`);
  for (const state of from) {
    if (!allowed(state, to)) throw new Error(`the environment state machine has no transition ${state} → ${to}`);
  }
}

/** States a stop applies to: every live one but `stopping` itself (DELETE, the hard time-out). */
export const STOPPABLE = ['pending', 'starting', 'ready'] as const satisfies readonly SourceOf<'stopping'>[];
/** States in which an environment runs on its node: ended by the system (its node leaving, the disk limit, its container ending). */
export const RUNNING = ['starting', 'ready'] as const satisfies readonly SourceOf<'stopping' | 'failed'>[];
/** States in which a node holds an environment: what fails when the node is lost or forgets it. */
export const ON_NODE = ['starting', 'ready', 'stopping'] as const satisfies readonly SourceOf<'failed'>[];

export const isLive = (state: string): boolean => (LIVE_STATES as readonly string[]).includes(state);
export const isEnded = (state: string): boolean => (ENDED_STATES as readonly string[]).includes(state);
/** Whether a stop still changes something (the console's Stop button, DELETE). */
export const isStoppable = (state: string): boolean => (STOPPABLE as readonly string[]).includes(state);

/**
 * Activity (a keepalive, an exec, relay traffic, becoming ready) pushes the idle time-out back to
 * now + the lease's idle duration, never earlier than it already was.
 */
export function pushedIdleUntil(env: { idleUntil: Date; idleMs: number }, now: Date): Date {
  return new Date(Math.max(env.idleUntil.getTime(), now.getTime() + env.idleMs));
}
