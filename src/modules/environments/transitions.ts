// State changes of an environment: one transaction each, or a part of the caller's (the claim's),
// with its event-log row and webhook; every transition goes through here.
import type { Actor, Deps } from '../../app/context';
import type { Environment, Prisma as P } from '../../generated/prisma/client';
import { assertTransitions, type EnvironmentState, isEnded, type SourceOf } from '../../kernel/environment-states';
import type { AuditAction } from '../../kernel/event-names';
import type { Tx } from '../../platform/db';
import { recordAudit } from '../audit';
import { notifySandboxConfig } from '../sandboxes';
import { environmentStateDeliveries, nudgeWebhooks } from '../webhooks';
import { announceEnvironment, recordEvent } from './events';

/**
 * Moves an environment from one of `from` to `to` in one transaction (the UPDATE's WHERE is the
 * guard: a transition that no longer applies changes nothing) and logs the new version, and
 * `audit`'s event when a caller asked for it. Every state change goes through here or, for one
 * that commits with other writes, transitionIn. `from` → `to` must be in the state machine's table
 * (src/kernel/environment-states.ts): a pair it lacks does not compile, or throws at once.
 */
export async function transition<To extends EnvironmentState>(
  deps: Deps,
  id: string,
  from: readonly NoInfer<SourceOf<To>>[],
  to: To,
  data: (now: Date, env: Environment) => P.EnvironmentUpdateInput = () => ({}),
  audit?: { actor: Actor; action: AuditAction },
): Promise<Environment | null> {
  assertTransitions(from, to);
  let hooked = false;
  const env = await deps.prisma.$transaction(async (tx) => {
    const moved = await transitionIn(deps, tx, id, from, to, data);
    if (!moved) return null;
    hooked = moved.hooked;
    if (audit) {
      await recordAudit(deps, tx, audit.actor, {
        action: audit.action,
        target: { kind: 'environment', id },
        detail: { name: moved.env.name },
      });
    }
    return moved.env;
  });
  if (env) {
    nudgeWebhooks(deps, hooked);
    await announceEnvironment(deps, env.orgId);
    // The sandbox's config shows each wired environment's state and node.
    await notifySandboxConfig(deps, env.orgId, env.sandboxId);
  }
  return env;
}

/** How transitionIn is done within its caller's transaction. */
export interface TransitionInOptions {
  /**
   * The row as this transaction holds it, when no other can change it meanwhile (it was inserted
   * by this transaction, so nobody else sees it): not locked and read again.
   */
  current?: Environment;
  /** The caller logs the new version itself (logTransition), after writes that must come first in the log. */
  deferLog?: boolean;
}

/**
 * transition() inside the caller's transaction, for a change of state that must commit with other
 * writes (the claim of a queued environment takes its node in the same transaction). The caller
 * announces it once committed: announceEnvironment, notifySandboxConfig, and nudgeWebhooks with
 * `hooked`.
 */
export async function transitionIn<To extends EnvironmentState>(
  deps: Deps,
  tx: Tx,
  id: string,
  from: readonly NoInfer<SourceOf<To>>[],
  to: To,
  data: (now: Date, env: Environment) => P.EnvironmentUpdateInput = () => ({}),
  opts: TransitionInOptions = {},
): Promise<{ env: Environment; hooked: boolean } | null> {
  assertTransitions(from, to);
  let current = opts.current;
  if (!current) {
    // The row lock makes a racing transition (a claim, a time-out) finish first, so this one
    // then sees the state it left instead of silently missing it. Locked and read in one statement.
    const [row] = await tx.$queryRaw<Environment[]>`SELECT * FROM "Environment" WHERE id = ${id} FOR UPDATE`;
    // As Prisma's own read gives it: a list column never written is an empty list, not null.
    current = row && { ...row, outSynced: row.outSynced ?? [] };
  }
  if (!current || !(from as readonly string[]).includes(current.state)) return null;
  const now = deps.clock.now();
  const updated = await tx.environment.update({
    where: { id },
    // Only a pending environment waits: every transition leads out of pending. The node work taken
    // for the state it leaves ends with it, unless `data` takes it for the new one.
    data: { workClaim: null, ...data(now, current), state: to, version: { increment: 1 }, waiting: null },
  });
  if (isEnded(to)) await tx.node.updateMany({ where: { environmentId: id }, data: { environmentId: null } });
  return { env: updated, hooked: opts.deferLog ? false : await logTransition(tx, updated, now) };
}

/** A new version's row of the event log and its webhook (`environment.state`); true when a delivery was queued. */
export function logTransition(tx: Tx, env: Environment, at: Date): Promise<boolean> {
  return recordEvent(tx, env, environmentStateDeliveries(env, at));
}
