// An environment's usage (docs/environments.md, "Usage"): its node samples it every
// USAGE_SAMPLE_MS and hands each sample here over its control channel (the built-in node too). Samples are kept in UsageSample, thinned as they arrive: every sample of the
// last five minutes, the first of each minute before, nothing older than an hour. Each one is
// published on the environment's topic, and one over the template's `resources.disk` ends the
// environment failed.

import DataLoader from 'dataloader';
import { z } from 'zod';
import type { Actor, Deps } from '../../app/context';
import type { UsageSample } from '../../generated/prisma/client';
import { requireMember } from '../../kernel/access';
import { Channel } from '../../kernel/channel';
import { isEnded, RUNNING } from '../../kernel/environment-states';
import { ForbiddenError } from '../../kernel/errors';
import { ENVIRONMENT_JOB } from '../../kernel/job-names';
import { resourcesOf } from '../../kernel/json-columns';
import { parseSize } from '../../kernel/sizes';
import { topics } from '../../platform/events';
import type { UsageReport } from '../../protocol/node-channel';
import { joinEnvironmentFeed } from './feed';
import { findEnvironment } from './service';
import { transition } from './transitions';

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

/**
 * The latest sample of each of the environments, in one query; those without one (before their
 * first sample, or an hour after their last) are absent.
 */
export async function latestUsages(deps: Deps, environmentIds: readonly string[]): Promise<Map<string, Usage>> {
  if (environmentIds.length === 0) return new Map();
  // DISTINCT ON walks the (environmentId, sampled) primary key: one row per environment read.
  const rows = await deps.prisma.$queryRaw<UsageSample[]>`
    SELECT DISTINCT ON ("environmentId") * FROM "UsageSample"
     WHERE "environmentId" = ANY(${[...environmentIds]}::text[])
     ORDER BY "environmentId", sampled DESC`;
  return new Map(rows.map((row) => [row.environmentId, toUsage(row)]));
}

/**
 * Batches the `usage` of every environment one GraphQL execution resolves (a list of them) into
 * one query. No cache: a subscription runs its selection again for each event with the same
 * loader, and must see the samples as they are then.
 */
export function latestUsageLoader(deps: Deps): DataLoader<string, Usage | null> {
  return new DataLoader(
    async (ids) => {
      const latest = await latestUsages(deps, ids);
      return ids.map((id) => latest.get(id) ?? null);
    },
    { cache: false, maxBatchSize: 500 },
  );
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

/**
 * Each new sample of the environment (on any instance), as it is taken; the stream ends once the
 * environment has ended (at once when it already had: an ended environment is sampled no more).
 */
export async function watchUsage(deps: Deps, actor: Actor, idOrName: string): Promise<AsyncIterable<Usage>> {
  requireMember(actor);
  const env = await findEnvironment(deps, actor, idOrName);
  let closed = false;
  let stopSamples: () => void = () => undefined;
  let leaveFeed: () => void = () => undefined;
  const channel = new Channel<Usage>(() => {
    closed = true;
    stopSamples();
    leaveFeed();
  });
  stopSamples = deps.events.listen(topics.usage(env.id), (payload) => {
    const parsed = Published.safeParse(payload);
    if (parsed.success) channel.push(parsed.data);
  });
  const leave = await joinEnvironmentFeed(deps, env.orgId, (events) => {
    if (events.some((e) => e.environmentId === env.id && isEnded(e.environment.state))) channel.end();
  });
  leaveFeed = leave;
  if (closed) leave();
  // Read after joining the feed: an end committed before is seen here, one after by the feed.
  const now = await deps.prisma.environment.findUnique({ where: { id: env.id }, select: { state: true } });
  if (!now || isEnded(now.state)) channel.end();
  return channel;
}

/**
 * A node's sample of one of its environments. A node speaks
 * only for the environments placed on it (ForbiddenError otherwise); a sample of one no longer
 * starting or ready (it ends meanwhile) is dropped. One over the template's disk limit ends it.
 */
export async function recordUsage(deps: Deps, nodeId: string, environmentId: string, report: UsageReport): Promise<void> {
  // (Parsed on the node's channel: src/protocol/node-channel.ts.)
  const env = await deps.prisma.environment.findUnique({
    where: { id: environmentId },
    select: { id: true, nodeId: true, state: true, resources: true },
  });
  if (!env || env.nodeId !== nodeId) {
    throw new ForbiddenError('a node reports usage only for the environments currently on it');
  }
  if (!(RUNNING as readonly string[]).includes(env.state)) return;
  const sample = await storeUsage(deps, env.id, report);
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
  await deps.events.publish(topics.usage(environmentId), { ...sample, sampled: sample.sampled.toISOString() });
  return sample;
}

const sampleColumns = (sample: Usage) => ({
  sampled: sample.sampled,
  cpu: sample.cpu,
  memory: sample.memory === null ? null : BigInt(sample.memory),
  pids: sample.pids,
  disk: BigInt(sample.disk),
});
