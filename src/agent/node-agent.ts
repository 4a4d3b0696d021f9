// `berth node`: a build machine serving one pool of a Berth server (docs/agents.md).
//
// It keeps one control channel (a WebSocket at /v1/nodes/channel, opened with its bnd_
// credential) and reconnects with backoff. On that channel it says hello with its slots, sends a
// heartbeat at the interval the server names, and does what the server asks, by message `type`:
// `prepare` (make the environment's root, restore its snapshot there, start its container),
// `release` (remove the container, save the shares, remove the root), `discard`, `exec`,
// `exec-kill`, `exec-credit` (flow control: EXEC_WINDOW), a session's `exec-input`,
// `exec-input-end` and `exec-resize`, `relay`, and `images` (pull ahead: docs/agents.md, "Images").
// The work itself is the node runtime's (src/node/runtime.ts). It moves snapshot archives over the
// node HTTP calls (docs/snapshots.md) with the same credential. After a restart it holds the
// environments whose containers and folders it finds until the server says which are live (the
// rest are removed). The server runs one as its built-in node (`--builtin`: docs/agents.md).
//
// drain() (`berth node` on SIGTERM or SIGINT) says `leaving`: the server places nothing new on the
// node and ends its live environments, each released here as any end is (shares saved), and
// answers `drained` once none is left; then the agent stops. The same credential started again
// serves as before (docs/agents.md, "Stopping a node").
import { createHash } from 'node:crypto';
import { mkdir, readdir } from 'node:fs/promises';
import { availableParallelism, totalmem } from 'node:os';
import type { Readable } from 'node:stream';
import { WebSocket } from 'ws';
import { ApiError, BerthClient } from '../cli/client';
import type { Answer } from '../cli/http';
import { NODE_MUX_STREAMS, RelayMux } from '../dataplane/relay-mux';
import { serveMuxStream, serveRelay } from '../dataplane/relay-node';
import { heartbeat, RELAY_SOCKET_OPTIONS } from '../dataplane/ws-bridge';
import { closeCodeOf } from '../kernel/error-codes';
import { DomainError } from '../kernel/errors';
import { normalizeImage } from '../kernel/image-ref';
import { formatSize } from '../kernel/sizes';
import { nodeCapacity } from '../node/capacity';
import { CommandHost } from '../node/command-host';
import type { Engine } from '../node/engine';
import { boundedLog, LifecycleError, type LogSink } from '../node/lifecycle';
import { NodeRuntime } from '../node/runtime';
import { restoreShares, saveShares } from '../node/shares';
import type { Capacity } from '../protocol/capacity';
import { NODE_CHANNEL_PATH } from '../protocol/dataplane';
import { MAX_ENVIRONMENT_LOG } from '../protocol/environment-log';
import { MAX_ERROR, type NodeToServer, parseServerToNode, type ServerToNode, type ToNode } from '../protocol/node-channel';
import { RELAY_NODE_MUX_PATH } from '../protocol/relay';
import { ARCHIVE_CONTENT_TYPE } from '../protocol/snapshot-archive';
import { NodeBuilds } from './node-builds';

export interface NodeAgentOptions {
  /** The Berth server's base URL, e.g. http://127.0.0.1:8080. */
  server: string;
  /** The node credential (bnd_…). */
  token: string;
  /** Where environment roots live. */
  dir: string;
  slots: number;
  /** null: environments hold files only. */
  engine: Engine | null;
  log?: (line: string) => void;
  /**
   * The label its containers carry (`berth.owner`); default: one of the server's URL and `dir`.
   * The built-in node keeps the server's, so its containers are its own across starts on any port.
   */
  owner?: string;
  /** What `--capacity` declared (each part given overrides the machine's); see nodeCapacity. */
  capacity?: Partial<Capacity>;
}

/** How often the containers of held environments are looked at (an end whose report was lost). */
const CHECK_MS = 60_000;
/** How long the engine has to answer a ping, asked at each heartbeat (docs/agents.md, "Health"). */
const ENGINE_PING_MS = 5_000;

