// Who may call what: the first line of every service function is one of these checks, so the
// rule holds whatever edge (REST, GraphQL, a job) calls the service (ARCHITECTURE.md).
import type { Actor } from '../app/context';
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

/**
 * What `owner` records for what this actor creates: the person (whichever of their tokens is
 * used), or the API key itself.
 */
export function principalOf(actor: Actor): string {
  return actor.kind === 'person' && actor.personId ? `person:${actor.personId}` : `key:${actor.credentialId}`;
}

/**
 * Changing a record of the organization (stopping, exec, deleting…): its creator, an admin, or an
 * organization API key. Other members only read it (docs/api.md#ownership).
 */
export function requireOwner(actor: Actor, record: { owner: string }, what: string): void {
  requireMember(actor);
  if (actor.admin || actor.kind === 'apiKey' || record.owner === principalOf(actor)) return;
  throw new ForbiddenError(`${what} belongs to the member who created it; only they, an admin or an API key may change it`);
}

/**
 * Wiring an environment to a sandbox writes into and reads from that machine's folder: only
 * whoever registered the sandbox may, admins included in the refusal.
 */
export function requireSandboxOwner(actor: Actor, sandbox: { owner: string }, name: string): void {
  requireMember(actor);
  if (sandbox.owner !== principalOf(actor)) {
    throw new ForbiddenError(`sandbox ${name} is wired only by whoever registered it (the same person's tokens or the same API key)`);
  }
}
