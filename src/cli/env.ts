// The user's environment commands (docs/cli.md):
//   berth env create --template T [--sandbox S] [--share name=path]… [--label k=v]… [--wait]
//   berth env ls [filters] [--json]
//   berth env get ID|NAME [--json]
//   berth env rm ID|NAME
//   berth env logs ID|NAME [-f]
import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import { parseDuration } from '../kernel/durations';
import { isStoppable } from '../kernel/environment-states';
import { BerthClient, type ConnectionOptions, UnreachableError, withConnection } from './client';
import { CommandError } from './errors';
import { age, bytes, json, table } from './format';
import { durationOption, labelList, list, pairs } from './options';

export interface Environment {
  id: string;
  name: string;
  template: string;
  state: string;
  /** Why it is still pending (a Berth extension). */
  waiting?: string;
  node?: string;
  sandbox?: string;
  pool?: string;
  project?: string;
  labels?: Record<string, string>;
  error?: string;
  readyMs?: number;
  created?: string;
  ready?: string;
  stopped?: string;
  expires?: string;
  idleUntil?: string;
  idle?: string;
  hard?: string;
  createdBy?: string;
  stoppedBy?: string;
  snapshot?: string;
  exports?: { service: string; listen: string; target: string }[];
  shares?: { name: string; direction: string; envPath: string; localPath?: string; files?: string[] }[];
  restored?: { key: string; root: string; files: number; created: string };
  image?: string;
  resources?: { cpus?: number; memory?: string; pids?: number; disk?: string };
  network?: string;
  workdir?: string;
  runtime?: string;
}

/** GET /v1/environments/{id}/usage's latest sample (null before the first). */
interface Usage {
  usage: { cpu?: number; memory?: number; pids?: number; disk: number; sampled: string } | null;
}

const SUBSCRIPTION = 'subscription($id: String!) { environment(id: $id) { id name state waiting node error readyMs } }';
/** Ready, or past the point of becoming ready (stopping or ended): the wait is over. */
const settled = (state: string) => state === 'ready' || !isStoppable(state);

/**
 * Watches an environment (GraphQL subscription over SSE: the state now, then every change) until
 * it is `ready` or has ended; `onChange` hears each new state and each new reason it waits. A
 * dropped connection is picked up again with backoff: the subscription starts with the current
 * state, so no transition is missed.
 */
export async function waitForReady(
  client: BerthClient,
  id: string,
  onChange: (env: Environment) => void,
  signal?: AbortSignal,
): Promise<Environment> {
  let last: Environment | undefined;
  let failures = 0;
  for (;;) {
    try {
      await client.subscribe<{ environment: Environment }>(
        SUBSCRIPTION,
        { id },
        ({ environment }) => {
          failures = 0;
          if (environment.state !== last?.state || environment.waiting !== last?.waiting) onChange(environment);
          last = environment;
          return settled(environment.state);
        },
        signal,
      );
    } catch (error) {
      if (!(error instanceof UnreachableError) || ++failures > 6) throw error;
    }
    if (last && settled(last.state)) return last;
    await sleep(Math.min(500 * 2 ** failures, 10_000), undefined, { signal }).catch(() => {
      throw signal?.reason;
    });
  }
}

const LOG_SUBSCRIPTION = 'subscription($id: String!, $after: String) { environmentLog(id: $id, after: $after) { text cursor } }';

/**
 * Follows an environment's log (GraphQL subscription over SSE: what it holds, then what comes) until
 * the environment has ended; `show` gets each part's text. A dropped connection is picked up again
 * with backoff, after the last part shown.
 */
export async function followLog(client: BerthClient, id: string, show: (text: string) => Promise<void>): Promise<void> {
  let after: string | undefined;
  let failures = 0;
  // In order, each once the one before was written.
  let shown = Promise.resolve();
  for (;;) {
    try {
      await client.subscribe<{ environmentLog: { text: string; cursor: string } }>(
        LOG_SUBSCRIPTION,
        { id, after },
        ({ environmentLog }) => {
          failures = 0;
          after = environmentLog.cursor;
          const text = environmentLog.text;
          shown = shown.then(() => show(text));
          return undefined;
        },
      );
      await shown;
      return;
    } catch (error) {
      if (!(error instanceof UnreachableError) || ++failures > 6) throw error;
    }
    await sleep(Math.min(500 * 2 ** failures, 10_000));
  }
}

/** Writes `text`, waiting while the stream holds too much. */
function write(stream: NodeJS.WriteStream, text: string): Promise<void> {
  return new Promise((resolve) => (stream.write(text) ? resolve() : stream.once('drain', () => resolve())));
}

