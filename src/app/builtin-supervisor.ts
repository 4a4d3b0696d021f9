// Runs the built-in node (docs/agents.md, "The built-in node"): `berth node --builtin`, the same
// program as any node's, in a process of its own beside the server, so that the server holds no
// container engine and opens no file an environment can write. It connects to this instance over
// loopback with a credential made for each of its processes (passed in its environment, not its arguments);
// it is restarted with a growing delay when it dies, stopped (SIGTERM: its warm containers go, its
// environments' stay for the next start) when the server stops, and ends by itself when the server
// dies (it holds the other end of its stdin).
//
// Instances of one deployment on one machine run one built-in node between them: the instance
// holding the machine-wide name `berth-builtin-<owner>` (an abstract Unix socket, released by the
// kernel when its holder dies) runs it; the others try again every few seconds.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { dropBuiltinToken, mintBuiltinToken } from '../modules/nodes';
import { topics } from '../platform/events';
import { packagePath } from '../platform/paths';
import type { Deps } from './context';

const MIN_BACKOFF_MS = 250;
const MAX_BACKOFF_MS = 10_000;
/** A node that ran this long before it died starts again at once. */
const STABLE_MS = 60_000;
/** How long a stopping node may take to remove its warm containers. */
const STOP_MS = 20_000;
/** How often an instance whose machine's built-in node runs elsewhere looks again. */
const STANDBY_MS = 3_000;

export interface BuiltinSupervisor {
  /**
   * Settles when the built-in node has taken up its first welcome, or this instance stands by for
   * another's (resolves), or when its process ends before that (rejects with its last words).
   */
  readonly ready: Promise<void>;
  /** The node process's id while it runs (tests stop it with SIGKILL). */
  pid(): number | undefined;
  stop(): Promise<void>;
}

type Lines = (line: string) => void;

export function superviseBuiltinNode(deps: Deps, url: string, info: Lines): BuiltinSupervisor {
  const { builtin, config } = deps;
  let child: ChildProcess | undefined;
  let stopping = false;
  let lock: Server | undefined;
  let retry: NodeJS.Timeout | undefined;
  let backoff = MIN_BACKOFF_MS;
  let lastWords = '';
  let heard = false;
  let settle: { resolve: () => void; reject: (e: Error) => void } | undefined;
  const ready = new Promise<void>((resolve, reject) => {
    settle = { resolve, reject };
  });
  // Unhandled only when no one waits for it.
  ready.catch(() => undefined);

  // Its first report of the warm containers it keeps ends its taking up of the welcome: what it
  // found is held again or wiped by then.
  const hello = deps.events.listen(topics.nodeSettled(builtin.id), () => {
    heard = true;
    settle?.resolve();
  });

  let token: string | undefined;
  const start = async () => {
    if (stopping) return;
    const started = Date.now();
    token = await mintBuiltinToken(deps);
    // A young generation as small as the server's (package.json's start): the node is mostly idle.
    const args = [
      '--max-semi-space-size=4',
      packagePath('bin', 'berth.js'),
      'node',
      '--builtin',
      '--server',
      url,
      '--dir',
      join(config.dataDir, 'workspaces'),
    ];
    if (config.dockerHost) args.push('--engine', config.dockerHost);
    if (config.builtinCapacity) args.push('--capacity', config.builtinCapacity);
    const proc = spawn(process.execPath, args, {
      env: { ...process.env, BERTH_NODE_TOKEN: token, BERTH_NODE_OWNER: builtin.owner },
      stdio: ['pipe', 'pipe', 'pipe'],
      // Its own process group: a terminal's Ctrl-C reaches the server, which stops it once.
      detached: true,
    });
    child = proc;
    for (const stream of [proc.stdout, proc.stderr]) {
      createInterface({ input: stream! }).on('line', (line) => {
        lastWords = line;
        info(line.replace(/^berth node: /, 'built-in node: '));
      });
    }
    // A write to a node that died meanwhile is not this process's error.
    proc.stdin!.on('error', () => undefined);
    proc.once('exit', (code, signal) => {
      child = undefined;
      if (stopping) return;
      const how = signal ? `was killed (${signal})` : `exited with ${code}`;
      if (!heard && code !== null && code !== 0) {
        settle?.reject(new Error(`the built-in node ${how}: ${lastWords.replace(/^berth(?: node)?: /, '')}`));
      }
      backoff = Date.now() - started > STABLE_MS ? MIN_BACKOFF_MS : Math.min(MAX_BACKOFF_MS, backoff * 2);
      info(`built-in node ${how}; starting it again in ${backoff} ms`);
      retry = setTimeout(launch, backoff);
    });
  };

  const takeOrWait = () => {
    if (stopping) return;
    const server = createServer();
    server.once('error', () => {
      settle?.resolve();
      retry = setTimeout(takeOrWait, STANDBY_MS);
      retry.unref();
    });
    server.listen({ path: `\0berth-builtin-${builtin.owner}` }, () => {
      lock = server;
      launch();
    });
  };
  // A start that fails (the database away) is tried again as a death is.
  const launch = () =>
    void start().catch((error: Error) => {
      if (stopping) return;
      info(`could not start the built-in node: ${error.message}; trying again in ${backoff} ms`);
      retry = setTimeout(launch, backoff);
      backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
    });
  // Abstract sockets are Linux's; elsewhere every instance runs its own.
  if (process.platform === 'linux') takeOrWait();
  else launch();

  return {
    ready,
    pid: () => child?.pid,
    async stop() {
      stopping = true;
      clearTimeout(retry);
      hello();
      const proc = child;
      if (proc && proc.exitCode === null && proc.signalCode === null) {
        const exited = once(proc, 'exit');
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), STOP_MS);
        await exited;
        clearTimeout(timer);
      }
      if (token) await dropBuiltinToken(deps, token).catch(() => undefined);
      await new Promise<void>((resolve) => (lock ? lock.close(() => resolve()) : resolve()));
    },
  };
}
