// A connection to a port of a container's own loopback without the engine: through the node's
// standing dialler of that container, berth-envd's `dialer` (src/node/envd/berth-envd.c, which
// says how it is kept to the node). The node starts one per container at its first connection,
// from its own copy of berth-envd, with the container's network and mount namespaces held by
// descriptors; it listens on an abstract Unix socket of the host (unreachable from any container),
// then runs in those namespaces (seeing none of the host's files) as nobody, and nothing else of
// the container (not its users, processes or limits). A connection is then a connect to that
// socket and a fork inside the dialler, and the socket is the connection: no process start, and
// no pipe, between the node and the service. Through the engine's exec stream (Podman's service,
// conmon) a tunnel's bytes capped at ~0.1x of loopback and each new connection cost an exec's
// round trips (docs/benchmarks.md, "Agents").
//
// Only where the engine's containers are this machine's processes: the namespaces are taken from
// the container's first process by pid, and kept only if that process is still in the container's
// own control group once they are held, so a pid that ended and was reused (or one of another pid
// namespace) is never entered. Otherwise (a remote engine, a node not run as root, a machine that
// refuses setns) the caller uses the engine's exec.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, openSync } from 'node:fs';
import net from 'node:net';
import type { Engine } from './engine';
import { type FirstProcess, firstProcess, inContainer } from './first-process';

/** berth-envd dialer's exit when this machine refuses to enter a namespace (a hardened kernel, a seccomp profile). */
const CANNOT_ENTER = 3;
/** Standing diallers at most; past it the oldest is stopped (its connections carry on, its next dial starts another). */
const DIALERS_MAX = 1024;
/** What each connection's answer starts with (berth-envd's DIALER_TOKEN_LENGTH, in hex). */
const TOKEN_LENGTH = 32;
/**
 * The hex characters of a dialler's socket name after its prefix, so that the name fills the whole
 * sun_path (107 bytes after its NUL): Node.js 20 (libuv 1.46) pads an abstract name with NULs to
 * the whole of it, later versions do not, and a name that fills it is the same to both.
 */
const NAME_HEX = 107 - 'berth-dial-'.length;

interface Dialer {
  first: FirstProcess;
  child: ChildProcess;
  /** Its abstract socket's name (without the leading NUL). */
  name: string;
  /**
   * What it answers first on every connection: so the node never takes whatever bound the name
   * after the dialler ended (another user of this machine, who can read the name) for it.
   */
  token: Buffer;
}

/** Standing diallers by container name; a promise while one starts, so that first dials at once start one. */
const dialers = new Map<string, Promise<Dialer | undefined>>();
/** False once a dialler found that this machine refuses setns: the engine's exec from then on. */
let enters = true;

/** A container's namespaces, held by descriptors. */
interface Namespaces {
  net: number;
  mnt: number;
}

/** The network and mount namespaces of `first`'s pid, held by descriptors, if it is still the container's once they are held. */
function held(first: FirstProcess): Namespaces | undefined {
  const opened: number[] = [];
  try {
    for (const kind of ['net', 'mnt']) opened.push(openSync(`/proc/${first.pid}/ns/${kind}`, 'r'));
    if (inContainer(first)) return { net: opened[0]!, mnt: opened[1]! };
  } catch {
    // ended meanwhile
  }
  for (const fd of opened) closeSync(fd);
  return undefined;
}

/**
 * A connection to `port` on the loopback of container `name` through its standing dialler
 * (`envd`: the node's own berth-envd), or undefined when its namespaces cannot be entered from
 * here. Rejects with the dialler's words when the port cannot be reached.
 */
export async function dialInNamespace(engine: Engine, name: string, envd: string, port: number): Promise<net.Socket | undefined> {
  // Entering another namespace and dropping to nobody take root (a rootless engine's containers
  // are in a user namespace a non-root node could not enter either).
  if (!enters || !engine.local || process.getuid?.() !== 0) return undefined;
  const dialer = await dialerOf(engine, name, envd);
  return dialer && connect(dialer, port);
}

