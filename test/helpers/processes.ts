// Berth and its agents as real processes on loopback, for the agents' end-to-end tests.
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { join } from 'node:path';
import { expect, vi } from 'vitest';
import { seedDatabase } from './database';

const root = new URL('../..', import.meta.url).pathname;

export interface Proc {
  proc: ChildProcess;
  /** stdout and stderr so far. */
  output(): string;
  /**
   * Resolves with the first match of `re` in the output from offset `from` on (the process's own
   * pace, no deadline but the test's).
   */
  waitFor(re: RegExp, from?: number): Promise<RegExpExecArray>;
  /** Resolves with the exit code once the process ended. */
  exited: Promise<number | null>;
  kill(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Runs `node bin/berth.js …args` (or another entry) with `env` added. */
export function spawnNode(args: string[], env: Record<string, string>): Proc {
  const proc = spawn(process.execPath, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  const waiters: { re: RegExp; from: number; resolve: (m: RegExpExecArray) => void; reject: (e: Error) => void }[] = [];
  const check = () => {
    for (const w of [...waiters]) {
      const m = w.re.exec(text.slice(w.from));
      if (m) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
    }
  };
  const onData = (chunk: Buffer) => {
    text += chunk.toString();
    if (process.env.BERTH_TEST_LOG) process.stderr.write(chunk);
    check();
  };
  proc.stdout!.on('data', onData);
  proc.stderr!.on('data', onData);
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  void exited.then(() => {
    for (const w of waiters.splice(0)) w.reject(new Error(`process ended before printing ${w.re}:\n${text}`));
  });
  return {
    proc,
    output: () => text,
    waitFor: (re, from = 0) =>
      new Promise((resolve, reject) => {
        waiters.push({ re, from, resolve, reject });
        check();
        if (proc.exitCode !== null) reject(new Error(`process ended before printing ${re}:\n${text}`));
      }),
    exited,
    async kill(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
}

export interface BerthProc extends Proc {
  url: string;
}

/**
 * What the built-in node of a test's server (and a suite's own node) offers: more than any suite
 * leases at once, as the suites are about other things than this 2-core machine's capacity
 * (placement's own suites declare theirs).
 */
export const TEST_CAPACITY = 'cpus=4096,memory=1024TiB';

/** Starts `npm start`'s program (src/app/main.ts) on a free port, `nodeArgs` given to Node; resolves once it listens. */
export async function startBerth(env: Record<string, string>, nodeArgs: string[] = []): Promise<BerthProc> {
  if (env.DATA_DIR && !env.DATABASE_URL) await seedDatabase(env.DATA_DIR);
  const p = spawnNode([...nodeArgs, '--import', 'tsx', 'src/app/main.ts'], {
    PORT: '0',
    HOST: '127.0.0.1',
    NODE_ENV: 'test',
    BUILTIN_CAPACITY: TEST_CAPACITY,
    ...env,
  });
  const m = await p.waitFor(/Berth listening on (http:\/\/\S+)/);
  return { ...p, url: m[1]! };
}

/** Whether something accepts TCP connections at host:port. */
export function answers(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** A TCP echo server on a free loopback port. */
export async function echoServer(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    socket.pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}

/** Sends `payload` to host:port, half-closes, and resolves with everything read back. */
export function echoThrough(port: number, payload: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.once('end', () => {
      socket.end();
      resolve(Buffer.concat(chunks));
    });
    socket.once('error', reject);
    socket.once('connect', () => socket.end(payload));
  });
}

/**
 * echoThrough until the whole payload comes back: a tunnel opened before the environment's service
 * listens is closed at once, empty (the service starts with the environment, not before "ready").
 * When it never does, the failure carries the end of the agent's output (why its relays failed).
 */
export async function echoedWhole(port: number, payload: Buffer, agent?: Proc): Promise<Buffer> {
  try {
    return await vi.waitFor(
      async () => {
        const back = await echoThrough(port, payload);
        expect(back.length).toBe(payload.length);
        return back;
      },
      { timeout: 30_000, interval: 100 },
    );
  } catch (error) {
    if (!agent) throw error;
    const tail = agent.output().split('\n').slice(-40).join('\n');
    throw new Error(`${(error as Error).message}\nthe agent's last lines:\n${tail}`);
  }
}

/**
 * A connection to loopback `port` that echoed `text` and stays open, tried again until it did (as
 * echoedWhole: a tunnel to a service not listening yet closes at once); `closed` resolves once it
 * closed.
 */
export function heldEcho(port: number, text: string): Promise<{ socket: net.Socket; closed: Promise<void> }> {
  return vi.waitFor(
    () =>
      new Promise<{ socket: net.Socket; closed: Promise<void> }>((resolve, reject) => {
        const socket = net.connect({ port, host: '127.0.0.1' });
        const closed = new Promise<void>((ended) => socket.once('close', () => ended()));
        let back = '';
        socket.on('data', (chunk: Buffer) => {
          back += chunk.toString();
          if (back === text) resolve({ socket, closed });
        });
        socket.on('error', () => undefined);
        void closed.then(() => reject(new Error(`the connection closed after echoing ${JSON.stringify(back)}`)));
        socket.once('connect', () => socket.write(text));
      }),
    { timeout: 30_000, interval: 100 },
  );
}

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * `node bin/berth.js args…` run to its end as a user runs it: none of the test's BERTH_URL,
 * BERTH_TOKEN and BERTH_NODE_TOKEN, `env` added; its exit code and output.
 */
export function runBerth(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const { BERTH_URL: _url, BERTH_TOKEN: _token, BERTH_NODE_TOKEN: _node, ...inherited } = process.env;
  const child = spawn(process.execPath, ['bin/berth.js', ...args], {
    cwd: root,
    env: { ...inherited, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

/** `berth exec` as a real process: its exit code and output. */
export function berthExec(url: string, token: string, ...args: string[]): Promise<Run> {
  return runBerth(['exec', args[0]!, '--', ...args.slice(1)], { BERTH_URL: url, BERTH_TOKEN: token });
}

/**
 * The sandbox folder both agent suites sync: `app/` with a .gitignore that leaves out `dist/` and
 * `*.log` (an `include` brings `dist/bundle.js` back), and `secrets/dev.env` for a `files` extra.
 */
export async function writeSandboxTree(dir: string): Promise<void> {
  await mkdir(join(dir, 'app', 'dist'), { recursive: true });
  await mkdir(join(dir, 'secrets'), { recursive: true });
  await writeFile(join(dir, 'app', '.gitignore'), 'dist/\n*.log\n');
  await writeFile(join(dir, 'app', 'main.txt'), 'version 1\n');
  await writeFile(join(dir, 'app', 'debug.log'), 'never sent\n');
  await writeFile(join(dir, 'app', 'dist', 'bundle.js'), 'console.log("included");\n');
  await writeFile(join(dir, 'secrets', 'dev.env'), 'TOKEN=abc\n');
}

/**
 * Waits until `agent` (a `berth agent` process) listens for `service` of `envId` on loopback `port`.
 * Each test server picks the same ports for the same targets (5432 -> 15432), so an agent of a suite
 * running beside this one may hold the port for a while; until this agent says it listens, a
 * connection to the port may reach the other one.
 */
export function forwarding(agent: Proc, envId: string, service: string, port: number): Promise<RegExpExecArray> {
  return agent.waitFor(new RegExp(`\\(${envId}\\): forwarding ${service}: 127\\.0\\.0\\.1:${port} `));
}

/** A process's arguments, from /proc; none once it ended (a zombie's are empty too). */
export function argvOf(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, -1);
  } catch {
    return [];
  }
}

/** The live children of `parent` on this machine, with their arguments. */
export function childProcesses(parent: number): { pid: number; argv: string[] }[] {
  const parentOf = (pid: number) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      return undefined;
    }
  };
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => parentOf(pid) === parent)
    .map((pid) => ({ pid, argv: argvOf(pid) }))
    .filter((child) => child.argv.length > 0);
}
