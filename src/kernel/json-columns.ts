// The JSON columns of the database, one typed shape each. Writes pass these types straight to
// Prisma (they are plain JSON); reads go through the parsers here once, where a row leaves the
// database, instead of casting.
import { z } from 'zod';
import type { Environment, Prisma } from '../generated/prisma/client';

/** Environment and artifact `labels`. */
export const Labels = z.record(z.string(), z.string());
export type Labels = z.infer<typeof Labels>;

/** An environment's service exported to its sandbox (`exports`). */
export const Export = z.object({
  service: z.string(),
  /** Loopback address on the sandbox, `127.0.0.1:<port>`. */
  listen: z.string(),
  /** The service's address inside the environment (the template's). */
  target: z.string(),
});
export type Export = z.infer<typeof Export>;

/** A template share as wired to a sandbox folder (`shares`). */
export const WiredShare = z.object({
  name: z.string(),
  direction: z.enum(['in', 'out']),
  envPath: z.string(),
  /** Folder on the sandbox, relative to the agent's folder (`.` is the folder itself). */
  localPath: z.string(),
  /** Destinations of extra files, relative to the share folder. */
  files: z.array(z.string()),
});
export type WiredShare = z.infer<typeof WiredShare>;

/** An environment's sync rules (`sync`). */
export const SyncSpec = z.object({
  include: z.array(z.string()).default([]),
  noIgnore: z.boolean().default(false),
  /** Extra files: `<share>/<path in the share>` to a source path relative to the agent's folder. */
  files: z.record(z.string(), z.string()).default({}),
});
export type SyncSpec = z.infer<typeof SyncSpec>;

/** What an environment was restored from (`restored`). */
export const Restored = z.object({ key: z.string(), root: z.string(), files: z.number().int(), created: z.iso.datetime() });
export type Restored = z.infer<typeof Restored>;

/** A segment object of a packed artifact or snapshot share (`segments`). */
export const Segment = z.object({ name: z.string(), size: z.number().int(), objects: z.number().int() });
export type Segment = z.infer<typeof Segment>;

/** The limits an environment was leased with (`resources`): only those its template sets. */
export const Resources = z.object({
  cpus: z.number().optional(),
  memory: z.string().optional(),
  pids: z.number().int().optional(),
  disk: z.string().optional(),
});
export type Resources = z.infer<typeof Resources>;

/** An environment's variables (`envVars`). */
export const EnvVars = z.record(z.string(), z.string());
export type EnvVars = z.infer<typeof EnvVars>;

const Exports = z.array(Export);
const Shares = z.array(WiredShare);
const Segments = z.array(Segment);

export const labelsOf = (row: { labels: Prisma.JsonValue }): Labels => Labels.parse(row.labels);
export const exportsOf = (row: { exports: Prisma.JsonValue }): Export[] => Exports.parse(row.exports);
export const sharesOf = (row: { shares: Prisma.JsonValue }): WiredShare[] => Shares.parse(row.shares);
export const syncOf = (row: { sync: Prisma.JsonValue }): SyncSpec => SyncSpec.parse(row.sync ?? {});
const RestoredOrNull = Restored.nullable();
export const restoredOf = (row: { restored: Prisma.JsonValue }): Restored | null => RestoredOrNull.parse(row.restored);
export const resourcesOf = (row: { resources: Prisma.JsonValue }): Resources => Resources.parse(row.resources ?? {});
export const envVarsOf = (row: { envVars: Prisma.JsonValue }): EnvVars => EnvVars.parse(row.envVars ?? {});
export const segmentsOf = (row: { segments: Prisma.JsonValue }): Segment[] => Segments.parse(row.segments);

const date = z.coerce.date();
const json = z.custom<Prisma.JsonValue>((value) => value !== undefined);

/**
 * The whole environment as an event of its log keeps it (`EnvironmentEvent.payload`): the row as
 * JSON, dates as RFC 3339 strings and `queueSeq` as a decimal string.
 */
const EnvironmentPayload = z.object({
  id: z.string(),
  orgId: z.string(),
  name: z.string(),
  template: z.string(),
  pool: z.string(),
  state: z.string(),
  node: z.string().nullable(),
  nodeId: z.string().nullable().default(null),
  sandboxId: z.string().nullable(),
  labels: json,
  project: z.string(),
  error: z.string().nullable(),
  createdBy: z.string(),
  owner: z.string().default(''),
  stoppedBy: z.string().nullable().default(null),
  created: date,
  starting: date.nullable(),
  startMs: z.number().int(),
  ready: date.nullable(),
  readyMs: z.number().int().nullable(),
  stopped: date.nullable(),
  expires: date,
  idleUntil: date,
  idleMs: z.number().int(),
  hardMs: z.number().int(),
  exports: json,
  shares: json,
  sync: json,
  snapshot: z.string().nullable(),
  restore: z.array(z.string()),
  restored: json.nullable(),
  queueSeq: z.coerce.bigint().default(0n),
  workClaim: date.nullable(),
  outSynced: z.array(z.string()).default([]),
  relayed: date.nullable().default(null),
  image: z.string().nullable().default(null),
  resources: json.default({}),
  network: z.string().default('none'),
  workdir: z.string().default('/'),
  envVars: json.default({}),
  user: z.string().nullable().default(null),
  containerUser: z.string().nullable().default(null),
  lifecycle: json.default([]),
  templateVersion: z.number().int().nullable().default(null),
  runtime: z.string().nullable().default(null),
  specHash: z.string().nullable().default(null),
  warmSlot: z.string().nullable().default(null),
  warmClaimed: z.boolean().default(false),
  waiting: z.string().nullable().default(null),
  endsAs: z.string().nullable().default(null),
  version: z.number().int(),
}) satisfies z.ZodType<Environment, unknown>;

/** The event-log form of an environment (see EnvironmentPayload). */
export function environmentPayload(env: Environment): Prisma.InputJsonObject {
  return JSON.parse(JSON.stringify({ ...env, queueSeq: env.queueSeq.toString() }));
}

/** An environment back from its event-log form. */
export function environmentFromPayload(payload: Prisma.JsonValue): Environment {
  return EnvironmentPayload.parse(payload);
}
