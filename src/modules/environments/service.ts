import type { Actor, Deps } from '../../app/context';
import type { Environment, Exec } from '../../generated/prisma/client';
import { principalOf, requireMember, requireOwner } from '../../kernel/access';
import { parseDuration } from '../../kernel/durations';
import type { EnvironmentEnds } from '../../kernel/environment-ends';
import { isStoppable, pushedIdleUntil, STOPPABLE } from '../../kernel/environment-states';
import { ConflictError, DomainError, NotFoundError, UnavailableError, ValidationError } from '../../kernel/errors';
import { CLAIM_JOB, ENVIRONMENT_JOB } from '../../kernel/job-names';
import { validateLabels, validateProjectName, validateRestoreKeys, validateSnapshotKey } from '../../kernel/labels';
import { generateName, newId } from '../../kernel/names';
import { type Page, type PageArgs, pageOf, pageQuery } from '../../kernel/paging';
import { lockFor, type Tx } from '../../platform/db';
import { topics } from '../../platform/events';
import { type AuditWho, auditRow, checkAudited, recordAudit } from '../audit';
import { needOf } from '../nodes';
import { orgLimits } from '../organizations';
import { admitUnderQuota, quotasFor } from '../quotas';
import { notifySandboxConfig, planWiring, sandboxConfig, type WiringInput } from '../sandboxes';
import { findTemplate, MAX_HARD_MS, poolOf, warmSpecHash } from '../templates';
import { environmentData, nudgeWebhooks, webhookDeliveries } from '../webhooks';
import { afterClaim, claimIn } from './claim';
import { announceEnvironment, recordEvent } from './events';
import { type EnvironmentFilterInput, environmentFilter } from './filter';
import { logTransition, transition } from './transitions';
import { buildingText, waitingOfNew } from './waiting';

export const DEFAULT_PROJECT = 'default';

export interface CreateEnvironmentInput extends WiringInput {
  template: string;
  labels?: unknown;
  idle?: string | null;
  hard?: string | null;
  project?: string | null;
  snapshot?: string | null;
  restore?: string[] | null;
}

/** Picks the lease's time-outs: request, else quota, else template; never past a quota or 24h. */
function timeouts(
  input: CreateEnvironmentInput,
  template: { idleMs: number; hardMs: number },
  quotas: { template: string; idleMs: number; hardMs: number }[],
) {
  const own = quotas.find((q) => q.template !== '*');
  const hardCap = Math.min(MAX_HARD_MS, ...quotas.map((q) => q.hardMs));
  const idleCap = Math.min(hardCap, ...quotas.map((q) => q.idleMs));
  const hardMs = input.hard ? parseDuration(input.hard, 'hard') : Math.min(own?.hardMs ?? template.hardMs, hardCap);
  const idleMs = input.idle ? parseDuration(input.idle, 'idle') : Math.min(own?.idleMs ?? template.idleMs, idleCap, hardMs);
  if (hardMs <= 0) throw new ValidationError('hard must be a positive duration', 'hard');
  if (idleMs <= 0) throw new ValidationError('idle must be a positive duration', 'idle');
  if (hardMs > hardCap) {
    throw new ValidationError(`hard: "${input.hard}" exceeds the ${hardCap === MAX_HARD_MS ? '24h maximum' : 'quota'}`, 'hard');
  }
  if (idleMs > idleCap) throw new ValidationError(`idle: "${input.idle}" exceeds the quota`, 'idle');
  if (idleMs > hardMs) throw new ValidationError('idle must not exceed hard', 'idle');
  return { idleMs, hardMs };
}

/**
 * POST /v1/environments: validates, wires to the sandbox, admits under quota and into the pool's
 * queue, all in one transaction. A full queue still records the environment, as `failed`, and
 * then answers 503.
 */
