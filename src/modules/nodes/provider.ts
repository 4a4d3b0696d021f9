import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import { syncOf } from '../../kernel/json-columns';
import type { SyncRules } from '../../kernel/sync-rules';
import type { RuntimeKind } from '../../node/runtime';
import { environmentSpec } from './specs';

/**
 * What a node does for an environment, asked of the node that holds it over its control channel
 * (src/modules/nodes/remote-nodes.ts): the built-in node's as any other's. The calls must be
 * idempotent: after a crash the scheduler calls them again for the same environment.
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

/** How long a start may take when the template runs lifecycle commands (a `npm ci` in a postCreateCommand takes minutes). */
export const LIFECYCLE_START_MS = 30 * 60_000;

/**
 * The longest a start may take before the environment fails: 10× the template's start, at least a
 * minute, and at least LIFECYCLE_START_MS for one with lifecycle commands to run.
 */
export function startBound(env: Pick<Environment, 'startMs' | 'lifecycle'>): number {
  const commands = Array.isArray(env.lifecycle) && env.lifecycle.length > 0;
  return Math.max(commands ? LIFECYCLE_START_MS : 60_000, 10 * env.startMs);
}

/** The environment's shares, each with its sync rules: what a release saves. */
export async function sharesWithRules(deps: Deps, env: Environment): Promise<{ name: string; envPath: string; rules: SyncRules }[]> {
  return (await environmentSpec(deps, env)).shares.map((s) => ({ ...s, rules: shareRules(env, s.name) }));
}

/** The environment's sync rules for one share (`files` keys are `<share>/<path>`). */
function shareRules(env: Environment, share: string): SyncRules {
  const sync = syncOf(env);
  const files: Record<string, string> = {};
  for (const [dest, source] of Object.entries(sync.files)) {
    if (dest.startsWith(`${share}/`)) files[dest.slice(share.length + 1)] = source;
  }
  return { include: sync.include, noIgnore: sync.noIgnore, files };
}
