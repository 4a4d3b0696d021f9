import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import type { BackgroundJob } from '../../kernel/background';
import { formatDuration } from '../../kernel/durations';
import { isEnded, pushedIdleUntil, type SourceOf, STOPPABLE } from '../../kernel/environment-states';
import { CLAIM_JOB, ENVIRONMENT_JOB, WARM_CLAIM_JOB, WARM_JOB } from '../../kernel/job-names';
import { EnvironmentFaultError, QuestionAbandonedError } from '../../protocol/node-bus';
import { type NodeProvider, startBound } from '../nodes';
import { claimQueued } from './claim';
import { pruneEnvironmentLogs } from './log';
import { awaitingOutSync } from './relay';
import { transition } from './transitions';
import { HISTORY_MS } from './usage';
import { explainWaiting } from './waiting';

/** A node's work on one environment (prepare, release) takes minutes at most; older claims are from a dead instance. */
const CLAIM_MS = 10 * 60_000;

/**
 * Takes the environment's node work for this instance, so two instances never prepare or
 * release the same environment at once (a release saves snapshots). Transitions clear it.
 */
async function claimWork(deps: Deps, id: string, state: string): Promise<Date | null> {
  const now = deps.clock.now();
  const { count } = await deps.prisma.environment.updateMany({
    where: { id, state, OR: [{ workClaim: null }, { workClaim: { lt: new Date(now.getTime() - CLAIM_MS) } }] },
    data: { workClaim: now },
  });
  return count === 1 ? now : null;
}

/**
 * Gives the work back (this instance stops while its node has not answered): the next instance
 * to look takes it at once, instead of after CLAIM_MS. The environment stays as it was.
 */
async function giveBackWork(deps: Deps, id: string, claimed: Date): Promise<void> {
  await deps.prisma.environment.updateMany({ where: { id, workClaim: claimed }, data: { workClaim: null } });
}

/** Starting environments whose start time has passed: prepared, then ready; or failed past the bound. */
async function advanceStarting(deps: Deps, provider: NodeProvider): Promise<void> {
  const now = deps.clock.now();
  const due = await deps.prisma.$queryRaw<{ id: string; nodeId: string | null }[]>`
    SELECT id, "nodeId" FROM "Environment"
     WHERE state = 'starting' AND starting + ("startMs" * interval '1 millisecond') <= ${now}
     ORDER BY starting`;
  // Each node prepares on its own: one waiting for a slow node holds up no other. A prepare
  // still under way after PREPARE_WAIT_MS (lifecycle commands, a pull) goes on without holding up
  // the job's other work (time-outs, stops); it keeps its environment's work claim meanwhile.
  const prepares = Promise.all(
    due.map(({ id }) =>
      prepareOne(deps, provider, id, now).catch((error: unknown) => deps.log(`preparing environment ${id} failed`, error)),
    ),
  );
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([prepares, new Promise<void>((resolve) => (timer = setTimeout(resolve, PREPARE_WAIT_MS)))]);
  clearTimeout(timer);
}

/** How long the environment job waits for the prepares it started before going on with its other work. */
const PREPARE_WAIT_MS = 5_000;

/** `taken`: the environment as its claim left it, its work already taken (a warm claim). */
async function prepareOne(deps: Deps, provider: NodeProvider, id: string, now: Date, taken?: Environment): Promise<void> {
  const env = taken ?? (await deps.prisma.environment.findUnique({ where: { id } }));
  if (env?.state !== 'starting' || !env.starting) return;
  const bound = startBound(env);
  if (now.getTime() - env.starting.getTime() > bound) {
    await fail(deps, provider, env, `did not become ready within ${formatDuration(bound)} on node ${env.node}`, 'starting');
    return;
  }
  const claimed = taken?.workClaim ?? (await claimWork(deps, id, 'starting'));
  if (!claimed) return;
  let runtime: string;
  try {
    runtime = await provider.prepare(deps, env);
  } catch (error) {
    if (error instanceof QuestionAbandonedError) return giveBackWork(deps, id, claimed);
    // A lifecycle command that failed says so itself (`postCreateCommand exited 3`): not the node's fault.
    const why =
      error instanceof EnvironmentFaultError
        ? error.message
        : `node ${env.node} could not prepare the environment: ${(error as Error).message}`;
    await fail(deps, provider, env, why, 'starting');
    return;
  }
  const ready = await transition(deps, id, ['starting'], 'ready', (at, current) => ({
    ready: at,
    runtime,
    readyMs: at.getTime() - current.created.getTime(),
    idleUntil: pushedIdleUntil(current, at),
  }));
  if (ready?.readyMs != null) deps.metrics.environmentStart.observe({ template: ready.template, pool: ready.pool }, ready.readyMs / 1000);
  // A claimed or evicted warm container is made again on another free slot: only now, so making it
  // does not compete with the claim for the engine, and a moment later, so the refill's
  // transaction does not hold up the lease's first command on the database (PGlite's one connection).
  if (env.warmSlot) deps.background.nudge(WARM_JOB, REFILL_AFTER_MS);
  // Stopped while it was being prepared: what the preparation wrote after the release is wiped.
  if (!ready) await discardIfEnded(deps, provider, id);
}

/** How long after a warm claim's ready its slot's refill is looked at (the warm job's own round is 2 s). */
const REFILL_AFTER_MS = 250;

/** Ends an environment as failed, then wipes what its node holds of it. */
async function fail(deps: Deps, provider: NodeProvider, env: Environment, error: string, from: SourceOf<'failed'>): Promise<void> {
  await transition(deps, env.id, [from], 'failed', (at) => ({ error, stopped: at }));
  await discardIfEnded(deps, provider, env.id);
}

