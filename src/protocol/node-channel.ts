// The node control channel (docs/agents.md, "Control channel"): every message a node agent and the
// server say to each other, one JSON object a frame, dispatched by `type`. The server end
// (src/edges/channels/node-channel.ts) parses what a node sends with parseNodeToServer and the agent
// (src/agent/node-agent.ts) what the server sends with parseServerToNode; each builds what it sends
// as a value of the other direction's type. The bounds of what a node sends are the server's: a
// frame out of them is answered `{type: 'error', code: 'invalid'}`, one of an unknown type
// `bad_request`. What the server sends crosses the events bus (PostgreSQL NOTIFY, 8000 bytes), so its
// strings are bounded there; its schemas bound what the agent acts on.
import { z } from 'zod';
import { DomainError, ValidationError } from '../kernel/errors';
import { MAX_IMAGE_LENGTH } from '../kernel/image-ref';
import { MAX_TERM } from '../node/command';
import { LIFECYCLE_PHASES } from '../node/lifecycle';
import { EXEC_CHUNK, EXEC_WINDOW, MAX_NODE_CPUS, MAX_NODE_MEMORY, MAX_POOL_IMAGES, MAX_SLOTS } from './dataplane';
import { ENV_LOG_PIECE } from './environment-log';
import { RelayJob } from './relay';
import { SyncRulesSchema } from './sync-rules';

/** The longest engine address a hello names. */
const MAX_ENGINE = 500;

/** The most environment ids a hello or a welcome lists. */
export const MAX_HELD = 1000;
/** The most warm containers a node reports holding. */
export const MAX_WARM_HELD = 10_000;
/** The longest error text a node sends (a reply's, a failed warm container's). */
export const MAX_ERROR = 10_000;
/** A base64 `exec-output` or `exec-input` chunk of at most EXEC_CHUNK bytes. */
const MAX_CHUNK_TEXT = Math.ceil(EXEC_CHUNK / 3) * 4;

const text = (max: number, error?: string) => z.string({ error }).max(max, { error });
const int = (min: number, max: number, error?: string) => z.int({ error }).min(min, { error }).max(max, { error });

const environmentId = text(100, 'must be an environment id');
/** A command's run id (a UUID the server chose): a node speaks only for the commands it was sent. */
const execId = z.string({ error: 'must be the id of the exec message answered' }).regex(/^[0-9a-f-]{36}$/, {
  error: 'must be the id of the exec message answered',
});
/** One connection attached to a session (a UUID the server chose). */
const attachId = z.string({ error: 'must be the id of an attachment' }).regex(/^[0-9a-f-]{36}$/, {
  error: 'must be the id of an attachment',
});
/** A session's id (ses_…, the server's). */
const sessionId = text(100, 'must be a session id');

const slot = text(200, "must be one of the node's slots");
/** A making of a slot's warm container: the time the server sent with the `warm` message. */
const since = z
  .string({ error: 'must be the time the server sent with the warm message' })
  .max(100, { error: 'must be the time the server sent with the warm message' })
  .refine((value) => !Number.isNaN(new Date(value).getTime()), { error: 'must be the time the server sent with the warm message' });
const exitCode = int(-(2 ** 31), 2 ** 31 - 1, 'must be a 32-bit integer');
const errorText = z.string().max(MAX_ERROR);

// ---------------------------------------------------------------------------------------------
// Node → server

/** What a node may report of an environment's usage, bounded: finite, non-negative, within what a machine can have. */
export const UsageReport = z.strictObject({
  cpu: z.number().min(0).max(100_000).nullable(),
  memory: z.int().min(0).max(Number.MAX_SAFE_INTEGER).nullable(),
  pids: z.int().min(0).max(100_000_000).nullable(),
  disk: z.int().min(0).max(Number.MAX_SAFE_INTEGER),
});
export type UsageReport = z.infer<typeof UsageReport>;

