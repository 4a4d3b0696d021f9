// The node provider: an environment's prepare, release and discard happen on the node that holds
// it (`berth node`, the built-in one included), asked over its control channel (src/protocol/node-bus.ts).
// The node moves the snapshot archives itself, over the node HTTP calls (docs/snapshots.md).
import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import type { BackgroundJob } from '../../kernel/background';
import { NODE_JOB } from '../../kernel/job-names';
import { askNode, sendToNode } from '../../protocol/node-bus';
import { savedShares } from '../snapshots';
import { type NodeProvider, sharesWithRules, startBound } from './provider';
import { LIVE_NODE, markLeftNodes, markLostNodes, revokeDrained } from './service';
import { environmentSpec } from './specs';

/** The longest a node may take to save an environment's shares. */
const RELEASE_MS = 10 * 60_000;

/** Gives up on a node's answer once its node is no longer online or the environment left `state`. */
function stillWanted(deps: Deps, env: Environment, state: string) {
  return async (): Promise<string | null> => {
    const node = await deps.prisma.remoteNode.findUnique({ where: { id: env.nodeId ?? '' }, select: { state: true, name: true } });
    // A leaving node (its agent shutting down) still releases what it holds.
    if (!node || !LIVE_NODE.includes(node.state)) return `node ${env.node} was lost`;
    const now = await deps.prisma.environment.findUnique({ where: { id: env.id }, select: { state: true } });
    if (now?.state !== state) return `the environment is ${now?.state ?? 'gone'}`;
    return null;
  };
}

/** Each environment's work goes to the node it runs on, the built-in node's as any other's. */
export const nodeProvider: NodeProvider = {
  async prepare(deps, env) {
    if (!env.nodeId) throw new Error('the environment is on no node');
    const reply = await askNode(
      deps,
      env.nodeId,
      {
        type: 'prepare',
        environment: {
          ...(await environmentSpec(deps, env)),
          // The slot's warm container it claims, or evicts (src/modules/nodes/warm-job.ts).
          ...(env.warmSlot ? { warm: { slot: env.warmSlot, hash: env.specHash ?? '', claim: env.warmClaimed } } : {}),
          // A lease naming no snapshot key restores nothing: its node need not ask (a round trip).
          restore: env.restore.length > 0,
        },
      },
      { timeoutMs: startBound(env), check: stillWanted(deps, env, 'starting'), signal: deps.background.stopping },
    );
    return reply.runtime === 'container' ? 'container' : 'files';
  },
  async release(deps, env) {
    if (!env.nodeId) return;
    const shares = await sharesWithRules(deps, env);
    await askNode(
      deps,
      env.nodeId,
      { type: 'release', environment: { id: env.id, snapshot: env.snapshot !== null, saved: await savedShares(deps, env), shares } },
      { timeoutMs: RELEASE_MS, check: stillWanted(deps, env, 'stopping'), signal: deps.background.stopping },
    );
  },
  async discard(deps, env) {
    // A node that is not connected wipes every root it does not hold when it says hello again.
    if (env.nodeId) await sendToNode(deps, env.nodeId, { type: 'discard', environment: { id: env.id } });
  },
};

/** Liveness (lost nodes fail their environments), draining (revoked once empty), leaving (offline once empty). */
export const nodeJob: BackgroundJob = {
  name: NODE_JOB,
  intervalMs: 1000,
  async run(deps) {
    await markLostNodes(deps);
    await revokeDrained(deps);
    await markLeftNodes(deps);
  },
};