/**
 * Shows why a pending environment waits, on stderr. On a terminal: one line, rewritten in place
 * (cut to the terminal's width, so it never wraps). Otherwise a line each time the reason changes
 * in kind, not each time a number in it moves (`3 leases ahead`, `2 leases ahead`, …).
 */
function waitingLine(stream: NodeJS.WriteStream = process.stderr) {
  let open = false;
  let last: string | undefined;
  return {
    show(name: string, waiting: string | undefined) {
      if (!waiting) return;
      const line = `${name}: waiting: ${waiting}`;
      if (stream.isTTY) {
        if (line === last) return;
        const width = Math.max(20, (stream.columns || 80) - 1);
        stream.write(`\r\x1b[K${line.length > width ? `${line.slice(0, width - 1)}…` : line}`);
        open = true;
        last = line;
        return;
      }
      const kind = line.replace(/\d+/g, '#');
      if (kind === last) return;
      stream.write(`${line}\n`);
      last = kind;
    },
    /** Ends the rewritten line before anything else is written. */
    end() {
      if (open) stream.write('\n');
      open = false;
      last = undefined;
    },
  };
}

/** What the console shows of its limits: `2 CPUs, 4GiB memory, 256 pids, 8GiB disk`. */
function resourcesLine(r: Environment['resources']): string | undefined {
  if (!r) return undefined;
  const parts = [
    r.cpus !== undefined && `${r.cpus} CPU${r.cpus === 1 ? '' : 's'}`,
    r.memory && `${r.memory} memory`,
    r.pids !== undefined && `${r.pids} pids`,
    r.disk && `${r.disk} disk`,
  ].filter((p): p is string => Boolean(p));
  return parts.length ? parts.join(', ') : undefined;
}

function usageLine(u: Usage['usage'] | undefined): string | undefined {
  if (!u) return undefined;
  const parts = [
    u.cpu !== undefined && u.cpu !== null && `cpu ${u.cpu.toFixed(2)} cores`,
    u.memory !== undefined && u.memory !== null && `memory ${bytes(u.memory)}`,
    u.pids !== undefined && u.pids !== null && `${u.pids} pids`,
    `disk ${bytes(u.disk)}`,
  ].filter((p): p is string => Boolean(p));
  return `${parts.join(', ')} (sampled ${u.sampled})`;
}

function printEnvironment(env: Environment, usage?: Usage['usage']): void {
  const rows: [string, string | undefined][] = [
    ['id', env.id],
    ['name', env.name],
    ['template', env.template],
    ['state', env.state],
    ['waiting', env.waiting],
    ['error', env.error],
    ['image', env.image],
    ['runtime', env.runtime],
    ['resources', resourcesLine(env.resources)],
    ['network', env.network],
    ['workdir', env.workdir],
    ['usage', usageLine(usage)],
    ['pool', env.pool],
    ['node', env.node],
    ['sandbox', env.sandbox],
    ['project', env.project],
    [
      'labels',
      env.labels && Object.keys(env.labels).length
        ? Object.entries(env.labels)
            .map(([k, v]) => `${k}=${v}`)
            .join(', ')
        : undefined,
    ],
    ['created', env.created && `${env.created}${env.createdBy ? ` by ${env.createdBy}` : ''}`],
    ['ready', env.ready && `${env.ready}${env.readyMs !== undefined ? ` (${env.readyMs} ms)` : ''}`],
    ['idle', env.idle && `${env.idle}${env.idleUntil ? ` (until ${env.idleUntil})` : ''}`],
    ['hard', env.hard && `${env.hard}${env.expires ? ` (expires ${env.expires})` : ''}`],
    ['stopped', env.stopped && `${env.stopped}${env.stoppedBy ? ` by ${env.stoppedBy}` : ''}`],
    ['snapshot', env.snapshot],
    ['restored', env.restored && `${env.restored.key} (${env.restored.files} files, ${env.restored.created})`],
  ];
  for (const share of env.shares ?? []) {
    rows.push([`share ${share.name}`, `${share.direction} ${share.envPath}${share.localPath ? ` <- ${share.localPath}` : ''}`]);
  }
  for (const ex of env.exports ?? []) rows.push([`export ${ex.service}`, `${ex.listen} -> ${ex.target}`]);
  const shown = rows.filter((r): r is [string, string] => r[1] !== undefined && r[1] !== '');
  const width = Math.max(...shown.map(([k]) => k.length));
  for (const [k, v] of shown) console.log(`${`${k}:`.padEnd(width + 2)}${v}`);
}

const path = (id: string) => `/v1/environments/${encodeURIComponent(id)}`;

