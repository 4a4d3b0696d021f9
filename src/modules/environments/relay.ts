// The rules of the byte relay (docs/agents.md, "The relay"): which socket a sandbox may open, and
// the release's wait for the last `out` pass.
import type { Actor, Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import { pushedIdleUntil } from '../../kernel/environment-states';
import { ConflictError, ForbiddenError, NotFoundError, ValidationError } from '../../kernel/errors';
import { ENVIRONMENT_JOB } from '../../kernel/job-names';
import { exportsOf, sharesOf, syncOf } from '../../kernel/json-columns';
import type { RelayJob } from '../../protocol/relay';
import { parseAddress } from '../../protocol/relay';
import { requireRuntime } from './exec';
import { readEnvironment } from './service';

/** How long a release waits for a live sandbox agent to bring the `out` shares home. */
export const FINAL_SYNC_WAIT_MS = 30_000;
/** A sandbox seen within this long counts as having a running agent (it heartbeats every minute). */
export const AGENT_LIVE_MS = 90_000;

export interface RelayRequest {
  environment?: string | null;
  kind?: string | null;
  service?: string | null;
  share?: string | null;
  final?: string | null;
}

export interface AuthorizedRelay {
  env: Environment;
  job: RelayJob;
}

/**
 * Checks a sandbox's request for a relay socket: only a sandbox credential, only for an
 * environment wired to that sandbox (another's answers 404 like an unknown one), only for an
 * import of it or a share of it, and only while the environment runs: `ready`, or `stopping` for
 * an `out` share's last pass.
 */
export async function authorizeRelay(deps: Deps, actor: Actor, req: RelayRequest): Promise<AuthorizedRelay> {
  if (actor.kind !== 'sandbox' || !actor.sandboxId) {
    throw new ForbiddenError("only a sandbox's own credential opens relay sockets (berth agent does)");
  }
  if (!req.environment) throw new ValidationError('environment: the environment id is required', 'environment');
  // Each connection of a tunnel is checked: the named statement of the API's reads, not Prisma's.
  const env = req.environment.startsWith('env_') ? await readEnvironment(deps, actor.orgId, req.environment) : undefined;
  if (!env || env.sandboxId !== actor.sandboxId) throw new NotFoundError(`environment ${req.environment}`);
  if (!env.node) throw new ConflictError(`environment ${env.id} is ${env.state} and has no node yet`);
  if (req.kind === 'import') {
    const entry = exportsOf(env).find((e) => e.service === req.service);
    if (!entry) {
      const known = exportsOf(env).map((e) => e.service);
      throw new NotFoundError(
        `service ${req.service ?? '(none given)'} of environment ${env.id} (its services: ${known.join(', ') || 'none'})`,
      );
    }
    requireState(env, ['ready']);
    requireRuntime(env, 'service');
    // Only the port goes to the node: it dials it on the environment's own loopback, from inside.
    return { env, job: { kind: 'import', environment: env.id, service: entry.service, port: parseAddress(entry.target).port } };
  }
  if (req.kind === 'share') {
    const share = sharesOf(env).find((s) => s.name === req.share);
    if (!share) {
      const known = sharesOf(env).map((s) => s.name);
      throw new NotFoundError(`share ${req.share ?? '(none given)'} of environment ${env.id} (its shares: ${known.join(', ') || 'none'})`);
    }
    const final = req.final === '1' || req.final === 'true';
    if (final && share.direction !== 'out') throw new ValidationError('final: only an out share has a last pass', 'final');
    requireState(env, share.direction === 'out' ? ['ready', 'stopping'] : ['ready']);
    const { include, noIgnore } = syncOf(env);
    return {
      env,
      job: {
        kind: 'share',
        environment: env.id,
        share: share.name,
        direction: share.direction,
        envPath: share.envPath,
        sync: { include, noIgnore },
        final,
      },
    };
  }
  throw new ValidationError('kind: must be "import" or "share"', 'kind');
}

function requireState(env: Environment, states: string[]): void {
  if (!states.includes(env.state)) {
    throw new ConflictError(`environment ${env.id} is ${env.state}; this relay needs it ${states.join(' or ')}`);
  }
}

/** The first relay of a sandbox agent for this environment: from now on its release waits for the last `out` pass. */
export async function recordRelayed(deps: Deps, environmentId: string): Promise<void> {
  await deps.prisma.environment.updateMany({ where: { id: environmentId, relayed: null }, data: { relayed: deps.clock.now() } });
}

/** Relay traffic moves the idle time-out only when it would move by more than this (one write a minute at most). */
export const RELAY_ACTIVITY_STEP_MS = 60_000;

/** The step for a lease idle for `idleMs`: a minute, or half the idle time-out when that is shorter. */
export function relayActivityStep(idleMs: number): number {
  return Math.min(RELAY_ACTIVITY_STEP_MS, Math.floor(idleMs / 2));
}

/**
 * Traffic on a relay of a ready environment counts as activity, like a keepalive: its idle
 * time-out moves to now + idle, written only when that moves it by more than relayActivityStep.
 */
export async function recordRelayActivity(deps: Deps, environmentId: string): Promise<void> {
  const env = await deps.prisma.environment.findUnique({
    where: { id: environmentId },
    select: { state: true, idleUntil: true, idleMs: true },
  });
  if (env?.state !== 'ready') return;
  const next = pushedIdleUntil(env, deps.clock.now());
  if (next.getTime() - env.idleUntil.getTime() <= relayActivityStep(env.idleMs)) return;
  await deps.prisma.environment.updateMany({
    where: { id: environmentId, state: 'ready', idleUntil: { lt: next } },
    data: { idleUntil: next },
  });
}

/**
 * Traffic on one socket (a relay, an interactive session) counts as activity of its environment:
 * the returned function checks the database at most once per relayActivityStep(idleMs), never
 * once per message, and never twice at once. Given the environment's idle time-out as just read,
 * it checks only once traffic would move that by more than a step: a new tunnel connection's first
 * bytes then cost no read (on PGlite, one on the server's own thread).
 */
export function activityRecorder(
  deps: Deps,
  env: { id: string; idleMs: number; idleUntil?: Date },
  failed: (error: unknown) => void,
): () => void {
  const { id: environmentId, idleMs, idleUntil } = env;
  const step = relayActivityStep(idleMs);
  let checked = idleUntil ? idleUntil.getTime() - idleMs : Number.NEGATIVE_INFINITY;
  let busy = false;
  return () => {
    const now = deps.clock.now().getTime();
    if (busy || now - checked < step) return;
    busy = true;
    checked = now;
    recordRelayActivity(deps, environmentId)
      .catch(failed)
      .finally(() => {
        busy = false;
      });
  };
}

/** An `out` share's last pass was acknowledged by the agent: the release need not wait for it. */
export async function recordOutSynced(deps: Deps, environmentId: string, share: string): Promise<void> {
  await deps.prisma.$executeRaw`
    UPDATE "Environment" SET "outSynced" = array_append(COALESCE("outSynced", '{}'), ${share})
     WHERE id = ${environmentId} AND state = 'stopping' AND NOT (${share} = ANY(COALESCE("outSynced", '{}')))`;
  deps.background.nudge(ENVIRONMENT_JOB);
}

/**
 * Whether the release of a stopping environment should wait: it is wired to a sandbox whose agent
 * opened a relay for it and still runs (seen within AGENT_LIVE_MS), it has `out` shares the agent has not brought home yet, and
 * it began stopping less than FINAL_SYNC_WAIT_MS ago.
 */
export async function awaitingOutSync(deps: Deps, env: Environment): Promise<boolean> {
  // Only an environment a sandbox agent has worked on (opened a relay for) waits for one.
  if (!env.sandboxId || !env.relayed) return false;
  const pending = sharesOf(env).filter((s) => s.direction === 'out' && !(env.outSynced ?? []).includes(s.name));
  if (pending.length === 0) return false;
  const now = deps.clock.now().getTime();
  const sandbox = await deps.prisma.sandbox.findUnique({ where: { id: env.sandboxId }, select: { lastSeen: true, removed: true } });
  if (!sandbox?.lastSeen || sandbox.removed || now - sandbox.lastSeen.getTime() > AGENT_LIVE_MS) return false;
  const began = await deps.prisma.environmentEvent.findFirst({
    where: { environmentId: env.id, state: 'stopping' },
    orderBy: { seq: 'desc' },
    select: { at: true },
  });
  if (!began) return false;
  return now - began.at.getTime() < FINAL_SYNC_WAIT_MS;
}
