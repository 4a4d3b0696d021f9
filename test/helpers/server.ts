import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TypedDocumentNode } from '@graphql-typed-document-node/core';
import { print } from 'graphql';
import pg from 'pg';
import { describe, type TestOptions } from 'vitest';
import { loadConfig } from '../../src/app/config';
import { type App, startApp } from '../../src/app/server';
import { createLogger } from '../../src/observability/log';
import { ManualClock } from './clock';
import { seedDatabase } from './database';
import { TEST_CAPACITY } from './processes';
import { type PollOptions, poll } from './wait';

export const BOOTSTRAP = 'bct_test-bootstrap-token-0123456789';

export type Backend = 'pglite' | 'postgres';

/** Runs a suite on the embedded PGlite, and again on PostgreSQL when TEST_DATABASE_URL is set. */
export function describeBackends(name: string, suite: (backend: Backend) => void, options: TestOptions = {}): void {
  describe(`${name} [pglite]`, options, () => suite('pglite'));
  if (process.env.TEST_DATABASE_URL) describe(`${name} [postgres]`, options, () => suite('postgres'));
  else describe.skip(`${name} [postgres] (TEST_DATABASE_URL not set)`, () => suite('postgres'));
}

export interface TestServer {
  app: App;
  url: string;
  clock: ManualClock;
  dataDir: string;
  env: Record<string, string>;
  /** Stops and starts again on the same data (directory or schema). */
  restart(): Promise<void>;
  /** Another instance on the same database (PostgreSQL only). */
  startPeer(): Promise<App>;
  stop(): Promise<void>;
}

export interface ServerOptions {
  /** Receives every log line (JSON) of this server and its peers, at LOG_LEVEL (default info). */
  logLines?: (line: string) => void;
}

/** Starts a whole Berth on a free port with its own data directory (and schema on PostgreSQL). */
export async function startServer(
  backend: Backend = 'pglite',
  env: Record<string, string> = {},
  options: ServerOptions = {},
): Promise<TestServer> {
  const dataDir = await mkdtemp(join(tmpdir(), 'berth-test-'));
  const schema = backend === 'postgres' ? `berth_t_${randomBytes(6).toString('hex')}` : undefined;
  const fullEnv: Record<string, string> = {
    PORT: '0',
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    BOOTSTRAP_TOKEN: BOOTSTRAP,
    // Files-only unless a suite gives the built-in pool an engine (test/helpers/containers.ts).
    DOCKER_HOST: 'none',
    BUILTIN_CAPACITY: TEST_CAPACITY,
    ...(schema ? { DATABASE_URL: process.env.TEST_DATABASE_URL!, DATABASE_SCHEMA: schema } : {}),
    ...env,
  };
  const clock = new ManualClock();
  // BERTH_TEST_LOG=1 shows the server's warnings and errors.
  const { logLines } = options;
  const logger = logLines
    ? createLogger({ format: 'json', level: loadConfig(fullEnv).logLevel, destination: { write: logLines } })
    : createLogger({
        format: 'pretty',
        level: process.env.BERTH_TEST_LOG ? 'warn' : 'silent',
        destination: { write: (line) => void process.stderr.write(line) },
      });
  if (!schema && !fullEnv.DATABASE_URL) await seedDatabase(fullEnv.DATA_DIR!);
  const launch = () => startApp({ config: loadConfig(fullEnv), clock, logger });
  const peers: App[] = [];
  const server: TestServer = {
    app: await launch(),
    url: '',
    clock,
    dataDir,
    env: fullEnv,
    async restart() {
      await server.app.stop();
      server.app = await launch();
      server.url = server.app.url;
    },
    async startPeer() {
      if (!schema) throw new Error('peers need PostgreSQL');
      const peer = await launch();
      peers.push(peer);
      return peer;
    },
    async stop() {
      for (const peer of peers) await peer.stop();
      await server.app.stop();
      if (schema) {
        const client = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await client.end();
      }
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  server.url = server.app.url;
  return server;
}

export interface Reply<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

/** A small REST client: JSON in, JSON out, bearer token. */
export function client(base: () => string, token?: string) {
  const call = async <T = any>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply<T>> => {
    const res = await fetch(base() + path, {
      method,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body !== undefined && typeof body !== 'string' ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // not JSON; tests assert on the text
    }
    return { status: res.status, body: parsed as T, headers: res.headers };
  };
  return {
    get: <T = any>(path: string, headers?: Record<string, string>) => call<T>('GET', path, undefined, headers),
    post: <T = any>(path: string, body?: unknown, headers?: Record<string, string>) => call<T>('POST', path, body, headers),
    put: <T = any>(path: string, body?: unknown, headers?: Record<string, string>) => call<T>('PUT', path, body, headers),
    del: <T = any>(path: string, headers?: Record<string, string>) => call<T>('DELETE', path, undefined, headers),
    call,
    /** POST /graphql with a typed document (test/gql) and its variables. */
    gql: async <T, V>(document: TypedDocumentNode<T, V>, ...variables: V extends Record<string, never> ? [] : [V]) =>
      call<{ data?: T; errors?: { message: string; extensions?: Record<string, unknown> }[] }>('POST', '/graphql', {
        query: print(document),
        variables: variables[0],
      }),
  };
}

/**
 * Runs the server's background jobs (or `between`) until the environment (by id or name) is in
 * `state` (or one of them), and answers it as GET shows it. An ended environment that is not what
 * was asked for fails at once, with its error.
 */
export async function untilState(
  s: TestServer,
  token: string,
  id: string,
  state: string | string[],
  options: PollOptions = {},
): Promise<Record<string, any>> {
  const wanted = [state].flat();
  const api = client(() => s.url, token);
  let seen: Record<string, any> = {};
  return poll(
    () => `environment ${id} to be ${wanted.join(' or ')} (it is ${seen.state})`,
    async () => {
      seen = (await api.get(`/v1/environments/${id}`)).body;
      if (wanted.includes(seen.state)) return seen;
      if (seen.state === 'stopped' || seen.state === 'failed')
        throw new Error(`environment ${id} is ${seen.state}${seen.error ? `: ${seen.error}` : ''}, never ${wanted.join(' or ')}`);
      return undefined;
    },
    { between: () => s.app.deps.background.tick(), ...options },
  );
}