/** The container's standing dialler: the one held while its first process is still the container's, else a new one. */
async function dialerOf(engine: Engine, name: string, envd: string): Promise<Dialer | undefined> {
  const holding = dialers.get(name);
  const standing = await holding;
  if (standing && standing.child.exitCode === null && standing.child.signalCode === null && inContainer(standing.first)) return standing;
  // Another dial replaced it meanwhile: that one.
  if (dialers.get(name) !== holding) return dialers.get(name);
  standing?.child.kill('SIGKILL');
  const forget = () => {
    if (dialers.get(name) === starting) dialers.delete(name);
  };
  const starting = start(engine, name, envd, forget);
  dialers.set(name, starting);
  if (dialers.size > DIALERS_MAX) stopDialer(dialers.keys().next().value!);
  // One that did not start is not kept: the next dial tries again (a failure is the dial's to report).
  starting.then((dialer) => dialer ?? forget(), forget);
  return starting;
}

async function start(engine: Engine, container: string, envd: string, forget: () => void): Promise<Dialer | undefined> {
  const first = await firstProcess(engine, container);
  const namespaces = first && held(first);
  if (!first || !namespaces) return undefined;
  const name = `berth-dial-${randomBytes(NAME_HEX / 2).toString('hex')}`;
  const token = randomBytes(TOKEN_LENGTH / 2).toString('hex');
  let child: ChildProcess;
  try {
    child = spawn(envd, ['dialer', name, String(first.pid)], {
      stdio: ['ignore', 'ignore', 'pipe', namespaces.net, namespaces.mnt],
      env: { BERTH_DIALER_TOKEN: token },
    });
  } finally {
    closeSync(namespaces.net);
    closeSync(namespaces.mnt);
  }
  child.once('exit', forget);
  const code = await new Promise<number | undefined>((resolve) => {
    let said = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      said += chunk.toString();
      if (said.startsWith('ready\n')) resolve(undefined);
    });
    child.once('error', () => resolve(1));
    child.once('exit', (exit) => resolve(exit ?? 1));
  });
  if (code === CANNOT_ENTER) enters = false;
  if (code !== undefined) return undefined;
  // It ends with the node (berth-envd sees to it): it keeps no node from ending.
  child.unref();
  return { first, child, name, token: Buffer.from(token) };
}

/** A connection through `dialer` to `port`, once it answered that the port took it. */
function connect(dialer: Dialer, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    // Half-open: a client's end reaches the service as a half-close, and the service's the client.
    const socket = net.connect({ path: `\0${dialer.name}`, allowHalfOpen: true });
    const request = Buffer.alloc(2);
    request.writeUInt16BE(port);
    socket.write(request);
    const fail = (error: Error) => {
      socket.destroy();
      reject(error);
    };
    const ended = () => fail(new Error('the dialler into the environment closed the connection'));
    const answered = () => {
      const head = socket.read(TOKEN_LENGTH + 1) as Buffer | null;
      if (head === null) return;
      socket.off('readable', answered);
      socket.off('end', ended);
      if (head.length <= TOKEN_LENGTH || !head.subarray(0, TOKEN_LENGTH).equals(dialer.token)) {
        return fail(new Error('the dialler into the environment did not answer as itself'));
      }
      if (head[TOKEN_LENGTH] === 0) {
        socket.off('error', fail);
        return resolve(socket);
      }
      // Why, to its end.
      let why = '';
      socket.on('data', (chunk: Buffer) => (why += chunk.toString()));
      socket.once('end', () => fail(new Error(why || 'the port cannot be reached in the environment')));
    };
    socket.on('readable', answered);
    socket.once('end', ended);
    socket.once('error', fail);
  });
}

/** Stops the standing dialler of container `name`, if it has one (the container goes). */
export function stopDialer(name: string): void {
  const holding = dialers.get(name);
  dialers.delete(name);
  void holding?.then((dialer) => dialer?.child.kill('SIGKILL'));
}

/** Stops every standing dialler (the node stops). */
export function stopDialers(): void {
  for (const name of [...dialers.keys()]) stopDialer(name);
}
