// The built-in pool's node: a node like any other (`berth node`, src/agent/node-agent.ts), which
// the server runs in a process of its own (src/app/builtin-supervisor.ts) over the same control
// channel, with a credential made for each of its processes (mintBuiltinToken). It serves every
// organization's leases of the pools with hot nodes, on the slots the catalog counts
// (`<pool>-<n>`), and holds its environments under DATA_DIR/workspaces. One deployment (a master
// key and a database) has one built-in node; of several instances on one machine, one runs it
// (src/app/builtin-supervisor.ts).
import { createHash, randomBytes } from 'node:crypto';
import type { Config } from '../../app/config';
import type { Actor, BuiltinNode, Deps } from '../../app/context';
import { LIVE_STATES } from '../../kernel/environment-states';
import { BUILTIN_NODE_TOKEN, hashSecret } from '../../kernel/secrets';
import type { Catalog } from '../templates';

/** The built-in node's name, on GET /v1/nodes and in audit events; no organization's node may take it. */
export const BUILTIN_NAME = 'builtin';

/**
 * The deployment's built-in node: its id and container label, the same for every instance sharing
 * the master key and database.
 */
export function builtinIdentity(config: Config, masterKey: Buffer): BuiltinNode {
  const hash = createHash('sha256')
    .update(masterKey)
    .update(config.databaseUrl ? `${config.databaseUrl}#${config.databaseSchema ?? ''}` : config.dataDir)
    .digest('hex')
    .slice(0, 16);
  return { id: `nod_builtin_${hash}`, owner: `builtin-${hash}` };
}

/**
 * A credential for a new process of the built-in node: only its hash is kept, on the node's row,
 * where every instance checks it (the node calls the instance it was started by, and dials back
 * to whichever holds a relay). The one before it stops working.
 */
export async function mintBuiltinToken(deps: Deps): Promise<string> {
  const token = `${BUILTIN_NODE_TOKEN}${randomBytes(32).toString('base64url')}`;
  await deps.prisma.remoteNode.update({ where: { id: deps.builtin.id }, data: { tokenHash: hashSecret(token) } });
  return token;
}

/** The built-in node's process stopped: its credential stops working (unless a newer one replaced it). */
export async function dropBuiltinToken(deps: Deps, token: string): Promise<void> {
  await deps.prisma.remoteNode.updateMany({ where: { id: deps.builtin.id, tokenHash: hashSecret(token) }, data: { tokenHash: null } });
}

/** Whether a node actor is the built-in node's (src/modules/credentials/auth.ts), which acts on every organization's environments on it. */
export const actsForEveryOrg = (actor: Actor): boolean => actor.kind === 'node' && actor.orgId === '';

/** The built-in node's slots: the catalog's hot nodes, `<pool>-<n>`. */
export function builtinSlots(catalog: Catalog): { id: string; pool: string }[] {
  return catalog.pools.flatMap((p) => Array.from({ length: p.hotNodes }, (_, i) => ({ id: `${p.name}-${i + 1}`, pool: p.name })));
}

/**
 * At start: the built-in node's row, and the slots and environments an earlier version of Berth
 * kept without a node (the pool ran inside the server then) moved under it.
 */
export async function ensureBuiltinNode(deps: Deps): Promise<void> {
  const { id } = deps.builtin;
  await deps.prisma.$transaction(async (tx) => {
    await tx.remoteNode.upsert({
      where: { id },
      create: { id, orgId: '', name: BUILTIN_NAME, pool: '', builtin: true, createdBy: 'berth', created: deps.clock.now() },
      update: {},
    });
    await tx.node.updateMany({ where: { remoteId: null }, data: { remoteId: id } });
    await tx.environment.updateMany({
      where: { nodeId: null, node: { not: null }, state: { in: [...LIVE_STATES] } },
      data: { nodeId: id },
    });
  });
}

/**
 * The built-in node's engine as /readyz shows it: the engine it said in its hello ('none': files
 * only, or not online), and whether it answers ('ok', else its trouble: the node is degraded).
 */
export async function builtinEngine(deps: Deps): Promise<{ engine: string; status: string }> {
  const row = await deps.prisma.remoteNode.findUnique({
    where: { id: deps.builtin.id },
    select: { engine: true, state: true, engineError: true },
  });
  if (row?.state !== 'online' || !row.engine) return { engine: 'none', status: 'none' };
  return { engine: row.engine, status: row.engineError ? `degraded: ${row.engineError}` : 'ok' };
}
