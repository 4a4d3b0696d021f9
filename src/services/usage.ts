// An environment's usage (docs/environments.md, "Usage"): its node samples it every
// USAGE_SAMPLE_MS and hands each sample here (the built-in pool directly, a `berth node` over its
// control channel). Samples are kept in UsageSample, thinned as they arrive: every sample of the
// last five minutes, the first of each minute before, nothing older than an hour. Each one is
// published on the environment's topic, and one over the template's `resources.disk` ends the
// environment failed.
import { z } from 'zod';
import type { Actor, Deps } from '../context';
import type { UsageSample } from '../generated/prisma/client';
import { RUNNING } from '../kernel/environment-states';
import { requireMember } from './access';
import { ENVIRONMENT_JOB, findEnvironment, transition } from './environments';
import { ForbiddenError, ValidationError } from './errors';
import { resourcesOf } from './json-columns';
import { parseSize } from './sizes';

/** One sample as nodes send it and the API shows it. */
export interface Usage {
  cpu: number | null;
  memory: number | null;
  pids: number | null;
  disk: number;
  sampled: Date;
}

export const RECENT_MS = 5 * 60_000;
export const HISTORY_MS = 60 * 60_000;
const MINUTE_MS = 60_000;

const usageTopic = (environmentId: string) => `env:${environmentId}:usage`;

/** What a node may report, bounded: finite, non-negative, within what a machine can have. */
export const UsageReport = z
  .object({
    cpu: z.number().finite().min(0).max(100_000).nullable(),
    memory: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable(),
    pids: z.number().int().min(0).max(100_000_000).nullable(),
    disk: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  })
  .strict();
export type UsageReport = z.infer<typeof UsageReport>;

const toUsage = (row: UsageSample): Usage => ({
  cpu: row.cpu,
  memory: row.memory === null ? null : Number(row.memory),
  pids: row.pids,
  disk: Number(row.disk),
  sampled: row.sampled,
});

/**
 * Samples of the last hour, oldest first: all of the last five minutes, the first of each minute
 * before (the thinning on write may lag a sample behind; this read never does).
 */
export function thin(rows: Usage[], now: Date): Usage[] {
  const recent = now.getTime() - RECENT_MS;
  const oldest = now.getTime() - HISTORY_MS;
  const kept: Usage[] = [];
  let minute = Number.NaN;
  for (const row of rows) {
    const at = row.sampled.getTime();
    if (at < oldest) continue;
    if (at < recent) {
      const m = Math.floor(at / MINUTE_MS);
      if (m === minute) continue;
      minute = m;
    }
    kept.push(row);
  }
  return kept;
}

/** The latest sample of each environment, null before the first (or an hour after the last). */
export async function latestUsage(deps: Deps, environmentId: string): Promise<Usage | null> {
  const row = await deps.prisma.usageSample.findFirst({ where: { environmentId }, orderBy: { sampled: 'desc' } });
  return row ? toUsage(row) : null;
}

export async function usageHistory(deps: Deps, environmentId: string): Promise<Usage[]> {
  const now = deps.clock.now();
  const rows = await deps.prisma.usageSample.findMany({
    where: { environmentId, sampled: { gte: new Date(now.getTime() - HISTORY_MS) } },
    orderBy: { sampled: 'asc' },
  });
  return thin(rows.map(toUsage), now);
}

const Published = z.object({
  cpu: z.number().nullable(),
  memory: z.number().nullable(),
  pids: z.number().nullable(),
  disk: z.number(),
  sampled: z.coerce.date(),
});

/** Each new sample of the environment (on any instance), as it is taken. */
export async function watchUsage(deps: Deps, actor: Actor, idOrName: string): Promise<AsyncIterable<Usage>> {
  requireMember(actor);
  const env = await findEnvironment(deps, actor, idOrName);
  const published = deps.events.subscribe(usageTopic(env.id))[Symbol.asyncIterator]();
  // Listening starts with the first next(): before this returns, so no sample after it is missed.
  const first = published.next();
  return (async function* () {
    try {
      for (let next = await first; !next.done; next = await published.next()) {
        const parsed = Published.safeParse(next.value);
        if (parsed.success) yield parsed.data;
      }
    } finally {
      await published.return?.();
    }
  })();
}