export async function createEnvironment(deps: Deps, actor: Actor, input: CreateEnvironmentInput) {
  requireMember(actor);
  const template = await findTemplate(deps.prisma, actor.orgId, input.template);
  if (template.status === 'failed') {
    throw new ConflictError(
      `template ${template.name} version ${template.version} cannot be leased: ${template.error ?? 'its image did not build'}`,
    );
  }
  const labels = validateLabels(input.labels ?? {});
  const project = input.project === undefined || input.project === null ? DEFAULT_PROJECT : validateProjectName(input.project);
  const snapshot = input.snapshot === undefined || input.snapshot === null ? null : validateSnapshotKey(input.snapshot);
  const restore = validateRestoreKeys(input.restore ?? (snapshot ? [snapshot] : []));
  const quotas = await quotasFor(deps.prisma, actor.orgId, template.name);
  const { idleMs, hardMs } = timeouts(input, template, quotas);
  const pool = poolOf(deps, template.pool);

  let hooked = false;
  const { env, claim } = await deps.prisma.$transaction(async (tx) => {
    const wiring = await planWiring(tx, actor, template, input);
    await admitUnderQuota(tx, actor.orgId, template.name, quotas);
    // Admissions to one pool take turns so `maxQueued` holds across instances.
    await lockFor(tx, `berth:queue:${pool.name}`);
    if (pool.hotNodes > 0) await admitUnderPoolShare(deps, tx, actor.orgId, pool);
    const queued = await tx.environment.count({ where: { pool: pool.name, state: 'pending' } });
    const full = queued >= pool.maxQueued;
    // With nothing waiting ahead of it in its pool, the lease is claimed in this transaction
    // (a warm container of its template, else a free slot), instead of by the claim job after it.
    const claimNow = !full && queued === 0 && template.status !== 'building';
    // Why it waits, from the start (the environment job keeps it up to date): written with the
    // lease, one version, instead of a second one a moment later.
    const waitingNow = () => waitingOfNew(deps, tx, pool, actor.orgId, queued, needOf(template.resources));
    const waiting = full || claimNow ? null : template.status === 'building' ? buildingText(template) : await waitingNow();
    const now = deps.clock.now();
    let created = await tx.environment.create({
      data: {
        id: newId('env'),
        orgId: actor.orgId,
        name: await uniqueName(tx),
        template: template.name,
        templateVersion: template.version,
        pool: pool.name,
        state: full ? 'failed' : 'pending',
        error: full ? `the queue of pool ${pool.name} is full (${pool.maxQueued} waiting)` : null,
        waiting,
        stopped: full ? now : null,
        sandboxId: wiring.sandboxId,
        labels,
        project,
        createdBy: actor.name,
        owner: principalOf(actor),
        created: now,
        expires: new Date(now.getTime() + hardMs),
        idleUntil: new Date(now.getTime() + idleMs),
        idleMs,
        hardMs,
        startMs: template.startMs,
        exports: wiring.exports,
        shares: wiring.shares,
        sync: wiring.sync,
        snapshot,
        restore,
        // What the node runs it with, fixed at creation like startMs.
        image: template.image ?? null,
        resources: template.resources,
        network: template.network,
        workdir: template.workdir,
        envVars: template.env,
        user: template.user ?? null,
        containerUser: template.containerUser ?? null,
        lifecycle: template.lifecycle,
        specHash: template.image ? warmSpecHash(template) : null,
        version: 1,
      },
    });
    // The claim's locks come before the event log's, in the order the claim job takes them.
    const claim = claimNow ? await claimIn(deps, tx, pool, created) : null;
    if (claimNow && !claim) created = await tx.environment.update({ where: { id: created.id }, data: { waiting: await waitingNow() } });
    hooked = await recordEvent(
      tx,
      created,
      webhookDeliveries(created.orgId, 'environment.created', environmentData(created), now, created.id),
    );
    if (claim) hooked = (await logTransition(tx, claim.env, now)) || hooked;
    await recordAudit(deps, tx, actor, {
      action: 'environment.create',
      target: { kind: 'environment', id: created.id },
      detail: { name: created.name, template: created.template, project, state: created.state },
    });
    return { env: created, claim };
  });
  if (claim) {
    await afterClaim(deps, { ...claim, hooked: claim.hooked || hooked });
  } else {
    if (env.state !== 'failed') deps.background.nudge(CLAIM_JOB);
    await announceEnvironment(deps, env.orgId);
    nudgeWebhooks(deps, hooked);
    if (env.state === 'failed') {
      throw new UnavailableError(`${env.error}; environment ${env.id} (${env.name}) was marked failed`, 'queue_full');
    }
    deps.background.nudge(ENVIRONMENT_JOB);
    if (env.sandboxId) await notifySandboxConfig(deps, env.orgId, env.sandboxId);
  }
  // As accepted (pending, version 1), also when claimed since: its later versions are watched or read.
  if (!env.sandboxId) return { environment: env, sandboxConfig: null };
  return { environment: env, sandboxConfig: await sandboxConfig(deps, env.orgId, env.sandboxId, { keyring: false }) };
}

