// What the server and a node agent agree on (docs/agents.md, "Control channel").

/** The WebSocket a node agent opens with its node credential. */
export const NODE_CHANNEL_PATH = '/v1/nodes/channel';

/** The most slots one node agent may hold. */
export const MAX_SLOTS = 64;
/** Bounds of a node's capacity: what no machine this decade exceeds. */
export const MAX_NODE_CPUS = 4096;
export const MAX_NODE_MEMORY = 2 ** 50;
/** The most images a node is told to pull ahead for its pool (those of the templates changed last). */
export const MAX_POOL_IMAGES = 20;

/** The most bytes of command output in one `exec-output` event (events cross PostgreSQL NOTIFY, 8000 bytes a payload). */
export const EXEC_CHUNK = 4096;

/**
 * Exec flow control: a command's node sends at most this many bytes of output beyond what the
 * caller has taken; the caller grants more (`exec-credit`) as it takes them, EXEC_GRANT at a time.
 * A caller that reads slowly so slows the command down, and what waits in between stays bounded.
 */
export const EXEC_WINDOW = 1024 * 1024;
export const EXEC_GRANT = EXEC_WINDOW / 4;

/** A command's output as `exec-output` events of at most EXEC_CHUNK bytes each. */
export function* execOutput(
  stream: 'stdout' | 'stderr',
  data: Buffer,
): Generator<{ type: 'exec-output'; stream: 'stdout' | 'stderr'; data: string }> {
  for (let i = 0; i < data.length; i += EXEC_CHUNK)
    yield { type: 'exec-output', stream, data: data.subarray(i, i + EXEC_CHUNK).toString('base64') };
}

/**
 * Session input flow control: the server sends a command at most this many bytes of input beyond
 * what its node wrote to the container (`exec-input-credit`); the caller's socket is not read meanwhile.
 */
export const SESSION_INPUT_WINDOW = 256 * 1024;
