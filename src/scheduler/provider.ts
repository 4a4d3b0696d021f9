import type { Deps } from '../context';
import type { Environment } from '../generated/prisma/client';
import type { RuntimeKind } from '../node/runtime';

/**
 * What a node does for an environment. The built-in hot-node pool implements it in-process;
 * a remote node agent can implement the same calls over HTTP. Both calls must be idempotent:
 * after a crash the scheduler calls them again for the same environment.
 */
export interface NodeProvider {
  /** Runs on the claimed node before the environment is ready (restoring a snapshot, starting its container). */
  prepare(deps: Deps, env: Environment): Promise<RuntimeKind>;
  /** Runs when the environment ends, before its node is freed (e.g. saving a snapshot). */
  release(deps: Deps, env: Environment): Promise<void>;
  /**
   * Wipes whatever the node still holds of an environment that ended, without saving anything:
   * runs after every end, failed ones included (a start that failed half-way through a restore
   * leaves plain files behind).
   */
  discard(deps: Deps, env: Environment): Promise<void>;
}