/**
 * On a pool every organization leases from (it has hot nodes), one organization may have at most
 * its share (POOL_ORG_SHARE, or its own) of the pool's queue waiting: 429 pool_share past it. Its
 * share of the hot nodes is kept by the claim (src/modules/environments/claim.ts).
 */
async function admitUnderPoolShare(deps: Deps, tx: Tx, orgId: string, pool: { name: string; maxQueued: number }): Promise<void> {
  const { poolShare } = await orgLimits(deps, tx, orgId);
  // A whole share is no cap: the queue's own bound (503 queue_full) applies.
  if (poolShare >= 1) return;
  const cap = Math.max(1, Math.ceil(poolShare * pool.maxQueued));
  const waiting = await tx.environment.count({ where: { pool: pool.name, state: 'pending', orgId } });
  if (waiting >= cap) {
    throw new DomainError(
      `your organization already has ${waiting} leases waiting in pool ${pool.name}, its share (${poolShare}) of the queue; wait for some to start or stop some`,
      'pool_share',
    );
  }
}

async function uniqueName(tx: Tx): Promise<string> {
  for (;;) {
    const name = generateName();
    if (!(await tx.environment.findUnique({ where: { name }, select: { id: true } }))) return name;
  }
}

/** An environment by id (`env_…`) or by name, within the caller's organization. */
export async function findEnvironment(deps: Deps, actor: Actor, idOrName: string): Promise<Environment> {
  requireMember(actor);
  const env = await readEnvironment(deps, actor.orgId, idOrName);
  if (!env) throw new NotFoundError(`environment ${idOrName}`);
  return env;
}

// The hottest reads of the API: named statements on the raw pool (prepared once per connection,
// so PostgreSQL plans each once) instead of Prisma queries. Columns are the model's fields; a
// command's read adds whether its node's engine answers (the exec path: one statement).
const ENVIRONMENT_READS = {
  plain: { name: 'berth_environment', select: 'SELECT e.* FROM "Environment" e' },
  command: {
    name: 'berth_command_environment',
    select: 'SELECT e.*, n."engineError" AS "nodeEngineError" FROM "Environment" e LEFT JOIN "RemoteNode" n ON n.id = e."nodeId"',
  },
} as const;

type EnvironmentRow = Omit<Environment, 'queueSeq'> & { queueSeq: string };

/**
 * The environment with this id (`env_…`) or name in the organization, as Prisma would return it
 * (with `nodeEngineError` when read for a command).
 */
export async function readEnvironment<R extends EnvironmentRow = EnvironmentRow>(
  deps: Deps,
  orgId: string,
  idOrName: string,
  read: keyof typeof ENVIRONMENT_READS = 'plain',
): Promise<(Omit<R, 'queueSeq'> & { queueSeq: bigint }) | undefined> {
  const by = idOrName.startsWith('env_') ? 'id' : 'name';
  const { name, select } = ENVIRONMENT_READS[read];
  const { rows } = await deps.db.pool.query<R>({
    name: `${name}_by_${by}`,
    text: `${select} WHERE e.${by} = $1 AND e."orgId" = $2`,
    values: [idOrName, orgId],
  });
  const row = rows[0];
  // pg answers int8 as a string; Prisma's BigInt is a bigint.
  return row && Object.assign(row, { queueSeq: BigInt(row.queueSeq) });
}