const MIN_BACKOFF_MS = 250;
const MAX_BACKOFF_MS = 10_000;

export class RefusedError extends Error {}

export class NodeAgent {
  readonly server: string;
  private readonly client: BerthClient;
  /** Environments this process holds (prepared or being prepared, not yet released or discarded). */
  readonly held = new Set<string>();
  private ws: WebSocket | undefined;
  /** The standing mux to the server (docs/agents.md, "The relay"), while the channel is up. */
  private mux: RelayMux | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private stopped = false;
  /** drain() was called: hellos say `leaving`, prepares are refused. */
  private leaving = false;
  /** stopKeeping() was called: prepares are refused, nothing is ended. */
  private closing = false;
  private connected = false;
  private wake: (() => void) | undefined;
  private readonly work = new Map<string, Promise<unknown>>();
  private readonly log: (line: string) => void;
  readonly runtime: NodeRuntime;
  private readonly commands: CommandHost;
  private readonly builds: NodeBuilds;
  /** The warm containers this process holds, by slot: which making of it (`since`), made or being made. */
  private readonly warm = new Map<string, { since: string; hash: string; ready: boolean }>();
  private checks: NodeJS.Timeout | undefined;
  private engineChecks: NodeJS.Timeout | undefined;
  /** Its pool's images (the last welcome's or `images` message's), and those of them its engine holds, as said to the server. */
  private poolImages = new Set<string>();
  private readonly imagesHeld = new Set<string>();
  /** Why the engine does not answer (null: it does), as last said to the server. */
  private engineError: string | null = null;
  /** A ping under way: one at a time, so an engine that hangs holds one request, not one per check. */
  private pinging = false;
  /** What it offers, said in every hello: the declared capacity, else the machine's (its engine's, else the host's) less a reserve. */
  private capacity: Capacity | undefined;

  constructor(private readonly opts: NodeAgentOptions) {
    this.server = opts.server.replace(/\/+$/, '');
    this.client = new BerthClient({ server: this.server, token: opts.token });
    this.log = opts.log ?? ((line) => console.log(`berth node: ${line}`));
    // One node's containers, whatever its credential becomes: the server and the folder name it.
    const owner = opts.owner ?? `node-${createHash('sha256').update(`${this.server}\n${opts.dir}`).digest('hex').slice(0, 16)}`;
    this.runtime = new NodeRuntime({ engine: opts.engine, dir: opts.dir, owner, log: this.log });
    this.runtime.onEnded = (id, reason) => this.send({ type: 'ended', environment: id, reason });
    this.runtime.onUsage = (id, sample) => this.send({ type: 'usage', environment: id, sample });
    this.runtime.onImageHeld = (ref) => {
      if (!this.poolImages.has(ref) || this.imagesHeld.has(ref)) return;
      this.imagesHeld.add(ref);
      this.send({ type: 'images-held', images: [...this.imagesHeld] });
    };
    this.runtime.onWarmEnded = (slot) => {
      const held = this.warm.get(slot);
      if (!held?.ready) return;
      this.warm.delete(slot);
      this.send({ type: 'warm-failed', slot, since: held.since, error: 'its container ended' });
    };
    this.commands = new CommandHost(
      this.runtime,
      (event) => this.send(event),
      (id) => this.held.has(id),
      'berth node',
    );
    this.builds = new NodeBuilds(
      () => this.runtime.engine,
      (method, path, init) => this.call(method, path, init),
      this.log,
    );
  }

  get dir(): string {
    return this.opts.dir;
  }

