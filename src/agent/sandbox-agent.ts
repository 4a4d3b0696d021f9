// The sandbox agent (`berth agent`, docs/agents.md): joins once, then watches its sandbox's
// configuration and runs it — imports forwarded from loopback ports through the server's relay to
// the environment's node, `in` shares sent, `out` shares brought home — until the sandbox is
// removed or the process is stopped.
import net from 'node:net';
import path from 'node:path';
import { type Client, createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { type ApiError, errorFromText, reachError } from '../cli/client';
import { duplexPair, receiveFolder, sendFolder } from '../dataplane/folder-sync';
import { joinStreams, RelayMux } from '../dataplane/relay-mux';
import { bridge, CLOSE, heartbeat, RELAY_SOCKET_OPTIONS } from '../dataplane/ws-bridge';
import { closeCodeOf } from '../kernel/error-codes';
import { AGENT_FOLDER } from '../protocol/agent-folder';
import { type MuxImport, parseAddress, RELAY_MUX_PATH, RELAY_PATH, type RelayQuery } from '../protocol/relay';
import { type ConfigEnvironment, type ConfigShare, configProblems, JoinAnswer, SandboxConfig } from '../protocol/sandbox-config';
import { confine } from './confine';
import { loadCredential, type StoredSandbox, saveCredential } from './sandbox-agent-credential';

/** Close codes that end the config subscription for good: the credential is refused. */
const REFUSED = [closeCodeOf('unauthorized'), closeCodeOf('forbidden')];

export type AgentLog = (message: string) => void;

export interface SandboxAgentOptions {
  /** Base URL of the Berth server (http://host:port). Default: the stored credential's. */
  server?: string;
  /** The agent's folder: share folders are relative to it; the credential lives in DIR/.berth. */
  dir: string;
  /** A join key to spend (first start). */
  join?: string;
  log?: AgentLog;
  /** How often the agent reports that it is alive (default a minute). */
  heartbeatMs?: number;
}

/** One JSON call: the server's `{error, code}` thrown as an ApiError, no answer as an UnreachableError. */
async function call<T>(server: string, method: string, path: string, opts: { token?: string; body?: unknown } = {}): Promise<T> {
  let res: Response;
  try {
    res = await fetch(new URL(path, server), {
      method,
      headers: {
        ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
        ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    });
  } catch (error) {
    throw reachError(server, error);
  }
  const text = await res.text();
  if (!res.ok) throw errorFromText(res.status, res.statusText, text);
  return (text ? JSON.parse(text) : undefined) as T;
}

/** Spends a join key and stores the sandbox credential (DIR/.berth/sandbox.json, 0600). */
export async function joinSandbox(server: string, dir: string, key: string): Promise<StoredSandbox> {
  // Only what the agent keeps is checked: the key is spent, so a config it would refuse must not
  // cost the credential (the subscription brings the config again).
  const answer = JoinAnswer.pick({ sandbox: true, credential: true }).safeParse(
    await call<unknown>(server, 'POST', '/v1/sandboxes/join', { body: { key } }),
  );
  if (!answer.success) throw new Error(`the server's answer to the join is not one: ${configProblems(answer.error)}`);
  const joined = answer.data;
  const stored: StoredSandbox = {
    server,
    sandbox: { id: joined.sandbox.id, name: joined.sandbox.name, org: joined.sandbox.org },
    credential: joined.credential,
  };
  await saveCredential(dir, stored);
  return stored;
}

function wsBase(server: string): string {
  const url = new URL(server);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url.toString().replace(/\/$/, '');
}

/** Backoff for reconnects: 0.5 s doubling to 10 s, with jitter. */
export function backoff(attempt: number): number {
  return Math.min(10_000, 500 * 2 ** attempt) * (0.75 + Math.random() / 2);
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });

/**
 * Opens one relay socket, paused: nothing the server sent is lost before the caller listens, and
 * the caller resumes it then (bridge does). Rejects with the server's `{error, code}` (an ApiError)
 * when it refuses.
 */
export function openRelay(server: string, token: string, query: RelayQuery): Promise<WebSocket> {
  const url = new URL(`${wsBase(server)}${RELAY_PATH}`);
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
  return openSocket(url, token);
}

/** Opens the agent's standing mux (src/dataplane/relay-mux.ts), which carries every import connection. */
export async function openRelayMux(server: string, token: string): Promise<RelayMux> {
  return new RelayMux(await openSocket(new URL(`${wsBase(server)}${RELAY_MUX_PATH}`), token));
}

function openSocket(url: URL, token: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, {
      headers: { authorization: `Bearer ${token}` },
      ...RELAY_SOCKET_OPTIONS,
      // A zero mask: masking guards proxies against scripts in browsers, and an agent is none; it
      // would cost a pass over every byte on both ends.
      generateMask: (mask) => void mask.fill(0),
    });
    ws.once('open', () => {
      ws.off('error', reject);
      heartbeat(ws);
      // What came with the server's answer to the upgrade (the first bytes of a service that speaks
      // first, an out share's first batch) is read at once, before the caller could listen: it waits
      // in the socket until the caller resumes it (bridge and RelayMux do, once they listen).
      ws.pause();
      resolve(ws);
    });
    ws.once('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (c: Buffer) => {
        text += c.toString();
      });
      res.on('end', () => reject(errorFromText(res.statusCode ?? 0, res.statusMessage ?? '', text)));
    });
    ws.once('error', reject);
  });
}