/**
 * findEnvironment for a command: the environment, and `engineError` when its node says its engine
 * does not answer, read together.
 */
export async function findCommandEnvironment(
  deps: Deps,
  actor: Actor,
  idOrName: string,
): Promise<{ env: Environment; engineError: string | null }> {
  requireMember(actor);
  const row = await readEnvironment<EnvironmentRow & { nodeEngineError: string | null }>(deps, actor.orgId, idOrName, 'command');
  if (!row) throw new NotFoundError(`environment ${idOrName}`);
  const { nodeEngineError: engineError, ...env } = row;
  return { env, engineError };
}

/** What the node side may do to environments (src/kernel/environment-ends.ts), for `deps.ends`. */
export function environmentEnds(deps: Deps): EnvironmentEnds {
  return {
    fail: (id, from, error) => transition(deps, id, from, 'failed', (at) => ({ error, stopped: at })),
    stop: (id, from, error) => transition(deps, id, from, 'stopping', () => ({ error })),
  };
}

/** DELETE /v1/environments/{id}: asks it to stop; answers the environment as it then is. */
export async function stopEnvironment(deps: Deps, actor: Actor, idOrName: string): Promise<Environment> {
  const env = await findEnvironment(deps, actor, idOrName);
  await checkAudited(deps, actor, { action: 'environment.delete', target: { kind: 'environment', id: env.id } }, () =>
    requireOwner(actor, env, `environment ${env.name}`),
  );
  if (!isStoppable(env.state)) return env;
  const stopping = await transition(deps, env.id, STOPPABLE, 'stopping', () => ({ stoppedBy: actor.name }), {
    actor,
    action: 'environment.delete',
  });
  deps.background.nudge(ENVIRONMENT_JOB);
  return stopping ?? findEnvironment(deps, actor, env.id);
}

function assertLive(env: Environment): void {
  if (!isStoppable(env.state)) {
    throw new ConflictError(`environment ${env.name} is ${env.state}`, 'invalid_transition');
  }
}

/** POST /v1/environments/{id}/keepalive. */
export async function keepAlive(deps: Deps, actor: Actor, idOrName: string): Promise<Environment> {
  const env = await findEnvironment(deps, actor, idOrName);
  requireOwner(actor, env, `environment ${env.name}`);
  assertLive(env);
  return deps.prisma.$transaction(async (tx) => {
    const kept = await tx.environment.update({ where: { id: env.id }, data: { idleUntil: pushedIdleUntil(env, deps.clock.now()) } });
    await recordAudit(deps, tx, actor, { action: 'environment.keepalive', target: { kind: 'environment', id: env.id } });
    return kept;
  });
}

export interface ExecInput {
  command: string;
  exitCode: number;
  durationMs: number;
}

const MAX_COMMAND = 64 * 1024;

/** POST /v1/environments/{id}/execs: logs a command and counts as activity. */
export async function recordExec(deps: Deps, actor: Actor, idOrName: string, input: ExecInput) {
  requireMember(actor);
  if (input.command.trim() === '') throw new ValidationError('command must not be empty', 'command');
  if (input.command.length > MAX_COMMAND) throw new ValidationError(`command is longer than ${MAX_COMMAND} characters`, 'command');
  if (!Number.isInteger(input.exitCode) || input.exitCode < -2147483648 || input.exitCode > 2147483647) {
    throw new ValidationError('exitCode must be a 32-bit integer', 'exitCode');
  }
  if (!Number.isInteger(input.durationMs) || input.durationMs < 0 || input.durationMs > 2147483647)
    throw new ValidationError('durationMs must be an integer from 0 to 2147483647', 'durationMs');
  const env = await findEnvironment(deps, actor, idOrName);
  await checkAudited(deps, actor, { action: 'exec.run', target: { kind: 'environment', id: env.id } }, () =>
    requireOwner(actor, env, `environment ${env.name}`),
  );
  assertLive(env);
  return recordExecRow(deps, actor, env.id, input);
}

