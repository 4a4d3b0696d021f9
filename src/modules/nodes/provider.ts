import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import { syncOf } from '../../kernel/json-columns';
import type { SyncRules } from '../../kernel/sync-rules';
import type { RuntimeKind } from '../../node/runtime';
import { restoreShares, saveShares } from '../../node/shares';
import { openSnapshotShare, planRestore, recordRestored, savedShares, saveSnapshotShare } from '../snapshots';
import { environmentSpec } from './specs';

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

/** The longest a start may take before the environment fails: 10× the template's start, at least a minute. */
export function startBound(startMs: number): number {
  return Math.max(60_000, 10 * startMs);
}

/**
 * The built-in provider: the server's own node (src/modules/nodes/builtin-node.ts), the same runtime
 * `berth node` runs. Snapshots move as plain archive streams through the snapshot service, the
 * same calls a remote node agent makes over HTTP (docs/snapshots.md).
 */
export const builtinProvider: NodeProvider = {
  async prepare(deps, env) {
    const spec = await environmentSpec(deps, env);
    const restore = async (root: string) => {
      const plan = await planRestore(deps, env);
      if (!plan) return;
      const saved = plan.shares.map((snapshot) => ({ share: snapshot.share, open: () => openSnapshotShare(deps, snapshot) }));
      await recordRestored(deps, env.id, plan, await restoreShares(root, spec.shares, saved));
    };
    if (env.warmSlot && env.warmClaimed && env.specHash) return deps.node.claimWarm(env.warmSlot, env.specHash, spec, restore);
    if (env.warmSlot) await deps.node.dropWarm(env.warmSlot);
    return deps.node.prepare(spec, restore);
  },
  async release(deps, env) {
    // The container goes first: nothing changes the shares while they are saved.
    await deps.node.stop(env.id);
    if (env.snapshot) {
      const shares = await sharesWithRules(deps, env);
      await saveShares(
        deps.node.root(env.id),
        shares,
        await savedShares(deps, env),
        async (share, archive) => void (await saveSnapshotShare(deps, env, share, archive)),
        (share, path) => deps.node.options.log(`${env.id}: the snapshot of share ${share} leaves out ${path}: not a regular file`),
      );
    }
    await deps.node.discard(env.id);
  },
  async discard(deps, env) {
    await deps.node.discard(env.id);
  },
};

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