/** What runs for one wired environment. */
class EnvironmentRunner {
  private readonly abort = new AbortController();
  private readonly listeners: net.Server[] = [];
  private readonly sockets = new Set<net.Socket | WebSocket>();
  private started = false;
  private finalPass = false;

  constructor(
    private readonly agent: SandboxAgent,
    private env: ConfigEnvironment,
  ) {}

  get id() {
    return this.env.id;
  }

  update(env: ConfigEnvironment): void {
    this.env = env;
    if (env.state === 'ready' && !this.started) {
      this.started = true;
      this.startImports();
      for (const share of env.shares) this.loopShare(share);
    }
    if (env.state === 'stopping' && !this.finalPass) {
      this.finalPass = true;
      void this.bringHome();
    }
  }

  private log(message: string) {
    this.agent.log(`${this.env.name} (${this.env.id}): ${message}`);
  }

  private get running() {
    return !this.abort.signal.aborted;
  }

  private startImports(): void {
    // The mux opened now, so that the first connection costs no upgrade either; a refusal is said
    // by the connection that meets it.
    if (this.env.imports.length > 0) this.agent.relayMux().catch(() => undefined);
    for (const entry of this.env.imports) {
      const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (socket) => this.forward(entry.service, socket));
      this.listeners.push(server);
      const listen = (attempt: number) => {
        if (!this.running) return;
        const { host, port } = parseAddress(entry.listen);
        server.once('error', (error: Error) => {
          this.log(`cannot listen on ${entry.listen} for ${entry.service}: ${error.message}; retrying`);
          void sleep(backoff(attempt), this.abort.signal).then(() => listen(attempt + 1));
        });
        server.listen(port, host, () => {
          server.removeAllListeners('error');
          this.log(`forwarding ${entry.service}: ${entry.listen} -> ${entry.target} on node ${this.env.node ?? '?'}`);
        });
      };
      listen(0);
    }
  }

  private forward(service: string, socket: net.Socket): void {
    socket.setNoDelay(true);
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    const ended = (error: Error) => {
      if (this.running) this.log(`${service} connection ended: ${error.message}`);
    };
    this.agent
      .relayMux()
      .then(async (mux) => {
        if (!this.running) return void socket.destroy();
        if (mux.canOpen) {
          const request: MuxImport = { environment: this.env.id, service };
          const stream = mux.open(request);
          stream.once('error', ended);
          return void joinStreams(socket, stream);
        }
        // A full mux (MUX_STREAMS connections at once) costs this one its speed, not its tunnel: a relay socket of its own.
        const ws = await openRelay(this.agent.server, this.agent.token, { environment: this.env.id, kind: 'import', service });
        if (!this.running) return void ws.close(CLOSE.goingAway);
        this.sockets.add(ws);
        ws.once('close', (code, reason) => {
          this.sockets.delete(ws);
          if (code !== CLOSE.normal && code !== CLOSE.goingAway && reason.length) ended(new Error(reason.toString()));
        });
        void bridge(ws, socket);
      })
      .catch((error: Error) => {
        this.log(`${service}: ${error.message}`);
        socket.destroy();
      });
  }

  /** The share's folder and extra files, resolved through links; refused outside the folder or in .berth. */
  private async paths(share: ConfigShare): Promise<{ root: string; extras: Record<string, string> }> {
    const root = await confine(this.agent.dir, share.localPath);
    const extras: Record<string, string> = {};
    for (const [dest, src] of Object.entries(share.sync.files)) extras[dest] = await confine(this.agent.dir, src);
    return { root, extras };
  }

  /** Says that a special file of the share (a FIFO, a socket, a device) is not synced. */
  private skipped(share: ConfigShare): (path: string, kind: string) => void {
    return (path, kind) => this.log(`share ${share.name}: skipped ${path}: a ${kind} is never synced`);
  }

  /** Keeps one share's sync running while the environment is ready, reconnecting with backoff. */
  private loopShare(share: ConfigShare): void {
    void (async () => {
      for (let attempt = 0; this.running && this.env.state === 'ready'; ) {
        let where: { root: string; extras: Record<string, string> };
        try {
          where = await this.paths(share);
        } catch (error) {
          this.log(`share ${share.name}: ${(error as Error).message}`);
          return;
        }
        try {
          const ws = await openRelay(this.agent.server, this.agent.token, { environment: this.env.id, kind: 'share', share: share.name });
          attempt = 0;
          this.sockets.add(ws);
          const [near, far] = duplexPair();
          const ended = bridge(ws, near);
          const skipped = this.skipped(share);
          const stop = () => ws.close(CLOSE.goingAway, 'the agent stops this sync');
          this.abort.signal.addEventListener('abort', stop, { once: true });
          const work =
            share.direction === 'in'
              ? sendFolder(far, {
                  root: where.root,
                  rules: share.sync,
                  extras: where.extras,
                  // A share that is the sandbox folder itself never sends the agent's credential.
                  withhold: share.localPath === '.' ? AGENT_FOLDER : undefined,
                  watch: true,
                  onSynced: (s) => this.log(`share ${share.name}: in sync (${s.files} files, ${s.deletes} deletes sent)`),
                  onSkipped: skipped,
                })
              : receiveFolder(far, {
                  root: where.root,
                  onBatch: (s) => this.log(`share ${share.name}: received (${s.files} files, ${s.deletes} deletes)`),
                  onSkipped: skipped,
                });
          work.catch((error: Error) => {
            this.log(`share ${share.name}: ${error.message}`);
            far.destroy();
          });
          const end = await ended;
          this.abort.signal.removeEventListener('abort', stop);
          this.sockets.delete(ws);
          await work.catch(() => undefined);
          if (end.code !== CLOSE.normal && end.code !== CLOSE.goingAway && this.running && this.env.state === 'ready') {
            this.log(`share ${share.name}: sync ended (${end.code} ${end.reason}); reconnecting`);
          }
        } catch (error) {
          if (!this.running || this.env.state !== 'ready') break;
          this.log(`share ${share.name}: ${(error as Error).message}; retrying`);
        }
        await sleep(backoff(attempt++), this.abort.signal);
      }
    })();
  }

  /** The environment is stopping: each `out` share gets its last pass (a few tries). */
  private async bringHome(): Promise<void> {
    for (const share of this.env.shares.filter((s) => s.direction === 'out')) {
      let root: string;
      try {
        ({ root } = await this.paths(share));
      } catch (error) {
        this.log(`share ${share.name}: ${(error as Error).message}; not brought home`);
        continue;
      }
      for (let attempt = 0; attempt < 5 && this.running; attempt++) {
        try {
          const ws = await openRelay(this.agent.server, this.agent.token, {
            environment: this.env.id,
            kind: 'share',
            share: share.name,
            final: '1',
          });
          this.sockets.add(ws);
          const [near, far] = duplexPair();
          const ended = bridge(ws, near);
          const stats = await receiveFolder(far, { root, onSkipped: this.skipped(share) }).catch((error: Error) => {
            far.destroy();
            throw error;
          });
          const end = await ended;
          this.sockets.delete(ws);
          if (end.code === CLOSE.normal) {
            this.log(`share ${share.name}: brought home (${stats.files} files)`);
            break;
          }
          throw new Error(`the last pass ended with ${end.code} ${end.reason}`);
        } catch (error) {
          const err = error as ApiError;
          this.log(`share ${share.name}: last pass failed: ${err.message}`);
          if (err.status === 404 || err.status === 409) break; // already stopped or gone
          await sleep(backoff(attempt), this.abort.signal);
        }
      }
    }
  }

  stop(): void {
    if (!this.running) return;
    this.abort.abort();
    for (const server of this.listeners) server.close();
    for (const s of this.sockets) {
      if (s instanceof net.Socket) s.destroy();
      else s.close(CLOSE.goingAway, 'the environment left the config');
    }
    this.log('stopped');
  }
}

