import { stat } from 'node:fs/promises';
import type { Deps } from '../../app/context';
import { shareDir } from '../../dataplane/layout';
import type { Environment } from '../../generated/prisma/client';
import { syncOf } from '../../kernel/json-columns';
import { type SyncRules, selectFiles } from '../../kernel/sync-rules';
import type { RuntimeKind } from '../../node/runtime';
import { archiveStream, extractArchive } from '../../protocol/snapshot-archive';
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
      let files = 0;
      for (const snapshot of plan.shares) {
        // A share the template no longer has is restored where its name would put it.
        const envPath = spec.shares.find((s) => s.name === snapshot.share)?.envPath ?? `/${snapshot.share}`;
        files += (await extractArchive(await openSnapshotShare(deps, snapshot), shareDir(root, envPath))).files;
      }
      await recordRestored(deps, env.id, plan, files);
    };
    if (env.warmSlot && env.warmClaimed && env.specHash) return deps.node.claimWarm(env.warmSlot, env.specHash, spec, restore);
    if (env.warmSlot) await deps.node.dropWarm(env.warmSlot);
    return deps.node.prepare(spec, restore);
  },
  async release(deps, env) {
    // The container goes first: nothing changes the shares while they are saved.
    await deps.node.stop(env.id);
    if (env.snapshot) {
      const spec = await environmentSpec(deps, env);
      const root = deps.node.root(env.id);
      const done = await savedShares(deps, env);
      for (const share of spec.shares) {
        const dir = shareDir(root, share.envPath);
        if (done.includes(share.name) || !(await isDir(dir))) continue;
        await saveSnapshotShare(deps, env, share.name, archiveStream(dir, selectFiles(dir, shareRules(env, share.name))));
      }
    }
    await deps.node.discard(env.id);
  },
  async discard(deps, env) {
    await deps.node.discard(env.id);
  },
};

/** The environment's sync rules for one share (`files` keys are `<share>/<path>`). */
export function shareRules(env: Environment, share: string): SyncRules {
  const sync = syncOf(env);
  const files: Record<string, string> = {};
  for (const [dest, source] of Object.entries(sync.files)) {
    if (dest.startsWith(`${share}/`)) files[dest.slice(share.length + 1)] = source;
  }
  return { include: sync.include, noIgnore: sync.noIgnore, files };
}

async function isDir(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null))?.isDirectory() ?? false;
}