/**
 * A node's sample of one of its environments (`nodeId` null: the built-in pool). A node speaks
 * only for the environments placed on it (ForbiddenError otherwise); a sample of one no longer
 * starting or ready (it ends meanwhile) is dropped. One over the template's disk limit ends it.
 */
export async function recordUsage(deps: Deps, nodeId: string | null, environmentId: unknown, report: unknown): Promise<void> {
  if (typeof environmentId !== 'string' || environmentId.length > 100) {
    throw new ValidationError('environment: must be an environment id', 'environment');
  }
  const parsed = UsageReport.safeParse(report);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = ['sample', ...issue.path.map(String)].join('.');
    throw new ValidationError(`${field}: ${issue.message}`, field);
  }
  const env = await deps.prisma.environment.findUnique({
    where: { id: environmentId },
    select: { id: true, nodeId: true, state: true, resources: true },
  });
  if (!env || env.nodeId !== nodeId) {
    throw new ForbiddenError('a node reports usage only for the environments currently on it');
  }
  if (!(RUNNING as readonly string[]).includes(env.state)) return;
  const sample = await storeUsage(deps, env.id, parsed.data);
  const disk = resourcesOf(env).disk;
  if (disk !== undefined && sample.disk > parseSize(disk)) await endForDisk(deps, env.id, disk, sample.disk);
}

/**
 * Ends the environment as a stop would (its node releases it: the out shares brought home, the
 * snapshot saved), but it ends `failed`, saying why.
 */
async function endForDisk(deps: Deps, id: string, limit: string, used: number): Promise<void> {
  const ended = await transition(deps, id, RUNNING, 'stopping', () => ({
    error: `disk limit ${limit} exceeded (${formatUsed(used)} used)`,
    endsAs: 'failed',
  }));
  if (ended) deps.background.nudge(ENVIRONMENT_JOB);
}

const UNITS = [
  ['TiB', 1024 ** 4],
  ['GiB', 1024 ** 3],
  ['MiB', 1024 ** 2],
  ['KiB', 1024],
] as const;

/** Bytes used, rounded as a person reads them: `41MiB`, `3.2MiB`, `900B`. */
export function formatUsed(bytes: number): string {
  for (const [name, unit] of UNITS) {
    if (bytes < unit) continue;
    const value = bytes / unit;
    return `${value >= 10 ? Math.round(value) : Math.round(value * 10) / 10}${name}`;
  }
  return `${bytes}B`;
}

/** Stores and publishes a sample the node of `environmentId` took. */
export async function storeUsage(deps: Deps, environmentId: string, report: UsageReport): Promise<Usage> {
  const sample: Usage = { ...report, sampled: deps.clock.now() };
  const at = sample.sampled.getTime();
  await deps.prisma.usageSample.upsert({
    where: { environmentId_sampled: { environmentId, sampled: sample.sampled } },
    create: { environmentId, ...sampleColumns(sample) },
    update: sampleColumns(sample),
  });
  // Thinning as it goes keeps at most ~120 rows per environment: one indexed delete per sample.
  await deps.db.pool.query({
    name: 'berth_usage_thin',
    text: `DELETE FROM "UsageSample" u WHERE u."environmentId" = $1 AND (u.sampled < $2 OR (u.sampled < $3 AND EXISTS (
      SELECT 1 FROM "UsageSample" o WHERE o."environmentId" = u."environmentId" AND o.sampled < u.sampled
        AND date_trunc('minute', o.sampled) = date_trunc('minute', u.sampled))))`,
    values: [environmentId, new Date(at - HISTORY_MS), new Date(at - RECENT_MS)],
  });
  await deps.events.publish(usageTopic(environmentId), { ...sample, sampled: sample.sampled.toISOString() });
  return sample;
}

const sampleColumns = (sample: Usage) => ({
  sampled: sample.sampled,
  cpu: sample.cpu,
  memory: sample.memory === null ? null : BigInt(sample.memory),
  pids: sample.pids,
  disk: BigInt(sample.disk),
});