  /** Runs until stop() or until the server refuses the credential (then rejects with RefusedError). */
  async run(): Promise<void> {
    await mkdir(this.opts.dir, { recursive: true });
    const machine = (await this.opts.engine?.capacity()) ?? { cpus: availableParallelism(), memory: totalmem() };
    this.capacity = nodeCapacity(machine, this.opts.capacity);
    this.log(`capacity ${this.capacity.cpus} CPUs, ${formatSize(this.capacity.memory)} memory${this.opts.capacity ? ' (declared)' : ''}`);
    await this.adopt();
    this.checks = setInterval(
      () => void this.checkContainers().catch((e: Error) => this.log(`checking containers: ${e.message}`)),
      CHECK_MS,
    );
    let backoff = MIN_BACKOFF_MS;
    while (!this.stopped) {
      const outcome = await this.connectOnce(() => {
        backoff = MIN_BACKOFF_MS;
      });
      if (outcome instanceof RefusedError) throw outcome;
      if (this.stopped) break;
      this.log(`disconnected (${outcome}); reconnecting in ${backoff} ms`);
      // stop() cuts the wait short.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, backoff);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
    }
  }

  /**
   * Leaves the pool cleanly: the server ends this node's environments (they are released here as
   * any end, their shares saved) and answers `drained` when none is left, which stops the agent.
   * At once when there is nothing to end and no server to tell. run() then resolves.
   */
  drain(): void {
    if (this.leaving || this.stopped) return;
    this.leaving = true;
    if (!this.connected && this.held.size === 0) {
      void this.leave();
      return;
    }
    this.log(
      `draining: ${this.held.size} environment(s) end first${this.connected ? '' : ' once the server is reached again'} (a second signal stops at once)`,
    );
    this.send({ type: 'leaving' });
  }

  /**
   * Stops without ending anything (the built-in node when its server stops): the warm containers
   * go, live environments' containers stay, held again by the next start (docs/agents.md).
   */
  stopKeeping(): void {
    if (this.stopped || this.closing) return;
    this.closing = true;
    void this.leave();
  }

  /**
   * The end of a clean stop: no warm container is left behind (those being made are waited for,
   * then every one of this node's is removed), then the agent stops. Live environments' containers
   * are not touched: a drain has ended them all, or they stay for the next start (stopKeeping).
   */
  private async leave(): Promise<void> {
    this.warm.clear();
    await Promise.allSettled([...this.work].filter(([key]) => key.startsWith('warm:')).map(([, making]) => making));
    try {
      await this.runtime.reconcile(this.heldOf);
    } catch (error) {
      this.log(`could not remove the warm containers: ${(error as Error).message}`);
    }
    this.stop();
  }

  /** Of environment ids, those this node holds: the live ones for runtime.reconcile. */
  private readonly heldOf = async (ids: string[]) => new Map(ids.filter((id) => this.held.has(id)).map((id) => [id, undefined]));

  stop(): void {
    this.stopped = true;
    this.wake?.();
    clearInterval(this.heartbeat);
    clearInterval(this.checks);
    clearInterval(this.engineChecks);
    this.runtime.close();
    this.ws?.close(1000, 'node agent stopping');
    this.mux?.close(1000, 'node agent stopping');
  }