async function discardIfEnded(deps: Deps, provider: NodeProvider, id: string): Promise<void> {
  const env = await deps.prisma.environment.findUnique({ where: { id } });
  if (env && isEnded(env.state)) await provider.discard(deps, env);
}

/** Hard time-outs end any live lease; idle time-outs end ready ones. Both say so in `error`. */
async function enforceTimeouts(deps: Deps): Promise<void> {
  const now = deps.clock.now();
  const hard = await deps.prisma.environment.findMany({
    where: { state: { in: [...STOPPABLE] }, expires: { lte: now } },
    select: { id: true, hardMs: true },
  });
  for (const env of hard) {
    await transition(deps, env.id, STOPPABLE, 'stopping', () => ({
      error: `hard time-out: the ${formatDuration(env.hardMs)} lease ended`,
    }));
  }
  const idle = await deps.prisma.environment.findMany({
    where: { state: 'ready', idleUntil: { lte: now } },
    select: { id: true, idleMs: true },
  });
  for (const env of idle) {
    await transition(deps, env.id, ['ready'], 'stopping', () => ({
      error: `idle time-out: no activity for ${formatDuration(env.idleMs)}`,
    }));
  }
}

/**
 * Stopping environments: released by their node, then stopped and the node freed. Answers the
 * ones still waiting for their sandbox agent's last `out` pass (a reason leases wait: waiting.ts).
 */
async function finishStopping(deps: Deps, provider: NodeProvider): Promise<string[]> {
  const stopping = await deps.prisma.environment.findMany({ where: { state: 'stopping' }, orderBy: { created: 'asc' } });
  const outSync: string[] = [];
  const release = async (env: Environment) => {
    if (await releaseOne(deps, provider, env)) outSync.push(env.id);
  };
  await Promise.all(stopping.map(release));
  return outSync;
}

/** Releases one stopping environment; true while it waits for its out shares instead. */
async function releaseOne(deps: Deps, provider: NodeProvider, env: Environment): Promise<boolean> {
  // A sandbox agent that runs gets its chance to bring the out shares home first (bounded).
  if (await awaitingOutSync(deps, env)) return true;
  const claimed = await claimWork(deps, env.id, 'stopping');
  if (!claimed) return false;
  try {
    await provider.release(deps, env);
  } catch (error) {
    if (error instanceof QuestionAbandonedError) {
      await giveBackWork(deps, env.id, claimed);
      return false;
    }
    await fail(deps, provider, env, `node ${env.node} could not release the environment: ${(error as Error).message}`, 'stopping');
    return false;
  }
  // A system end for a fault of the environment's own (its disk limit) ends failed; `error` says why.
  await transition(deps, env.id, ['stopping'], env.endsAs === 'failed' ? 'failed' : 'stopped', (at) => ({ stopped: at }));
  return false;
}

/**
 * Deletes event-log rows nobody can still be catching up on, usage samples past the hour of
 * history (those of ended environments: a live one's are thinned as its samples arrive), and the
 * logs of environments ended a week ago.
 */
async function pruneEvents(deps: Deps): Promise<void> {
  const now = deps.clock.now().getTime();
  await deps.prisma.environmentEvent.deleteMany({ where: { at: { lt: new Date(now - 24 * 60 * 60 * 1000) } } });
  await deps.prisma.usageSample.deleteMany({ where: { sampled: { lt: new Date(now - HISTORY_MS) } } });
  await pruneEnvironmentLogs(deps);
}

export function environmentJob(provider: NodeProvider): BackgroundJob {
  return {
    name: ENVIRONMENT_JOB,
    intervalMs: 1000,
    async run(deps) {
      await enforceTimeouts(deps);
      const outSync = await finishStopping(deps, provider);
      await claimQueued(deps);
      // Before the (possibly long) preparations: what still waits says why at once.
      await explainWaiting(deps, outSync);
      await advanceStarting(deps, provider);
    },
  };
}

/**
 * Claims queued leases the moment one is created or a warm container is ready: apart from the
 * environment job, whose release of another lease (seconds on a busy engine) would otherwise hold
 * up a claim of milliseconds. A claim is the same SKIP LOCKED transaction as between instances;
 * the environment job still claims every second, so this interval is only a backstop.
 */
export const claimJob: BackgroundJob = {
  name: CLAIM_JOB,
  intervalMs: 60_000,
  async run(deps) {
    await claimQueued(deps);
  },
};

/**
 * Readies the leases that took a warm container (claimIn), apart from the environment job's longer
 * work: nudged by each claim, and at start for any an instance that stopped did not ready. Each is
 * taken with claimWork, so it and the environment job never prepare one twice.
 */
export function warmClaimJob(provider: NodeProvider): BackgroundJob {
  return {
    name: WARM_CLAIM_JOB,
    intervalMs: 60_000,
    async run(deps) {
      const claimed = await deps.prisma.environment.findMany({
        where: { state: 'starting', warmClaimed: true, startMs: 0, workClaim: null },
      });
      await Promise.all(
        claimed.map((env) =>
          prepareOne(deps, provider, env.id, deps.clock.now(), env).catch((error: unknown) =>
            deps.log(`preparing environment ${env.id} failed`, error),
          ),
        ),
      );
    },
  };
}

export const eventPruneJob: BackgroundJob = { name: 'environment-events', intervalMs: 60 * 60 * 1000, run: pruneEvents };
