// The byte relay (docs/agents.md, "The relay"): what a sandbox agent asks for when it opens a relay
// socket, and the job the server hands the node that serves the other end. Both ends use these.
import { z } from 'zod';
import { SyncRulesSchema } from './sync-rules';

/** Where a sandbox agent opens a relay socket (Upgrade: websocket, its sandbox credential). */
/** `host:port` (IPv6 hosts in brackets) to connect options. */
export function parseAddress(address: string): { host: string; port: number } {
  const m = /^\[?([^\]]*)\]?:(\d{1,5})$/.exec(address);
  if (!m) throw new Error(`not a host:port address: ${address}`);
  return { host: m[1] || '127.0.0.1', port: Number(m[2]) };
}

export const RELAY_PATH = '/v1/relay';
/** Where a remote node dials back to serve a relay socket (`?relay=<id>`, its node credential). */
export const RELAY_NODE_PATH = '/v1/relay/node';
/** Where a sandbox agent opens its standing mux (src/dataplane/relay-mux.ts): each stream one import connection. */
export const RELAY_MUX_PATH = '/v1/relay/mux';
/** Where a node opens its standing mux: the server opens a stream on it for each connection to one of its environments. */
export const RELAY_NODE_MUX_PATH = '/v1/relay/node/mux';

/** A relay socket's purpose, as the query of RELAY_PATH: an import of a service, or a share's folder sync. */
export type RelayQuery =
  | { environment: string; kind: 'import'; service: string }
  /** `final`: an `out` share's last pass, while its environment stops. */
  | { environment: string; kind: 'share'; share: string; final?: '1' };

const name = z.string().max(200);

/** What a sandbox agent's mux stream is for: a connection to an import of an environment wired to it. */
export const MuxImport = z.object({ environment: name, service: name });
export type MuxImport = z.infer<typeof MuxImport>;

/** A relay socket's work on its node (src/dataplane/relay-node.ts): an import's port or a share's folder sync. */
export const RelayJob = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('import'),
    environment: name,
    service: name,
    /** A port on the environment's own loopback. */
    port: z.int().min(1).max(65_535),
  }),
  z.object({
    kind: z.literal('share'),
    environment: name,
    share: name,
    direction: z.enum(['in', 'out']),
    envPath: z.string().max(4096),
    /** For an `out` share: what the node sends back (`files` does not apply). */
    sync: SyncRulesSchema,
    /** An `out` share's last pass: send everything once, then end. */
    final: z.boolean(),
  }),
  z.object({
    /** A preview URL's connection (docs/environments.md, "Preview URLs"): any port of the environment's own loopback. */
    kind: z.literal('preview'),
    environment: name,
    port: z.int().min(1).max(65_535),
  }),
]);
export type RelayJob = z.infer<typeof RelayJob>;
export type ImportJob = Extract<RelayJob, { kind: 'import' }>;
export type ShareJob = Extract<RelayJob, { kind: 'share' }>;
export type PreviewJob = Extract<RelayJob, { kind: 'preview' }>;
/** A job whose socket carries one TCP connection to a port inside the environment. */
export type DialJob = ImportJob | PreviewJob;
