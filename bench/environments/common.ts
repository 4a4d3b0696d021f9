/**
 * What every process of the environments benchmark shares: knobs, the GraphQL documents, a small
 * request/response channel over the child-process IPC pipe, and the measuring hooks every server
 * process answers (CPU, RSS, CPU profiles). See bench/environments.ts for the whole picture.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { createInterface } from 'node:readline';
import pg from 'pg';

export function knob(name: string, fallback: number): number {
  const raw = process.env[name];
  const n = raw ? Number(raw) : fallback;
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, got "${raw}"`);
  return n;
}

/** A comma-separated knob, each item checked against what it may be. */
export function listKnob<T extends string>(name: string, fallback: readonly T[], allowed: readonly T[]): T[] {
  const raw = process.env[name];
  const items = raw === undefined ? [...fallback] : raw.split(',').filter(Boolean);
  for (const item of items) {
    if (!allowed.includes(item as T)) throw new Error(`${name}: unknown item "${item}" (allowed: ${allowed.join(', ')})`);
  }
  return items as T[];
}

/** Every field of an environment, as Berth's GraphQL API names them (~25 with the nested ones). */
export const ENV_FIELDS = `id name template state node sandbox pool labels project readyMs error createdBy
  created ready stopped expires idleUntil idle hard
  exports { service listen target } shares { name direction envPath localPath files }
  snapshot restored { key root files created }`;
export const QUERY = `query Environment($id: String!) { environment(id: $id) { ${ENV_FIELDS} } }`;
export const SUBSCRIPTION = `subscription Environments { environments { ${ENV_FIELDS} } }`;

/** Every column of the table, as the three hand-made peers expose it. */
const COLUMNS = `id orgId name template pool state node sandboxId labels project error createdBy created starting startMs
  ready readyMs stopped expires idleUntil idleMs hardMs exports shares sync snapshot restore restored queueSeq workClaim version`;

export const PEER_QUERY = `query Environment($id: String!) { environment(id: $id) { ${COLUMNS} } }`;
/** PostGraphile's amber preset names the `id` column `rowId` and the row's field `environmentByRowId`. */
export const POSTGRAPHILE_QUERY = `query Environment($id: String!) { environmentByRowId(rowId: $id) { ${COLUMNS.replace(/^id /, 'rowId ')} } }`;

export type PeerName = 'postgraphile' | 'yoga' | 'graphql-js' | 'graphql-jit';
export const PEER_LABELS: Record<PeerName, string> = {
  postgraphile: 'peer: PostGraphile 5 (grafserv, node:http)',
  yoga: 'peer: graphql-yoga + graphql-js resolver',
  'graphql-js': 'peer: graphql-js execute on node:http',
  'graphql-jit': 'peer: graphql-jit on node:http',
};