/** One running agent. */
export class SandboxAgent {
  readonly log: AgentLog;
  private readonly runners = new Map<string, EnvironmentRunner>();
  private version = -1;
  private client?: Client;
  private heartbeat?: NodeJS.Timeout;
  private muxing: Promise<RelayMux> | undefined;
  private done!: (result: { removed: boolean; error?: Error }) => void;
  /** Resolves when the agent ends: the sandbox was removed, its credential refused, or stop(). */
  readonly finished: Promise<{ removed: boolean; error?: Error }>;

  constructor(
    readonly stored: StoredSandbox,
    readonly dir: string,
    opts: { log?: AgentLog; heartbeatMs?: number } = {},
  ) {
    this.log = opts.log ?? ((m) => console.error(`${new Date().toISOString()} ${m}`));
    this.finished = new Promise((resolve) => {
      this.done = resolve;
    });
    this.heartbeat = setInterval(() => void this.beat(), opts.heartbeatMs ?? 60_000);
    this.heartbeat.unref();
  }

  get server() {
    return this.stored.server;
  }

  /** The standing mux to the server, opened at the first import connection and again after it closed. */
  relayMux(): Promise<RelayMux> {
    if (!this.muxing) {
      const opening = openRelayMux(this.server, this.token);
      const forget = () => {
        if (this.muxing === opening) this.muxing = undefined;
      };
      opening.then((mux) => mux.closed.then(forget), forget);
      this.muxing = opening;
    }
    return this.muxing;
  }

