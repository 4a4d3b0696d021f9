// A connection to a port of a container's own loopback without the engine: berth-envd's `dial`
// run by the node in the container's network and mount namespaces (the container's own copy at
// /.berth, a read-only mount nothing inside can replace; so the dialler sees none of the host's
// files), as nobody, and nothing else of the container (not its users, processes or limits).
// Through the engine's exec stream (Podman's service, conmon) a tunnel's bytes capped at ~0.1x of
// loopback and each new connection cost an exec's round trips (docs/benchmarks.md, "Agents");
// here they cross two pipes and a process start.
//
// Only where the engine's containers are this machine's processes: the namespaces are taken from
// the container's first process by pid, and kept only if that process is still in the container's
// own control group once they are held, so a pid that ended and was reused (or one of another pid
// namespace) is never entered. Otherwise (a remote engine, no nsenter, a node not run
// as root, a machine that refuses setns) the caller uses the engine's exec.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import type { Engine } from './engine';

const NSENTER = ['/usr/bin/nsenter', '/bin/nsenter'].find((path) => existsSync(path));
/** Who the dialler runs as: it needs no privilege to connect to a loopback port. */
const NOBODY = '65534';

/** A running dial: berth-envd's input and output, its exit, and a way to stop reading it. */
export interface DialProcess {
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  exited: Promise<number>;
  pause(): void;
  resume(): void;
  /** Ends it outright when winding down took too long. */
  kill?(): void;
}

/** Probing: the network namespace alone, and the host's /bin/true. */
const PROBE = ['--net=/proc/self/fd/3', `--setuid=${NOBODY}`, `--setgid=${NOBODY}`, '--'];
const ENTER = ['--net=/proc/self/fd/3', '--mount=/proc/self/fd/4', `--setuid=${NOBODY}`, `--setgid=${NOBODY}`, '--'];
/** Whether this machine lets the node enter (a hardened kernel or a seccomp profile may refuse setns): tried once. */
let enters: Promise<boolean> | undefined;

function canEnter(namespace: number): Promise<boolean> {
  enters ??= new Promise<boolean>((resolve) => {
    const probe = spawn(NSENTER!, [...PROBE, '/bin/true'], { stdio: ['ignore', 'ignore', 'ignore', namespace], env: {} });
    probe.once('error', () => resolve(false));
    probe.once('close', (code) => resolve(code === 0));
  });
  return enters;
}

/**
 * Each container's first process as last seen (by container name), so that a new connection asks
 * the engine nothing: the check in held() tells when it is out of date. Bounded by the containers
 * of this node (an entry goes when it proves wrong, or the oldest when there are too many).
 */
const firstProcesses = new Map<string, { id: string; pid: number }>();
const REMEMBERED = 1024;

async function lookUp(engine: Engine, name: string): Promise<{ id: string; pid: number } | undefined> {
  firstProcesses.delete(name);
  const state = await engine.inspect(name);
  if (!state?.running || state.pid <= 0) return undefined;
  const first = { id: state.id, pid: state.pid };
  firstProcesses.set(name, first);
  if (firstProcesses.size > REMEMBERED) firstProcesses.delete(firstProcesses.keys().next().value!);
  return first;
}

/** A container's namespaces, held by descriptors. */
interface Namespaces {
  net: number;
  mnt: number;
}

/**
 * The network and mount namespaces of `first`'s pid, held by descriptors, if that pid is still in
 * the container's control group once they are held (else it ended, and the pid may be another's).
 */
function held(first: { id: string; pid: number } | undefined): Namespaces | undefined {
  if (!first) return undefined;
  const opened: number[] = [];
  try {
    for (const kind of ['net', 'mnt']) opened.push(openSync(`/proc/${first.pid}/ns/${kind}`, 'r'));
    if (readFileSync(`/proc/${first.pid}/cgroup`, 'utf8').includes(first.id)) return { net: opened[0]!, mnt: opened[1]! };
  } catch {
    // ended meanwhile
  }
  for (const fd of opened) closeSync(fd);
  return undefined;
}

/**
 * `envd dial PORT` (`envdPath`: where the container has it) in the network and mount namespaces
 * of container `name`, or undefined when they cannot be entered from here.
 */
export async function dialInNamespace(engine: Engine, name: string, envdPath: string, port: number): Promise<DialProcess | undefined> {
  // Entering another namespace and dropping to nobody take root (a rootless engine's containers
  // are in a user namespace a non-root node could not enter either).
  if (!NSENTER || !engine.local || process.getuid?.() !== 0) return undefined;
  const namespaces = held(firstProcesses.get(name)) ?? held(await lookUp(engine, name));
  if (namespaces === undefined) return undefined;
  try {
    if (!(await canEnter(namespaces.net))) return undefined;
    const child = spawn(NSENTER, [...ENTER, envdPath, 'dial', String(port)], {
      stdio: ['pipe', 'pipe', 'pipe', namespaces.net, namespaces.mnt],
      env: {},
    });
    // All three are pipes (stdio above). A pipe's error (EPIPE once the dialler ended) is no more
    // than its end, which `exited` reports.
    const stdout = child.stdout as Readable;
    for (const pipe of [child.stdin, child.stdout, child.stderr]) pipe?.on('error', () => undefined);
    const exited = new Promise<number>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code) => resolve(code ?? 1));
    });
    return {
      stdin: child.stdin as Writable,
      stdout,
      stderr: child.stderr as Readable,
      exited,
      pause: () => stdout.pause(),
      resume: () => stdout.resume(),
      kill: () => child.kill('SIGKILL'),
    };
  } catch {
    return undefined;
  } finally {
    closeSync(namespaces.net);
    closeSync(namespaces.mnt);
  }
}