const Hello = z.object({
  type: z.literal('hello'),
  slots: int(1, MAX_SLOTS, `must be an integer from 1 to ${MAX_SLOTS}`),
  /** The environments the agent still holds (after a reconnect without a restart). */
  environments: z.array(environmentId, { error: 'must be a list of environment ids' }).max(MAX_HELD, {
    error: 'must be a list of environment ids',
  }),
  /** The machine's CPUs and memory (bytes): its engine's, else the host's. */
  capacity: z
    .strictObject(
      {
        cpus: int(1, MAX_NODE_CPUS, `must be an integer from 1 to ${MAX_NODE_CPUS}`),
        memory: int(1, MAX_NODE_MEMORY, `must be a whole number of bytes from 1 to ${MAX_NODE_MEMORY} (1 PiB)`),
      },
      { error: 'must be an object {cpus, memory}' },
    )
    .optional(),
  /** It is shutting down (a reconnect while it drains). */
  leaving: z.boolean({ error: 'must be a boolean' }).optional(),
  /** The container engine it runs containers with (shown on GET /v1/nodes); null: files only. */
  engine: z
    .string({ error: 'must be a string' })
    .max(MAX_ENGINE, { error: `must be at most ${MAX_ENGINE} characters` })
    .nullable()
    .optional(),
  /** Why its engine does not answer (absent or null: it answers). */
  engineError: errorText.nullable().optional(),
  /** The sessions it still runs (after a reconnect without a restart): the server ends the others of this node. */
  sessions: z
    .array(sessionId)
    .max(MAX_HELD * 16)
    .optional(),
});

const Reply = z.object({
  type: z.literal('reply'),
  /** The `reply` topic of the message it answers. */
  reply: z
    .string({ error: 'must be the reply topic of the message answered' })
    .max(100, { error: 'must be the reply topic of the message answered' })
    .startsWith('node-reply:', { error: 'must be the reply topic of the message answered' }),
  /** The work failed, saying why. */
  error: errorText.optional(),
  /** A prepare's answer: whether the environment got a container or holds files only. */
  runtime: z.enum(['container', 'files']).optional(),
  /** The error is the environment's own (a lifecycle command exited non-zero): its `error` says it as is. */
  fault: z.literal('environment').optional(),
});

/**
 * A piece of an environment's log (docs/environments.md, "Lifecycle commands and the environment's
 * log"): what one of its lifecycle commands printed (`step` names it) or a line of Berth's, and
 * when (the node's clock; the server keeps it only when it is not ahead of its own).
 */
const EnvLog = z.object({
  type: z.literal('env-log'),
  environment: environmentId,
  step: text(200, 'must be the name of a lifecycle command'),
  text: z.string().max(ENV_LOG_PIECE, { error: `must be at most ${ENV_LOG_PIECE} characters` }),
  at: z
    .string({ error: 'must be a time' })
    .max(100, { error: 'must be a time' })
    .refine((value) => !Number.isNaN(new Date(value).getTime()), { error: 'must be a time' })
    .optional(),
});

const ExecOutput = z.object({
  type: z.literal('exec-output'),
  exec: execId,
  stream: z.enum(['stdout', 'stderr']),
  data: z.base64().max(MAX_CHUNK_TEXT),
  /** A session's scrollback, replayed for this attachment only (live output names none). */
  attach: attachId.optional(),
});
/**
 * A session's scrollback is replayed for `attach` next (its `exec-output` events name it), starting
 * at byte `from` of the command's whole output; live output follows it.
 */
const ExecReplay = z.object({ type: z.literal('exec-replay'), exec: execId, attach: attachId, from: z.int().min(0) });
/** `session`: a session's end, which the instance holding the node's channel records. */
const ExecExit = z.object({ type: z.literal('exec-exit'), exec: execId, exitCode, session: sessionId.optional() });
/** Bytes of a session's input written to the command's container (an `exec-input` chunk's, from `attach`). */
const ExecInputCredit = z.object({
  type: z.literal('exec-input-credit'),
  exec: execId,
  bytes: int(0, EXEC_CHUNK),
  attach: attachId.optional(),
});
/** How many connections are attached to a session now (on every change). */
const ExecAttached = z.object({ type: z.literal('exec-attached'), exec: execId, session: sessionId, attached: int(0, 10_000) });

export const NodeToServer = z.discriminatedUnion('type', [
  Hello,
  z.object({ type: z.literal('heartbeat') }),
  z.object({ type: z.literal('leaving') }),
  /** Of its pool's images, those its engine holds (placement prefers it for leases of them). */
  z.object({ type: z.literal('images-held'), images: z.array(z.string().max(MAX_IMAGE_LENGTH)).max(MAX_POOL_IMAGES) }),
  /** Its engine stopped answering (`error` says how) or answers again (null). */
  z.object({ type: z.literal('engine'), error: errorText.nullable() }),
  Reply,
  /** Its container ended on its own (its main process died, or was killed for memory). */
  z.object({
    type: z.literal('ended'),
    environment: environmentId,
    reason: z
      .string({ error: 'must be a string of 1 to 500 characters' })
      .min(1, { error: 'must be a string of 1 to 500 characters' })
      .max(500, {
        error: 'must be a string of 1 to 500 characters',
      }),
  }),
  z.object({ type: z.literal('usage'), environment: environmentId, sample: UsageReport }),
  ExecOutput,
  ExecReplay,
  ExecExit,
  ExecInputCredit,
  ExecAttached,
  EnvLog,
  z.object({ type: z.literal('warm-ready'), slot, since }),
  z.object({ type: z.literal('warm-failed'), slot, since, error: errorText.optional() }),
  /** The warm containers it holds (after each connect and every minute). */
  z.object({
    type: z.literal('warm-held'),
    slots: z.array(z.object({ slot, since: text(100) })).max(MAX_WARM_HELD),
  }),
]);
export type NodeToServer = z.infer<typeof NodeToServer>;
/** One message of the node → server direction, by its type. */
export type FromNode<T extends NodeToServer['type']> = Extract<NodeToServer, { type: T }>;
/** A node's answer to a question (askNode), as the asking instance receives it. */
export type NodeReply = FromNode<'reply'>;