  get token() {
    return this.stored.credential;
  }

  private async beat(): Promise<void> {
    try {
      await call(this.server, 'POST', `/v1/sandboxes/${this.stored.sandbox.id}/heartbeat`, { token: this.token });
    } catch (error) {
      this.log(`heartbeat failed: ${(error as Error).message}`);
    }
  }

  /** Subscribes to the configuration (reconnecting with backoff) and applies each newer version. */
  start(): void {
    this.client = createClient({
      url: `${wsBase(this.server)}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${this.token}` },
      lazy: false,
      keepAlive: 10_000,
      retryAttempts: Number.POSITIVE_INFINITY,
      shouldRetry: (e) => !(typeof e === 'object' && e !== null && 'code' in e && REFUSED.includes((e as { code: number }).code)),
      retryWait: async (retries) => {
        await sleep(backoff(retries));
      },
      on: {
        connected: () => this.log(`connected to ${this.server} as sandbox ${this.stored.sandbox.name} (${this.stored.sandbox.id})`),
        closed: (event) => {
          const code = (event as { code?: number }).code;
          if (code !== 1000 && this.client) this.log(`connection to ${this.server} closed (${code ?? 'error'}); reconnecting`);
        },
      },
      onNonLazyError: () => undefined,
    });
    this.client.subscribe<{ sandboxConfig: unknown }>(
      { query: 'subscription($id: ID!) { sandboxConfig(id: $id) }', variables: { id: this.stored.sandbox.id } },
      {
        next: ({ data, errors }) => {
          if (errors?.length) return this.end(false, new Error(errors.map((e) => e.message).join('; ')));
          if (data?.sandboxConfig) this.receive(data.sandboxConfig);
        },
        error: (error) => {
          const reason = (error as { reason?: string }).reason;
          const message = Array.isArray(error)
            ? error.map((e: { message: string }) => e.message).join('; ')
            : (reason ?? (error as Error).message ?? String(error));
          this.end(false, new Error(`the server refused the sandbox credential: ${message}`));
        },
        complete: () => this.end(true),
      },
    );
    void this.beat();
  }

  /** Checks a configuration the server sent: one the schema refuses is logged, and the running one kept. */
  private receive(value: unknown): void {
    const config = SandboxConfig.safeParse(value);
    if (config.success) this.apply(config.data);
    else this.log(`refused a configuration from ${this.server}: ${configProblems(config.error)}; keeping version ${this.version}`);
  }

  /** Applies a configuration whose version is higher than the one running. */
  apply(config: SandboxConfig): void {
    if (config.version <= this.version) return;
    this.version = config.version;
    const wanted = new Map(config.environments.map((e) => [e.id, e]));
    for (const [id, runner] of this.runners) {
      if (!wanted.has(id)) {
        runner.stop();
        this.runners.delete(id);
      }
    }
    for (const env of config.environments) {
      let runner = this.runners.get(env.id);
      if (!runner) {
        runner = new EnvironmentRunner(this, env);
        this.runners.set(env.id, runner);
        this.log(`${env.name} (${env.id}): wired, ${env.state}`);
      }
      runner.update(env);
    }
    if (config.sandbox.removed) this.log(`sandbox ${config.sandbox.name} was removed`);
  }

  private end(removed: boolean, error?: Error): void {
    this.stop();
    this.done({ removed, error });
  }

  /** Stops every environment's work and the subscription. */
  stop(): void {
    clearInterval(this.heartbeat);
    for (const runner of this.runners.values()) runner.stop();
    this.runners.clear();
    void this.muxing?.then(
      (mux) => mux.close(CLOSE.goingAway, 'the agent is stopping'),
      () => undefined,
    );
    this.muxing = undefined;
    const client = this.client;
    this.client = undefined;
    void client?.dispose();
  }
}