/** The names of the sandboxes these environments are wired to (removed ones included), by id, as the console shows them. */
async function sandboxNames(client: BerthClient, environments: Environment[]): Promise<Map<string, string>> {
  if (!environments.some((e) => e.sandbox)) return new Map();
  const { sandboxes } = await client.get<{ sandboxes: { sandbox: { id: string; name: string } }[] }>('/v1/sandboxes', { removed: 'true' });
  return new Map(sandboxes.map(({ sandbox }) => [sandbox.id, sandbox.name]));
}

interface CreateOptions extends ConnectionOptions {
  template: string;
  sandbox?: string;
  share?: Record<string, string>;
  file?: Record<string, string>;
  label?: Record<string, string>;
  project?: string;
  idle?: string;
  hard?: string;
  snapshot?: string;
  restore?: string[];
  include?: string[];
  ignore: boolean;
  wait?: boolean;
  timeout?: string;
  json?: boolean;
}

interface ListOptions extends ConnectionOptions {
  state?: string;
  template?: string;
  label?: string[];
  sandbox?: string;
  project?: string;
  limit?: string;
  cursor?: string;
  json?: boolean;
}

export function registerEnvCommands(program: Command): void {
  const env = program.command('env').description('environments: lease, list, inspect and end them');

  withConnection(
    env
      .command('create')
      .description('lease an environment from a template')
      .requiredOption('--template <name>', 'the template to lease from')
      .option('--sandbox <id or name>', 'wire it to this sandbox (needed for shares and services on localhost)')
      .option(
        '--share <name=path>',
        "put a template share at this folder, relative to the sandbox agent's folder (repeatable)",
        pairs('name=path'),
      )
      .option('--file <dest=source>', 'an extra file: destination share/path to a source on the sandbox (repeatable)', pairs('dest=source'))
      .option('--label <key=value>', 'a label (repeatable)', pairs('key=value'))
      .option('--project <name>', 'the project whose key seals its files')
      .option('--idle <duration>', "idle time-out, e.g. 30m (default: the template's)", durationOption)
      .option('--hard <duration>', "hard time-out, at most 24h (default: the template's)", durationOption)
      .option('--snapshot <key>', 'save its shares under this snapshot key when it ends')
      .option('--restore <key>', 'a snapshot key (or prefix) to start from (repeatable; default: --snapshot)', list)
      .option('--include <pattern>', 'sync this path or glob even if ignored (repeatable)', list)
      .option('--no-ignore', 'apply neither .gitignore files nor the default ignores')
      .option('--wait', 'wait until it is ready; exit 1 if it fails or ends first')
      .option('--timeout <duration>', 'wait at most this long (e.g. 10m; implies --wait), then exit 1; the lease stays', durationOption)
      .option('--json', 'print the environment as JSON'),
  ).action(async (options: CreateOptions) => {
    const client = new BerthClient(options);
    const body = {
      template: options.template,
      sandbox: options.sandbox,
      shares: options.share,
      files: options.file,
      labels: options.label,
      project: options.project,
      idle: options.idle,
      hard: options.hard,
      snapshot: options.snapshot,
      restore: options.restore,
      include: options.include,
      noIgnore: options.ignore === false ? true : undefined,
    };
    const created = await client.post<{ environment: Environment; sandboxConfig?: unknown }>('/v1/environments', body);
    let environment = created.environment;
    if (!options.wait && !options.timeout) {
      if (options.json) json(created);
      else console.log(`${environment.id} ${environment.name} ${environment.state}`);
      return;
    }
    console.error(`${environment.name}: ${environment.state}`);
    const { name } = environment;
    const signal = options.timeout ? AbortSignal.timeout(parseDuration(options.timeout, 'timeout')) : undefined;
    const waiting = waitingLine();
    waiting.show(name, environment.waiting);
    const final = await waitForReady(
      client,
      environment.id,
      (e) => {
        if (e.state !== environment.state) {
          waiting.end();
          console.error(`${e.name}: ${e.state}${e.node ? ` on ${e.node}` : ''}`);
        }
        if (e.state === 'pending') waiting.show(e.name, e.waiting);
        environment = e;
      },
      signal,
    ).catch((error: unknown) => {
      waiting.end();
      if (signal?.aborted) {
        throw new CommandError(
          `environment ${name} (${environment.id}) is still ${environment.state} after ${options.timeout}${environment.waiting ? ` (${environment.waiting})` : ''}; it keeps its lease: \`berth env rm ${name}\` ends it`,
        );
      }
      throw error;
    });
    const full = await client.get<Environment>(path(final.id)).catch(() => final);
    if (final.state !== 'ready') {
      if (options.json) json(full);
      throw new CommandError(`environment ${final.name} (${final.id}) is ${final.state}${final.error ? `: ${final.error}` : ''}`);
    }
    if (options.json) json(full);
    else console.log(`${full.id} ${full.name} ready${full.node ? ` on ${full.node}` : ''}`);
  });

  withConnection(
    env
      .command('ls')
      .description('list environments, newest first')
      .option('--state <state>', 'a state, or live / ended')
      .option('--template <name>', 'only this template')
      .option('--label <key=value>', 'only with this label (repeatable; all must match)', labelList)
      .option('--sandbox <id or name>', 'only wired to this sandbox')
      .option('--project <name>', 'only of this project')
      .option('--limit <n>', 'at most this many (default 50, at most 500)')
      .option('--cursor <next>', 'the page after the one that printed this cursor')
      .option('--json', 'print {environments, next} as JSON'),
  ).action(async (options: ListOptions) => {
    const client = new BerthClient(options);
    const page = await client.get<{ environments: Environment[]; next?: string }>('/v1/environments', {
      state: options.state,
      template: options.template,
      label: options.label,
      sandbox: options.sandbox,
      project: options.project,
      limit: options.limit,
      cursor: options.cursor,
    });
    if (options.json) return json(page);
    const names = await sandboxNames(client, page.environments);
    const now = Date.now();
    const rows = page.environments.map((e) => [
      e.id,
      e.name,
      e.template,
      e.state,
      e.node ?? '-',
      e.sandbox ? (names.get(e.sandbox) ?? e.sandbox) : '-',
      e.created ? age(now - Date.parse(e.created)) : '-',
      Object.entries(e.labels ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(','),
    ]);
    if (rows.length === 0) console.error('no environments');
    else console.log(table(['ID', 'NAME', 'TEMPLATE', 'STATE', 'NODE', 'SANDBOX', 'AGE', 'LABELS'], rows));
    if (page.next) console.error(`more: berth env ls --cursor ${page.next}`);
  });

  withConnection(env.command('get <id>').description('show one environment, by id or name').option('--json', 'print it as JSON')).action(
    async (id: string, options: ConnectionOptions & { json?: boolean }) => {
      const client = new BerthClient(options);
      const environment = await client.get<Environment>(path(id));
      if (options.json) json(environment);
      else {
        // A running environment's latest usage sample, as the console shows it.
        const usage = isStoppable(environment.state) ? (await client.get<Usage>(`${path(environment.id)}/usage`)).usage : undefined;
        printEnvironment(environment, usage);
      }
    },
  );

  withConnection(
    env
      .command('rm <id...>')
      .description('end environments (by id or name); their shares are saved if they have a snapshot key')
      .option('--json', 'print the environments as JSON'),
  ).action(async (ids: string[], options: ConnectionOptions & { json?: boolean }) => {
    const client = new BerthClient(options);
    await eachOf(
      ids,
      options,
      (id) => client.delete<{ environment: Environment }>(path(id)),
      (e) => `${e.id} ${e.name} ${e.state}`,
    );
  });

  withConnection(
    env
      .command('logs <id>')
      .description("show an environment's log (what its lifecycle commands printed), by id or name")
      .option('-f, --follow', 'follow it as it grows, until the environment ends'),
  ).action(async (id: string, options: ConnectionOptions & { follow?: boolean }) => {
    const client = new BerthClient(options);
    if (options.follow) await followLog(client, id, (text) => write(process.stdout, text));
    else await write(process.stdout, await (await client.fetch(`${path(id)}/log`)).text());
  });

  withConnection(
    env
      .command('keepalive <id...>')
      .description('push back the idle time-out of environments (by id or name), as activity does')
      .option('--json', 'print the environments as JSON'),
  ).action(async (ids: string[], options: ConnectionOptions & { json?: boolean }) => {
    const client = new BerthClient(options);
    await eachOf(
      ids,
      options,
      (id) => client.post<{ environment: Environment }>(`${path(id)}/keepalive`),
      (e) => `${e.id} ${e.name} idle until ${e.idleUntil}`,
    );
  });
}

/**
 * Does `act` for every id, printing each environment as it comes (`line`); a refused one says why
 * on stderr, the others go on, and the command then fails.
 */
async function eachOf(
  ids: string[],
  options: { json?: boolean },
  act: (id: string) => Promise<{ environment: Environment }>,
  line: (env: Environment) => string,
): Promise<void> {
  const done: Environment[] = [];
  const failed: string[] = [];
  for (const id of ids) {
    try {
      const { environment } = await act(id);
      done.push(environment);
      if (!options.json) console.log(line(environment));
    } catch (error) {
      if (error instanceof UnreachableError) throw error;
      failed.push(id);
      console.error(`berth: ${id}: ${(error as Error).message}`);
    }
  }
  if (options.json) json({ environments: done });
  if (failed.length) throw new CommandError(`${failed.length} of ${ids.length} failed: ${failed.join(' ')}`);
}
