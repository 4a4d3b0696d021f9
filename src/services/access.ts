// Who may call what: the first line of every service function is one of these checks, so the
// rule holds whatever edge (REST, GraphQL, a job) calls the service (ARCHITECTURE.md).
import type { Actor } from '../context';
import { ForbiddenError } from './errors';

export const SANDBOX_ONLY_OWN = 'a sandbox credential can only read, watch and report on its own sandbox';
export const NODE_ONLY_OWN = 'a node credential can only serve the environments currently on its node';

/** A member of the organization: a person's CLI token or an API key, never a sandbox or node agent. */
export function requireMember(actor: Actor): void {
  if (actor.kind === 'sandbox') throw new ForbiddenError(SANDBOX_ONLY_OWN);
  if (actor.kind === 'node') throw new ForbiddenError(NODE_ONLY_OWN);
}

/** An admin: an admin person, or an API key created with `admin: true`. */
export function requireAdmin(actor: Actor, message = 'this operation needs an admin'): void {
  requireMember(actor);
  if (!actor.admin) throw new ForbiddenError(message);
}

/** A sandbox agent's own credential (heartbeats). The sandbox it may act on is checked by the caller. */
export function requireSandboxAgent(actor: Actor, message: string): void {
  if (actor.kind !== 'sandbox') throw new ForbiddenError(message);
}

/** A node agent's own credential: answers its node's id. Which environments it may act on is checked by the caller. */
export function requireNodeAgent(actor: Actor): string {
  if (actor.kind !== 'node' || !actor.nodeId) throw new ForbiddenError('this operation is for a node agent (a bnd_ credential)');
  return actor.nodeId;
}