/**
 * `berth agent`: joins with `join` (storing the credential) or loads the stored one, then runs
 * until the sandbox is removed (resolves) or its credential is refused (rejects).
 */
export async function runSandboxAgent(opts: SandboxAgentOptions & { signal?: AbortSignal }): Promise<void> {
  const dir = path.resolve(opts.dir);
  let stored: StoredSandbox | undefined;
  if (opts.join) {
    if (!opts.server) throw new Error('--server is needed with --join');
    stored = await joinSandbox(opts.server, dir, opts.join);
  } else {
    stored = await loadCredential(dir);
    if (!stored) throw new Error(`no sandbox credential in ${path.join(dir, AGENT_FOLDER)}; start once with --join KEY`);
    if (opts.server && opts.server !== stored.server) stored = { ...stored, server: opts.server };
  }
  const agent = new SandboxAgent(stored, dir, { log: opts.log, heartbeatMs: opts.heartbeatMs });
  agent.log(`sandbox ${stored.sandbox.name} (${stored.sandbox.id}); folder ${dir}`);
  agent.start();
  opts.signal?.addEventListener('abort', () => agent.stop(), { once: true });
  const result = await Promise.race([
    agent.finished,
    new Promise<{ removed: false }>((r) => opts.signal?.addEventListener('abort', () => r({ removed: false }))),
  ]);
  if ('error' in result && result.error) throw result.error;
  if (result.removed) agent.log('the sandbox was removed; exiting');
}
