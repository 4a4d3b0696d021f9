// Sessions (docs/agents.md, "Sessions"): interactive commands that outlive their connection. The
// command, its scrollback and its attachments live on its node (src/node/session.ts); the Session
// row is what callers list, and its end is recorded once, by the instance holding the node's
// channel, whoever is attached (or no one).
import type { Actor, Deps } from '../../app/context';
import type { Exec, Session } from '../../generated/prisma/client';
import { requireOwner } from '../../kernel/access';
import { NotFoundError } from '../../kernel/errors';
import { nodeTopics, sendToNode } from '../../protocol/node-bus';
import { type AuditWho, checkAudited } from '../audit';
import { findEnvironment, recordExecRow } from './service';

/** How long DELETE waits for the node to say the killed command ended before recording it itself. */
const END_WAIT_MS = 10_000;

/** The exit code of a session killed (its grace ran out, DELETE) or lost with its node. */
export const KILLED = 137;

/** Writes the session's Exec row and removes it; the row's id, or undefined when it had already ended. */
async function recordEnd(deps: Deps, session: Session, exitCode: number): Promise<Exec | undefined> {
  const gone = await deps.prisma.session.deleteMany({ where: { id: session.id } });
  if (gone.count === 0) return undefined;
  return recordExecRow(deps, session.startedBy as unknown as AuditWho, session.environmentId, {
    command: session.command,
    exitCode,
    durationMs: Math.min(2 ** 31 - 1, deps.clock.now().getTime() - session.created.getTime()),
  });
}

/** A node said its session's command ended: recorded here; the Exec row's id, for those attached. */
export async function recordSessionEnd(deps: Deps, nodeId: string, run: string, exitCode: number): Promise<number | undefined> {
  const session = await deps.prisma.session.findFirst({ where: { run, nodeId } });
  if (!session) return undefined;
  return (await recordEnd(deps, session, exitCode))?.id;
}

/** How many connections a node says are attached to its session now. */
export async function recordSessionAttached(deps: Deps, nodeId: string, run: string, attached: number): Promise<void> {
  await deps.prisma.session.updateMany({ where: { run, nodeId }, data: { attached, lastActivity: deps.clock.now() } });
}

/**
 * A node said hello naming the sessions it still runs: the others of that node ended while it was
 * away (it restarted: its commands went with it) and are recorded as killed.
 */
export async function endSessionsNotRunning(deps: Deps, nodeId: string, running: string[]): Promise<void> {
  const gone = await deps.prisma.session.findMany({ where: { nodeId, id: { notIn: running } } });
  for (const session of gone) await recordEnd(deps, session, KILLED);
}

/** Input arrived: the session's `lastActivity`, at most once per `stepMs`. */
export function sessionActivity(deps: Deps, sessionId: string, stepMs: number, failed: (error: unknown) => void): () => void {
  let last = Number.NEGATIVE_INFINITY;
  return () => {
    const now = deps.clock.now();
    if (now.getTime() - last < stepMs) return;
    last = now.getTime();
    deps.prisma.session.updateMany({ where: { id: sessionId }, data: { lastActivity: now } }).catch(failed);
  };
}

/** The environment, when the caller may reach its sessions (its owner, admins, API keys; the exec's rules). */
async function sessionsEnvironment(deps: Deps, actor: Actor, envRef: string) {
  const env = await findEnvironment(deps, actor, envRef);
  await checkAudited(deps, actor, { action: 'exec.run', target: { kind: 'environment', id: env.id } }, () =>
    requireOwner(actor, env, `environment ${env.name}`),
  );
  return env;
}

/**
 * GET /v1/environments/{id}/sessions (Environment.sessions): its open sessions, oldest first, for a
 * caller already allowed to see the environment; only its owner, admins and API keys get them.
 */
export async function sessionsOf(deps: Deps, actor: Actor, env: { id: string; name: string; owner: string }) {
  requireOwner(actor, env, `environment ${env.name}`);
  return deps.prisma.session.findMany({ where: { environmentId: env.id }, orderBy: { created: 'asc' } });
}

/**
 * DELETE /v1/environments/{id}/sessions/{session}: kills its command's whole session and answers
 * the Exec recorded for it (137). A node that does not answer within END_WAIT_MS (offline) leaves
 * the recording to this call.
 */
export async function endSession(deps: Deps, actor: Actor, envRef: string, sessionId: string): Promise<Exec> {
  const env = await sessionsEnvironment(deps, actor, envRef);
  const session = await deps.prisma.session.findFirst({ where: { id: sessionId, environmentId: env.id } });
  if (!session) throw new NotFoundError(`session ${sessionId} of environment ${env.name} (it ended, or never was)`);
  const events = deps.events.subscribe(nodeTopics.exec(session.nodeId, session.run))[Symbol.asyncIterator]();
  const ended = events.next();
  try {
    await sendToNode(deps, session.nodeId, { type: 'exec-kill', exec: session.run });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), END_WAIT_MS);
    });
    let next = ended;
    for (;;) {
      const got = await Promise.race([next, late]);
      if (got === 'late' || got.done) break;
      if (got.value.type === 'exec-exit') {
        clearTimeout(timer);
        const exec = got.value.recorded === undefined ? null : await deps.prisma.exec.findUnique({ where: { id: got.value.recorded } });
        if (exec) return exec;
        break;
      }
      next = events.next();
    }
    clearTimeout(timer);
    const exec = await recordEnd(deps, session, KILLED);
    if (exec) return exec;
    throw new NotFoundError(`session ${sessionId} of environment ${env.name} (it ended meanwhile)`);
  } finally {
    await events.return?.();
  }
}