// A command's record in one statement (the hot path of every exec): its row, the environment's
// idle time-out pushed back (pushedIdleUntil's rule) and its audit event, all or none.
const RECORD_EXEC = `
  WITH env AS (
    UPDATE "Environment" SET "idleUntil" = GREATEST("idleUntil", $2::timestamptz + "idleMs" * interval '1 millisecond')
     WHERE id = $1 RETURNING id),
  exec AS (
    INSERT INTO "Exec" ("environmentId", time, actor, command, "exitCode", "durationMs")
    SELECT env.id, $2, $3, $4, $5, $6 FROM env RETURNING *),
  audit AS (
    INSERT INTO "AuditEvent" (id, "orgId", created, action, "actorKind", "actorId", "actorName", "targetKind", "targetId", address, outcome, detail)
    SELECT $7, $8, $2, $9, $10, $11, $12, $13, $14, $15, $16, jsonb_build_object('exec', exec.id) || $17::jsonb FROM exec)
  SELECT * FROM exec`;

/** Writes an Exec row for the caller (counts as activity) and tells the execs subscribers. */
export async function recordExecRow(deps: Deps, actor: Actor | AuditWho, envId: string, input: ExecInput): Promise<Exec> {
  const audit = auditRow(deps, actor, {
    action: 'exec.run',
    target: { kind: 'environment', id: envId },
    detail: { command: input.command, exitCode: input.exitCode },
  });
  const { rows } = await deps.db.pool.query<Exec>({
    name: 'berth_record_exec',
    text: RECORD_EXEC,
    values: [
      envId,
      audit.created,
      actor.name,
      input.command,
      input.exitCode,
      input.durationMs,
      audit.id,
      audit.orgId,
      audit.action,
      audit.actorKind,
      audit.actorId,
      audit.actorName,
      audit.targetKind,
      audit.targetId,
      audit.address,
      audit.outcome,
      JSON.stringify(audit.detail),
    ],
  });
  const exec = rows[0];
  if (!exec) throw new NotFoundError(`environment ${envId}`);
  await deps.events.publish(topics.execs(envId), { id: exec.id });
  return exec;
}

export async function listExecs(deps: Deps, actor: Actor, idOrName: string) {
  requireMember(actor);
  const env = await findEnvironment(deps, actor, idOrName);
  return deps.prisma.exec.findMany({ where: { environmentId: env.id }, orderBy: { id: 'desc' } });
}

/**
 * Every command recorded for the environment from now on (on any instance). With `after` (the
 * newest id the caller has), first the ones recorded since, so none falls between a caller's
 * list and its subscription.
 */
export async function watchExecs(deps: Deps, actor: Actor, idOrName: string, after?: number | null): Promise<AsyncIterable<Exec>> {
  requireMember(actor);
  const env = await findEnvironment(deps, actor, idOrName);
  const recorded = deps.events.subscribe(topics.execs(env.id))[Symbol.asyncIterator]();
  // Listening starts with the first next(), before the catch-up read.
  const first = recorded.next();
  return (async function* () {
    try {
      const replayed = new Set<number>();
      if (after !== undefined && after !== null) {
        const missed = await deps.prisma.exec.findMany({ where: { environmentId: env.id, id: { gt: after } }, orderBy: { id: 'asc' } });
        for (const exec of missed) {
          replayed.add(exec.id);
          yield exec;
        }
      }
      for (let next = await first; !next.done; next = await recorded.next()) {
        const id = next.value.id;
        if (replayed.has(id)) continue;
        const exec = await deps.prisma.exec.findUnique({ where: { id } });
        if (exec) yield exec;
      }
    } finally {
      await recorded.return?.();
    }
  })();
}

/** A page of the organization's environments, newest first, by the one environment filter (filter.ts). */
export async function listEnvironments(
  deps: Deps,
  actor: Actor,
  input: PageArgs & { filter?: EnvironmentFilterInput | null },
): Promise<Page<Environment>> {
  requireMember(actor);
  const page = pageQuery(input, 'env');
  const { where } = await environmentFilter(deps, actor, input.filter ?? {});
  const rows = await deps.prisma.environment.findMany({ where: { AND: [where, page.where] }, orderBy: page.orderBy, take: page.take });
  return pageOf(rows, page.size);
}