export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** The p-th percentile of values in any order. */
export const pct = (values: number[], p: number) =>
  percentile(
    [...values].sort((a, b) => a - b),
    p,
  );

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export async function waitFor(what: string, ms: number, check: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`);
    await sleep(50);
  }
}

/** Wall-clock milliseconds with sub-millisecond precision, comparable across processes. */
export const wallMs = () => performance.timeOrigin + performance.now();

// ---------------------------------------------------------------------------------------------
// Parent ↔ child: requests with answers, plus events pushed by the child.

interface Request {
  rpc: number;
  method: string;
  params: unknown;
}
type Answer = { rpc: number; result: unknown } | { rpc: number; error: string };
export interface Pushed {
  event: string;
  [key: string]: unknown;
}

export interface Child {
  process: ChildProcess;
  call<T = unknown>(method: string, params?: unknown): Promise<T>;
  on(event: string, listener: (msg: Pushed) => void): void;
  /** Resolves when the process has ended. */
  exited: Promise<void>;
  kill(): void;
}

/**
 * Forks one of the benchmark's scripts (TypeScript, through the same tsx loader as this process),
 * with extra node flags. Each child inherits stdout/stderr so its complaints are seen; with
 * `drainStdout` its stdout is a pipe read line by line, warnings and errors shown (Berth's log).
 */
export function forkChild(
  script: URL,
  args: string[] = [],
  nodeFlags: string[] = [],
  env?: NodeJS.ProcessEnv,
  opts: { drainStdout?: boolean } = {},
): Child {
  const child = fork(script.pathname, args, {
    execArgv: [...process.execArgv, ...nodeFlags],
    stdio: ['ignore', opts.drainStdout ? 'pipe' : 'inherit', 'inherit', 'ipc'],
    env: env ?? process.env,
  });
  // Read as a log collector reads a service's stdout; only warnings and errors are shown.
  if (opts.drainStdout) {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (/^\{"level":"(warn|error|fatal)"/.test(line)) process.stderr.write(`${line}\n`);
    });
  }
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  const listeners = new Map<string, ((msg: Pushed) => void)[]>();
  let next = 0;
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      for (const p of pending.values()) p.reject(new Error(`${script.pathname} ended (${signal ?? code}) before answering`));
      pending.clear();
      resolve();
    }),
  );
  child.on('message', (msg: Answer | Pushed) => {
    if (typeof msg.rpc === 'number') {
      const answer = msg as Answer;
      const p = pending.get(answer.rpc);
      pending.delete(answer.rpc);
      if ('error' in answer) p?.reject(new Error(answer.error));
      else p?.resolve(answer.result);
      return;
    }
    const pushed = msg as Pushed;
    for (const listener of listeners.get(pushed.event) ?? []) listener(pushed);
  });
  return {
    process: child,
    call<T>(method: string, params?: unknown) {
      const rpc = next++;
      return new Promise<T>((resolve, reject) => {
        if (child.exitCode !== null || child.signalCode !== null) return reject(new Error(`${script.pathname} has ended`));
        pending.set(rpc, { resolve: resolve as (v: unknown) => void, reject });
        child.send({ rpc, method, params } satisfies Request);
      });
    },
    on(event, listener) {
      listeners.set(event, [...(listeners.get(event) ?? []), listener]);
    },
    exited,
    kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill();
    },
  };
}

type Handler = (params: any) => unknown;

/** To the parent, unless it is gone (then this process is about to end anyway). */
function toParent(msg: unknown): void {
  if (process.connected) process.send!(msg, undefined, undefined, () => undefined);
}

/** Child side: answers the parent's requests with these handlers; ends when the parent goes. */
export function serve(handlers: Record<string, Handler>): void {
  process.on('disconnect', () => process.exit(0));
  process.on('message', async (msg: Request) => {
    if (typeof msg?.rpc !== 'number') return;
    const handler = handlers[msg.method];
    try {
      if (!handler) throw new Error(`no handler for ${msg.method}`);
      const result = await handler(msg.params);
      toParent({ rpc: msg.rpc, result: result ?? null } satisfies Answer);
    } catch (error) {
      toParent({ rpc: msg.rpc, error: error instanceof Error ? (error.stack ?? error.message) : String(error) } satisfies Answer);
    }
  });
}

export function push(event: string, data: Record<string, unknown> = {}): void {
  toParent({ event, ...data });
}

// ---------------------------------------------------------------------------------------------
// Measuring hooks of a server process (Berth, the peers, the stock fan-out server).

export interface Usage {
  /** process.cpuUsage() of the server's own process, user + system, in µs. */
  cpuUs: number;
  /** Of which in the kernel (system calls, loopback TCP), in µs. */
  systemUs: number;
  /** Statements sent through node-postgres by this process so far (the driver of Berth and the peers). */
  queries: number;
  rss: number;
  heapUsed: number;
  at: number;
}

// Every statement node-postgres sends, BEGIN and COMMIT included, whoever sends it (Prisma's
// driver adapter, the raw pool, the baselines): queries per request are the first thing a read's
// cost follows.
let queries = 0;

/** Counts the statements of this node-postgres `Client` class: Berth's, or another copy of pg (bench/peers' for PostGraphile). */
export function countQueries(Client: typeof pg.Client): void {
  const query = Client.prototype.query as (...args: unknown[]) => unknown;
  Client.prototype.query = function counted(this: pg.Client, ...args: unknown[]) {
    queries++;
    return query.apply(this, args);
  } as typeof pg.Client.prototype.query;
}

/**
 * `usage` (optionally after a full garbage collection, with node's --expose-gc), and CPU profiles
 * of chosen windows: the same V8 sampling profiler as `node --cpu-prof`, started and stopped around
 * one measured phase so each .cpuprofile holds that phase only.
 */
export function measuringHandlers(): Record<string, Handler> {
  let session: Session | undefined;
  countQueries(pg.Client);
  return {
    usage(params?: { gc?: boolean }) {
      if (params?.gc && globalThis.gc) {
        globalThis.gc();
        globalThis.gc();
      }
      const cpu = process.cpuUsage();
      const mem = process.memoryUsage();
      return {
        cpuUs: cpu.user + cpu.system,
        systemUs: cpu.system,
        queries,
        rss: mem.rss,
        heapUsed: mem.heapUsed,
        at: wallMs(),
      } satisfies Usage;
    },
    async profileStart(params: { intervalUs?: number }) {
      session = new Session();
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.setSamplingInterval', { interval: params.intervalUs ?? 1000 });
      await session.post('Profiler.start');
    },
    async profileStop(params: { file: string }) {
      if (!session) throw new Error('no profile running');
      const { profile } = await session.post('Profiler.stop');
      session.disconnect();
      session = undefined;
      await writeFile(params.file, JSON.stringify(profile));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Output

/** A Markdown table (it pastes into docs/benchmarks.md as is); the first `left` columns are text. */
export function table(header: string[], rows: string[][], left: number): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => (i < left ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  return [
    line(header),
    `|${widths.map((w, i) => (i < left ? `-${'-'.repeat(w)}-` : `-${'-'.repeat(w)}:`)).join('|')}|`,
    ...rows.map(line),
  ].join('\n');
}

export const ratio = (n: number, d: number) => (Number.isFinite(n / d) ? `${(n / d).toFixed(2)}x` : '-');