  /** One connection: resolves with why it ended (a string), or a RefusedError when the server refused the credential. */
  private connectOnce(onWelcome: () => void): Promise<string | RefusedError> {
    return new Promise((resolve) => {
      const url = `${this.server.replace(/^http/, 'ws')}${NODE_CHANNEL_PATH}`;
      const ws = new WebSocket(url, { headers: { authorization: `Bearer ${this.opts.token}` } });
      this.ws = ws;
      let settled = false;
      const done = (why: string | RefusedError) => {
        clearInterval(this.heartbeat);
        if (!settled) resolve(why);
        settled = true;
      };
      ws.on('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => {
          let message = body;
          try {
            message = (JSON.parse(body) as { error: string }).error;
          } catch {
            // not JSON
          }
          const status = res.statusCode ?? 0;
          done(
            status === 401 || status === 403
              ? new RefusedError(`the server refused the node credential: ${message}`)
              : `${status} ${message}`,
          );
          ws.terminate();
        });
      });
      ws.on('open', () => this.hello());
      ws.on('message', (data) => {
        let message: ServerToNode;
        try {
          message = parseServerToNode(JSON.parse(data.toString()));
        } catch (error) {
          // Not JSON is dropped as before; a message of no known type or out of bounds is said.
          if (error instanceof DomainError) this.log(`ignored a message: ${error.message}`);
          return;
        }
        void this.dispatch(message, onWelcome).catch((err) => this.log(`${message.type} failed: ${(err as Error).message}`));
      });
      ws.on('close', (code, reason) => {
        this.connected = false;
        this.mux?.close(1001, 'the channel closed');
        if (code === closeCodeOf('unauthorized'))
          done(new RefusedError(`the server closed the channel: ${reason.toString() || 'credential refused'}`));
        else done(`closed ${code}${reason.length ? ` ${reason.toString()}` : ''}`);
      });
      ws.on('error', (err) => done(err.message));
    });
  }

  /** Its slots, capacity and the environments it holds; while draining, that it is leaving. */
  private hello(): void {
    this.send({
      type: 'hello',
      slots: this.opts.slots,
      environments: [...this.held],
      capacity: this.capacity,
      engine: this.opts.engine?.url ?? null,
      engineError: this.engineError,
      sessions: this.commands.sessionIds(),
      ...(this.leaving ? { leaving: true } : {}),
    });
  }

  send(message: NodeToServer): void {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(message));
  }

  private async dispatch(message: ServerToNode, onWelcome: () => void): Promise<void> {
    switch (message.type) {
      case 'welcome': {
        onWelcome();
        this.connected = true;
        this.openMux();
        const { node } = message;
        this.log(
          node.pool
            ? `online as ${node.name} (pool ${node.pool}, ${this.opts.slots} slot${this.opts.slots === 1 ? '' : 's'})`
            : `online as ${node.name} (the built-in node: the pools with hot nodes)`,
        );
        clearInterval(this.heartbeat);
        this.heartbeat = setInterval(() => this.send({ type: 'heartbeat' }), message.heartbeatMs);
        // The engine is asked as often; the checks go on while the channel is down, so the next hello says how it is.
        clearInterval(this.engineChecks);
        this.engineChecks = setInterval(() => void this.checkEngine(), message.heartbeatMs);
        this.runtime.startSampling(message.usageSampleMs);
        // Roots of environments the server no longer counts as live on this node are wiped.
        const live = new Set(message.environments);
        for (const id of [...this.held]) if (!live.has(id)) await this.discard(id);
        this.pullAhead(message.images);
        // An end reported while the channel was down was lost: every container is looked at again.
        await this.checkContainers();
        return;
      }
      case 'images':
        this.pullAhead(message.images);
        return;
      case 'hello-again':
        this.hello();
        return;
      case 'drained':
        // The server recorded the end of every environment that was on this node and counts it
        // offline. An agent that did not drain (a heartbeat of an earlier run's channel crossed
        // it) says it is here.
        if (this.stopped) return;
        if (!this.leaving) {
          this.hello();
          return;
        }
        this.log('drained: every environment ended; stopping');
        await this.leave();
        return;
      case 'error':
        this.log(`server: ${message.error}`);
        return;
      case 'discard':
        await this.discard(message.environment.id);
        return;
      case 'prepare':
        return this.answer(message, () => this.once(`prepare:${message.environment.id}`, () => this.prepare(message.environment)));
      case 'release':
        return this.answer(message, () => this.once(`release:${message.environment.id}`, () => this.release(message.environment)));
      case 'exec':
      case 'exec-kill':
      case 'exec-credit':
      case 'exec-input':
      case 'exec-input-end':
      case 'exec-resize':
      case 'exec-attach':
      case 'exec-detach':
      case 'exec-keep':
        this.commands.handle(message);
        return;
      case 'relay':
        return this.relay(message);
      case 'warm':
        return this.makeWarm(message.warm);
      case 'build':
        this.builds.take(message.build);
        return;
      case 'built':
        this.builds.prune(message.images);
        return;
      case 'warm-drop':
        this.warm.delete(message.slot);
        await this.runtime.dropWarm(message.slot);
        return;
    }
  }

  /** Its pool's templates' images (the welcome's, an `images` message's): those the engine lacks are pulled in the background. */
  private pullAhead(images: string[]): void {
    const valid = images.filter((ref) => {
      try {
        return normalizeImage(ref) === ref;
      } catch {
        return false;
      }
    });
    this.poolImages = new Set(valid);
    for (const ref of this.imagesHeld) if (!this.poolImages.has(ref)) this.imagesHeld.delete(ref);
    // Said again in full: what it holds of the new list (each found or pulled is added as it is).
    this.send({ type: 'images-held', images: [...this.imagesHeld] });
    this.runtime.prepull(valid);
  }

  /** Runs `work` and sends the reply (with `error` on failure). */
  private async answer(
    message: ToNode<'prepare' | 'release'>,
    work: () => Promise<{ runtime: 'container' | 'files' } | undefined>,
  ): Promise<void> {
    try {
      const result = await work();
      this.send({ ...result, type: 'reply', reply: message.reply });
    } catch (err) {
      this.log(`${message.type} failed: ${(err as Error).message}`);
      // A lifecycle command that failed is the environment's fault, not the node's: said as is.
      const fault = err instanceof LifecycleError ? { fault: 'environment' as const } : {};
      this.send({ type: 'reply', reply: message.reply, error: errorText(err), ...fault });
    }
  }

  /** The same work asked twice (a retry after a server restart) runs once. */
  private once<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const running = this.work.get(key) as Promise<T> | undefined;
    if (running) return running;
    const started = fn().finally(() => this.work.delete(key));
    this.work.set(key, started);
    return started;
  }

  root(id: string): string {
    return this.runtime.root(id);
  }

  /** The node HTTP calls: the CLI's client with the node credential (the server's `{error, code}` thrown as an ApiError). */
  call(method: string, path: string, init: { body?: Readable | string; type?: string } = {}): Promise<Answer> {
    return this.client.fetch(path, { method, headers: init.type ? { 'content-type': init.type } : {}, body: init.body });
  }

  /**
   * After a restart: every environment's container and root is held again until the server's
   * welcome says which are live (the others are discarded then). A held one whose container ended
   * meanwhile is reported after the welcome, with why (checkContainers). Other containers go.
   */
  private async adopt(): Promise<void> {
    const { present } = await this.runtime.reconcile(async (ids) => {
      return new Map(ids.filter((id) => ENV_ID.test(id)).map((id) => [id, undefined]));
    });
    for (const id of present) this.held.add(id);
    // Files-only environments have a root and no container.
    for (const name of await readdir(this.opts.dir)) if (ENV_ID.test(name)) this.held.add(name);
    if (this.held.size) this.log(`holding ${this.held.size} environment(s) until the server says which are live`);
  }

  /**
   * Containers of held environments that ended are reported (again) to the server; those of
   * environments this node does not hold are removed. A prepare in flight holds its environment.
   */
  private async checkContainers(): Promise<void> {
    const { ended } = await this.runtime.reconcile(
      this.heldOf,
      // Warm containers: those being made, and the made ones of their spec that run.
      async (found) => {
        const seen = new Map(found.map((f) => [f.slot, f]));
        const keep = new Set<string>();
        for (const [slot, w] of this.warm) {
          const there = seen.get(slot);
          if (!w.ready || (there?.running && there.hash === w.hash)) keep.add(slot);
          else this.warm.delete(slot);
        }
        return keep;
      },
    );
    for (const [id, reason] of ended) this.send({ type: 'ended', environment: id, reason });
    // The server forgets the warm containers this node no longer holds (after a restart: none).
    this.send({ type: 'warm-held', slots: [...this.warm].map(([slot, w]) => ({ slot, since: w.since })) });
  }

  /**
   * Asks the engine whether it answers; a change is said to the server (the node is `degraded`
   * while it does not). When it answers again, the containers are looked at: an environment whose
   * container went meanwhile is reported ended, and the warm containers dropped meanwhile go.
   */
  private async checkEngine(): Promise<void> {
    const engine = this.opts.engine;
    if (!engine || this.pinging || this.stopped) return;
    this.pinging = true;
    const trouble = await engine.trouble(ENGINE_PING_MS).finally(() => (this.pinging = false));
    if (trouble === this.engineError || this.stopped) return;
    const was = this.engineError;
    this.engineError = trouble;
    this.log(trouble ? `degraded: ${trouble}` : `the container engine ${engine.url} answers again`);
    this.send({ type: 'engine', error: trouble });
    if (was && !trouble) await this.checkContainers().catch((e: Error) => this.log(`checking containers: ${e.message}`));
  }

  /** Makes a slot's warm container, then says whether it is ready (that making of it, `since`). */
  private async makeWarm(spec: ToNode<'warm'>['warm']): Promise<void> {
    const { since, ...warm } = spec;
    this.warm.set(spec.slot, { since, hash: spec.hash, ready: false });
    try {
      await this.once(`warm:${spec.slot}`, () => this.runtime.warm(warm));
    } catch (error) {
      if (this.warm.get(spec.slot)?.since === since) this.warm.delete(spec.slot);
      this.log(`the warm container of ${spec.template} on slot ${spec.slot} failed: ${(error as Error).message}`);
      this.send({ type: 'warm-failed', slot: spec.slot, since, error: errorText(error) });
      return;
    }
    // Dropped or made again meanwhile: that making is not this node's to report.
    if (this.warm.get(spec.slot)?.since !== since) return;
    this.warm.set(spec.slot, { since, hash: spec.hash, ready: true });
    this.send({ type: 'warm-ready', slot: spec.slot, since });
  }

  private async prepare(message: ToNode<'prepare'>['environment']): Promise<{ runtime: 'container' | 'files' }> {
    // Only a claim that crossed the `leaving` message: the server ends it.
    if (this.leaving || this.closing) throw new Error('the node is shutting down');
    const { warm, restore: restores, ...env } = message;
    this.held.add(env.id);
    const restore = async (root: string) => {
      if (restores === false) return;
      const planned = await this.call('GET', `/v1/environments/${env.id}/restore`);
      if (planned.status === 204) return;
      const plan = (await planned.json()) as { key: string; root: string; shares: { share: string; snapshot: string }[] };
      const saved = plan.shares.map(({ share, snapshot }) => ({
        share,
        open: async () => {
          const archive = await this.call('GET', `/v1/snapshots/${snapshot}/archive`);
          return archive.body;
        },
      }));
      const files = await restoreShares(root, env.shares, saved);
      await this.call('POST', `/v1/environments/${env.id}/restored`, {
        body: JSON.stringify({ root: plan.root, files }),
        type: 'application/json',
      });
      this.log(`${env.id}: ${files} files restored from ${plan.key}`);
    };
    if (warm) this.warm.delete(warm.slot);
    if (warm && !warm.claim) await this.runtime.dropWarm(warm.slot);
    const log = this.environmentLog(env.id);
    const runtime = warm?.claim
      ? await this.runtime.claimWarm(warm.slot, warm.hash, env, restore, log)
      : await this.runtime.prepare(env, restore, log);
    this.log(
      `${env.id} prepared${warm?.claim ? ' (claimed a warm container)' : ''} (${runtime === 'container' ? `a container of ${env.image}` : 'files only'})`,
    );
    return { runtime };
  }

  /** The environment's log (its lifecycle commands' output), sent to the server as it comes, at most MAX_ENVIRONMENT_LOG of it. */
  private environmentLog(id: string): LogSink {
    return boundedLog(
      ({ step, text, at }) => this.send({ type: 'env-log', environment: id, step, text, at: at.toISOString() }),
      MAX_ENVIRONMENT_LOG,
    );
  }

  private async release(env: ToNode<'release'>['environment']): Promise<undefined> {
    // The container goes first: nothing changes the shares while they are saved.
    await this.runtime.stop(env.id);
    if (env.snapshot) {
      await saveShares(
        this.root(env.id),
        env.shares,
        env.saved,
        async (share, archive) => {
          try {
            await this.call('PUT', `/v1/snapshots/${env.id}/${encodeURIComponent(share)}`, { body: archive, type: ARCHIVE_CONTENT_TYPE });
          } catch (error) {
            // Its project was shredded since it began: nothing of it is saved, and the release goes on.
            if (!(error instanceof ApiError && error.code === 'shredded')) throw error;
            archive.destroy();
            this.log(`${env.id}: share ${share} is not saved: ${error.message}`);
          }
        },
        (share, path) => this.log(`${env.id}: the snapshot of share ${share} leaves out ${path}: not a regular file`),
      );
    }
    await this.discard(env.id);
    this.log(`${env.id} released`);
  }

  async discard(id: string): Promise<void> {
    await this.runtime.discard(id);
    this.held.delete(id);
  }

  /**
   * The standing mux to the server, on which it opens a stream for each connection into one of this
   * node's environments (no socket dialled back per connection). Opened with the channel; one that
   * drops while the channel is up is opened again a second later.
   */
  private openMux(): void {
    if (this.mux || this.stopped) return;
    const ws = new WebSocket(`${this.server.replace(/^http/, 'ws')}${RELAY_NODE_MUX_PATH}`, {
      headers: { authorization: `Bearer ${this.opts.token}` },
      ...RELAY_SOCKET_OPTIONS,
      // A zero mask: see openRelay in sandbox-agent.ts.
      generateMask: (mask) => void mask.fill(0),
    });
    const mux = new RelayMux(ws, {
      maxStreams: NODE_MUX_STREAMS,
      accept: (stream, request) => {
        const environment = (request as { environment?: unknown } | null)?.environment;
        if (typeof environment !== 'string' || !this.held.has(environment)) {
          return void stream.destroy(new Error('not an environment of this node'));
        }
        void serveMuxStream(stream, request, (j) => this.runtime.dial(j.environment, j.port));
      },
    });
    this.mux = mux;
    ws.once('open', () => heartbeat(ws));
    ws.once('unexpected-response', (_req, res) => {
      this.log(`relay mux: the server answered ${res.statusCode}`);
      ws.terminate();
    });
    ws.on('error', (error) => this.log(`relay mux: ${error.message}`));
    ws.once('close', () => {
      if (this.mux === mux) this.mux = undefined;
      if (!this.connected || this.stopped) return;
      setTimeout(() => {
        if (this.connected) this.openMux();
      }, 1000).unref();
    });
  }

  /** A relay socket: dialled back to the instance holding the sandbox's end (docs/agents.md, "The relay"). */
  private async relay(message: ToNode<'relay'>): Promise<void> {
    const { job } = message;
    if (!this.held.has(job.environment)) {
      return this.log(`refused a relay for ${job.environment}: not an environment of this node`);
    }
    const ws = new WebSocket(message.url, {
      headers: { authorization: `Bearer ${this.opts.token}` },
      ...RELAY_SOCKET_OPTIONS,
      // A zero mask: see openRelay in sandbox-agent.ts.
      generateMask: (mask) => void mask.fill(0),
    });
    ws.once('unexpected-response', (_req, res) => {
      this.log(`relay ${message.relay}: the server answered ${res.statusCode}`);
      ws.terminate();
    });
    ws.once('error', (error) => this.log(`relay ${message.relay}: ${error.message}`));
    ws.once('open', () => {
      heartbeat(ws);
      void serveRelay(ws, job, this.root(job.environment), (j) => this.runtime.dial(j.environment, j.port)).catch((error: Error) =>
        this.log(`relay ${message.relay}: ${error.message}`),
      );
    });
  }
}

const ENV_ID = /^env_[A-Za-z0-9]+$/;

/** An error's message as a node sends it: bounded by what the server takes. */
const errorText = (error: unknown) => (error as Error).message.slice(0, MAX_ERROR);
