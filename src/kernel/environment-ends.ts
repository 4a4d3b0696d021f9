// How the node side (src/modules/nodes/) ends environments without importing the environments
// module, which places work on nodes: the environments module implements it and the composition
// root hands it over as `deps.ends` (src/app/deps.ts).
import type { Environment } from '../generated/prisma/client';
import type { SourceOf } from './environment-states';

export interface EnvironmentEnds {
  /** Fails the environment if it is in one of `from`, with `error`: the failed row, or null when it had moved on. */
  fail(id: string, from: readonly SourceOf<'failed'>[], error: string): Promise<Environment | null>;
  /** Ends the environment if it is in one of `from`: its release saves its shares as any end does; `error` says why. */
  stop(id: string, from: readonly SourceOf<'stopping'>[], error: string): Promise<Environment | null>;
}