/**
 * What a command's events topic carries: a node's output, exit and input credit, a session's replay
 * mark (the built-in node's name no `exec`); a session's exit carries the Exec row its recording wrote.
 */
export type ExecTopicEvent = DistributiveOmit<
  FromNode<'exec-output' | 'exec-input-credit' | 'exec-replay'> | (FromNode<'exec-exit'> & { recorded?: number }),
  'exec'
>;

// ---------------------------------------------------------------------------------------------
// Server → node

const id = text(200);
const shares = z.array(z.object({ name: id, envPath: text(4096) })).max(100);
/** What a node needs to know of an environment to hold it (src/node/runtime.ts, EnvironmentSpec). */
const environmentSpec = {
  name: id,
  orgId: id,
  template: id,
  shares,
  image: z.string().nullable(),
  resources: z.object({
    cpus: z.number().optional(),
    memory: z.string().optional(),
    pids: z.int().optional(),
    disk: z.string().optional(),
  }),
  network: z.enum(['none', 'egress']),
  workdir: z.string(),
  env: z.record(z.string(), z.string()),
  /** Who its commands run as, and its container's user (absent: the image's). */
  user: text(100).optional(),
  containerUser: text(100).optional(),
  /** Its lifecycle commands (at most MAX_LIFECYCLE_BYTES as JSON: src/modules/templates/catalog.ts). */
  lifecycle: z
    .array(z.object({ phase: z.enum(LIFECYCLE_PHASES), name: text(100).optional(), argv: z.array(z.string()).min(1).max(1024) }))
    .max(100)
    .default([]),
};

const termSize = z.object({ rows: int(1, MAX_TERM), cols: int(1, MAX_TERM) });

const reply = z.string().startsWith('node-reply:');
/** The longest a session may outlive its connections (SESSION_GRACE's bound). */
export const MAX_GRACE_MS = 24 * 60 * 60 * 1000;

