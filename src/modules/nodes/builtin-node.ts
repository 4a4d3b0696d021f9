// The built-in pool's node: the node runtime (src/node/runtime.ts) inside the server, holding
// environments under DATA_DIR/workspaces, with the engine DOCKER_HOST names, else the local Docker
// or Podman socket, else none (files-only environments). Its containers carry this deployment's
// owner label, so servers sharing an engine never touch each other's.
import { createHash } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Config } from '../../app/config';
import type { Deps } from '../../app/context';
import { removeTree } from '../../dataplane/beneath';
import type { BackgroundJob } from '../../kernel/background';
import { LIVE_STATES, RUNNING, type SourceOf } from '../../kernel/environment-states';
import { BUILTIN_NODE_JOB } from '../../kernel/job-names';
import { CommandHost, isCommandMessage } from '../../node/command-host';
import { Engine, engineAddress, engineMessage } from '../../node/engine';
import { type FoundWarm, NodeRuntime } from '../../node/runtime';
import { BUILTIN_NODE, nodeTopics } from '../../protocol/node-bus';
import { poolImages } from '../templates';
import { resourcesOf } from './specs';
import { warmFailed } from './warm-job';

type Log = (message: string, err?: unknown) => void;

/** The built-in node's engine: the one DOCKER_HOST names must answer; a found socket may not. */
export async function openBuiltinEngine(config: Config, log: Log): Promise<Engine | null> {
  const address = engineAddress(config.dockerHost);
  if (!address) return null;
  try {
    return await Engine.open(address);
  } catch (error) {
    if (config.dockerHost) throw new Error(`DOCKER_HOST: ${engineMessage(error)} (DOCKER_HOST=none runs files-only environments)`);
    log(`the built-in pool runs files-only environments: ${engineMessage(error)}`);
    return null;
  }
}

export function openBuiltinNode(config: Config, masterKey: Buffer, engine: Engine | null, log: Log): NodeRuntime {
  // Every instance of one deployment shares its master key and database: the same owner.
  const owner = `builtin-${createHash('sha256')
    .update(masterKey)
    .update(config.databaseUrl ? `${config.databaseUrl}#${config.databaseSchema ?? ''}` : config.dataDir)
    .digest('hex')
    .slice(0, 16)}`;
  return new NodeRuntime({
    engine,
    dir: join(config.dataDir, 'workspaces'),
    owner,
    log: (line) => log(`built-in node: ${line}`),
  });
}

/**
 * The built-in node's inbox on the bus (`node:hot`), as a remote node's is its channel: the
 * commands of its environments, handled by the same CommandHost as `berth node`'s, their events
 * sent back to the caller's instance. Returns the function that stops it (its commands killed).
 */
export function serveBuiltinNode(deps: Deps, log: Log): () => void {
  const host = new CommandHost(
    deps.node,
    (event) => {
      const { exec, ...payload } = event;
      // In the order sent (Events.send keeps it per topic).
      deps.events.send(nodeTopics.exec(BUILTIN_NODE, exec), payload).catch((err) => log('a command event was lost', err));
    },
    () => true,
    'berth',
  );
  const stop = deps.events.listen(nodeTopics.node(BUILTIN_NODE), (message) => {
    if (isCommandMessage(message)) host.handle(message);
  });
  return () => {
    stop();
    host.killAll();
  };
}

/** At start: the built-in node pulls the images of its pools' templates (those with hot nodes) it lacks, in the background. */
export async function prepullBuiltin(deps: Deps): Promise<void> {
  if (!deps.node.engine) return;
  const pools = deps.catalog.pools.filter((p) => p.hotNodes > 0).map((p) => p.name);
  if (pools.length) deps.node.prepull(await poolImages(deps.prisma, pools, null));
}

/** Ends a live environment whose container ended without being asked, with why. */
export async function failEnded(deps: Deps, id: string, reason: string, from: readonly SourceOf<'failed'>[] = RUNNING): Promise<void> {
  const failed = await deps.ends.fail(id, from, reason);
  if (failed) await deps.node.discard(id);
}

/**
 * Removes the folders and containers of environments that are no longer live, fails ready ones whose
 * container stopped or vanished, and watches the rest again: after a restart (kill -9 included)
 * no container outlives its environment. Runs at start, then every minute.
 */
async function reconcile(deps: Deps): Promise<void> {
  // Listed before the database is asked: a folder or container a prepare makes meanwhile is of an
  // environment the answer already counts as live.
  const root = deps.node.options.dir;
  const folders = await readdir(root).catch(() => [] as string[]);
  const liveOf = (ids: string[]) =>
    deps.prisma.environment.findMany({ where: { id: { in: ids }, nodeId: null, state: { in: [...LIVE_STATES] } } });
  const keep = new Set((await liveOf(folders)).map((e) => e.id));
  // (Warm folders are the runtime's reconcile's, below.)
  for (const name of folders) if (!keep.has(name) && !name.startsWith('warm-')) await removeTree(join(root, name));
  // Asked before the containers are listed: a container of a ready environment exists by then.
  const ready = await deps.prisma.environment.findMany({
    where: { nodeId: null, state: 'ready', runtime: 'container' },
    select: { id: true },
  });
  const listed = deps.clock.now();
  const { ended, present } = await deps.node.reconcile(
    async (ids) => new Map((await liveOf(ids)).map((env) => [env.id, resourcesOf(env).memory])),
    (found) => wantedWarm(deps, found, listed),
  );
  if (!deps.node.engine) return;
  for (const [id, reason] of ended) await failEnded(deps, id, reason);
  // A ready environment whose container vanished (removed by hand, the engine's storage reset).
  for (const { id } of ready) {
    if (!present.has(id)) await failEnded(deps, id, 'its container is gone (removed outside Berth)', ['ready']);
  }
}

/**
 * Of the warm containers and folders the built-in node found, the slots the database still wants:
 * one being made (`starting`), or a ready one of the slot's spec that runs. A ready one that is
 * gone or ended (and was made before the listing) failed: the warm job makes it again after a backoff.
 */
async function wantedWarm(deps: Deps, found: FoundWarm[], listed: Date): Promise<Set<string>> {
  const slots = await deps.prisma.node.findMany({
    where: { remoteId: null, environmentId: null, warmState: { in: ['starting', 'ready'] } },
    select: { id: true, warmSpec: true, warmState: true, warmSince: true },
  });
  const seen = new Map(found.map((f) => [f.slot, f]));
  const keep = new Set<string>();
  for (const slot of slots) {
    const there = seen.get(slot.id);
    if (slot.warmState === 'starting' || (there?.running && there.hash === slot.warmSpec)) {
      keep.add(slot.id);
    } else if (slot.warmSince && slot.warmSince < listed) {
      await warmFailed(deps, slot.id, slot.warmSince, there ? 'its container ended' : 'its container is gone', deps.node.options.log);
    }
  }
  return keep;
}

export const builtinNodeJob: BackgroundJob = { name: BUILTIN_NODE_JOB, intervalMs: 60_000, run: reconcile };
