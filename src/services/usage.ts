// An environment's usage (docs/environments.md, "Usage"): its node samples it every
// USAGE_SAMPLE_MS and hands each sample here (the built-in pool directly, a `berth node` over its
// control channel). Samples are kept in UsageSample, thinned as they arrive: every sample of the
// last five minutes, the first of each minute before, nothing older than an hour. Each one is
// published on the environment's topic, and one over the template's `resources.disk` ends the
// environment failed.
import { z } from 'zod';
import type { Actor, Deps } from '../context';
import type { UsageSample } from '../generated/prisma/client';
import { requireMember } from './access';
import { findEnvironment } from './environments';

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

/** `GET /v1/environments/{id}/usage`: the latest sample and the last hour's. */
export async function readUsage(deps: Deps, actor: Actor, idOrName: string): Promise<{ usage: Usage | null; history: Usage[] }> {
  const env = await findEnvironment(deps, actor, idOrName);
  const history = await usageHistory(deps, env.id);
  return { usage: history.at(-1) ?? (await latestUsage(deps, env.id)), history };
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