export const ServerToNode = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('welcome'),
    node: z.object({ id, name: id, pool: id }),
    heartbeatMs: z.int().positive(),
    /** How often it samples its environments' usage. */
    usageSampleMs: z.int().positive(),
    /** The live environments on the node: the agent wipes any other root it holds. */
    environments: z.array(id).max(MAX_HELD),
    /** Its pool's templates' images, to pull ahead. */
    images: z.array(z.string()).max(MAX_POOL_IMAGES),
  }),
  /** A template of its pool changed: pull its image ahead. */
  z.object({ type: z.literal('images'), images: z.array(z.string()).max(MAX_POOL_IMAGES) }),
  /** It was declared lost: it says hello again. */
  z.object({ type: z.literal('hello-again') }),
  /** Every environment of a leaving node ended: it may stop. */
  z.object({ type: z.literal('drained') }),
  /** A message it sent was refused. */
  z.object({ type: z.literal('error'), error: z.string(), code: z.string() }),
  /** Make the environment's root, restore its snapshot there, start its container; `warm`: the slot's warm container it claims, or evicts. */
  z.object({
    type: z.literal('prepare'),
    reply,
    environment: z.object({
      id,
      ...environmentSpec,
      warm: z.object({ slot: id, hash: z.string(), claim: z.boolean() }).optional(),
      /** It names snapshot keys to restore from (false: no call asks what to restore). */
      restore: z.boolean().optional(),
    }),
  }),
  /** Remove the container, save the shares not `saved` yet (when it has a snapshot key), remove the root. */
  z.object({
    type: z.literal('release'),
    reply,
    environment: z.object({
      id,
      snapshot: z.boolean(),
      saved: z.array(id).max(100),
      shares: z.array(z.object({ name: id, envPath: text(4096), rules: SyncRulesSchema })).max(100),
    }),
  }),
  z.object({ type: z.literal('discard'), environment: z.object({ id }) }),
  z.object({
    type: z.literal('exec'),
    exec: execId,
    environment: z.object({ id }),
    argv: z.array(z.string()).min(1).max(1024),
    workdir: z.string(),
    /**
     * An interactive command: it takes input, and with `tty` has a terminal. With `id` it is a
     * session that outlives its connection: `attach` names the first one; with none attached it
     * runs on for `graceMs`; an attachment not kept (`exec-keep`) for 3 × `keepMs` is gone.
     */
    session: z
      .object({
        tty: termSize.optional(),
        id: sessionId.optional(),
        attach: attachId.optional(),
        graceMs: z.int().min(0).max(MAX_GRACE_MS).optional(),
        keepMs: z.int().min(1).max(MAX_GRACE_MS).optional(),
      })
      .optional(),
  }),
  z.object({ type: z.literal('exec-kill'), exec: execId }),
  /** The caller (a session's `attach`) took `bytes` more of the output: that much more may come. */
  z.object({ type: z.literal('exec-credit'), exec: execId, bytes: int(1, EXEC_WINDOW), attach: attachId.optional() }),
  z.object({ type: z.literal('exec-input'), exec: execId, data: z.base64().max(MAX_CHUNK_TEXT), attach: attachId.optional() }),
  z.object({ type: z.literal('exec-input-end'), exec: execId }),
  z.object({ type: z.literal('exec-resize'), exec: execId, ...termSize.shape }),
  /** Another connection attaches to a session: its scrollback is replayed to it, then live output. */
  z.object({ type: z.literal('exec-attach'), exec: execId, attach: attachId }),
  /** A connection left a session (the command runs on, for the grace once none is attached). */
  z.object({ type: z.literal('exec-detach'), exec: execId, attach: attachId }),
  /** A connection attached to a session is still there. */
  z.object({ type: z.literal('exec-keep'), exec: execId, attach: attachId }),
  /** Dial `url` back and serve the relay job on that socket (docs/agents.md, "The relay"). */
  z.object({ type: z.literal('relay'), relay: id, url: text(4096), job: RelayJob }),
  /** Make the slot's warm container (`since` names this making of it). */
  z.object({
    type: z.literal('warm'),
    warm: z.object({ ...environmentSpec, slot: id, pool: id, hash: z.string(), since: z.string() }),
  }),
  z.object({ type: z.literal('warm-drop'), slot: id }),
  /** The built template images its pools use now: it removes the others it holds. */
  z.object({ type: z.literal('built'), images: z.array(text(MAX_IMAGE_LENGTH)).max(10_000) }),
  /**
   * Build a template's image through the engine's build API, from the context at GET
   * /v1/template-builds/{id}/context, tagged `image`; report with POST /v1/template-builds/{id}.
   */
  z.object({
    type: z.literal('build'),
    build: z.object({
      id,
      image: text(MAX_IMAGE_LENGTH),
      dockerfile: text(4096),
      args: z.record(z.string().max(200), z.string().max(4096)),
      target: text(200).optional(),
      memory: text(50).optional(),
      /** Its Dockerfile runs commands: built only where the engine isolates build steps from the node's network. */
      runs: z.boolean(),
    }),
  }),
]);
export type ServerToNode = z.infer<typeof ServerToNode>;
/** One message of the server → node direction, by its type. */
export type ToNode<T extends ServerToNode['type']> = Extract<ServerToNode, { type: T }>;

// ---------------------------------------------------------------------------------------------

/** Omit over each member of a union. */
export type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/**
 * The message `value` is, or a DomainError saying what is wrong with it: `bad_request` for a type
 * the direction has not, `invalid` (a ValidationError naming the field) for a field out of bounds.
 */
function parseWith<T>(schema: z.ZodType<T>, value: unknown): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  if (issue.code === 'invalid_union' && issue.path.length === 1 && issue.path[0] === 'type') {
    const type = (value as { type?: unknown }).type;
    throw new DomainError(`unknown message type ${JSON.stringify(type)}`, 'bad_request');
  }
  const field = issue.path.map(String).join('.');
  throw new ValidationError(`${field || 'frame'}: ${issue.message}`, field || undefined);
}

/** A frame a node sent, typed (the server end of the channel). */
export const parseNodeToServer = (value: unknown): NodeToServer => parseWith(NodeToServer, value);
/** A frame the server sent, typed (the agent's end of the channel). */
export const parseServerToNode = (value: unknown): ServerToNode => parseWith(ServerToNode, value);
