// Running a command in an environment (docs/agents.md, "Exec"): inside its container, through its
// node's runtime (src/node/runtime.ts), in the template's workdir, as the image's user; output
// streamed to the caller as it comes; the Exec row (command, exit code, duration, actor) written
// here, by the server, when the command ends. A files-only environment runs nothing (no_runtime).
//
// One path for every node: the command and what follows it (kill, credit, input, resize) go to the
// node's inbox `node:<id>` (the built-in node's as any other's); the node's output comes back as events on the topic
// `exec:<node>:<run id>`, sent by the instance holding the node (src/edges/channels/node-channel.ts)
// under that node's id only. Both hops skip the database when the other end is in this process
// (Events.send). The run id is random and lives only as long as the caller's request: a caller
// that goes away stops the command's whole session.
import { randomUUID } from 'node:crypto';
import type { Actor, Deps } from '../../app/context';
import type { Environment, Exec } from '../../generated/prisma/client';
import { requireOwner } from '../../kernel/access';
import { ConflictError, DomainError, NotFoundError, UnavailableError, ValidationError } from '../../kernel/errors';
import { newId } from '../../kernel/names';
import type { SessionOptions, TermSize } from '../../node/command';
import { EXEC_CHUNK, EXEC_GRANT, SESSION_INPUT_WINDOW } from '../../protocol/dataplane';
import { nodeTopics, sendToNode } from '../../protocol/node-bus';
import type { DistributiveOmit, ExecTopicEvent, ToNode } from '../../protocol/node-channel';
import { checkAudited, whoOf } from '../audit';
import { findCommandEnvironment, recordExecRow } from './service';

export type ExecEvent = { kind: 'output'; stream: 'stdout' | 'stderr'; data: Buffer } | { kind: 'exit'; exec: Exec };
/** What a session's connection sees: also, when it attached again, where its replay starts (byte `from` of the whole output). */
export type SessionEvent = ExecEvent | { kind: 'replay'; from: number };

const MAX_ARGS = 1024;
/** Sessions one environment may hold at once, attached or running on their grace. */
export const MAX_ENVIRONMENT_SESSIONS = 32;
const MAX_COMMAND = 64 * 1024;

/** `argv` as one line a shell would read back the same (what the Exec row's `command` shows). */
export function commandLine(argv: string[]): string {
  return argv.map((a) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/**
 * Refuses to run anything in a files-only environment (no image, or a node without an engine),
 * saying what is missing and how to add it.
 */
export function requireRuntime(env: Environment, what: string): void {
  if (env.runtime === 'container') return;
  if (!env.image) {
    throw new ConflictError(
      `environment ${env.name} holds files only: template ${env.template} has no image, so no ${what} can run; give the template an "image" (PUT /v1/templates/${env.template}) and lease again`,
      'no_runtime',
    );
  }
  throw new ConflictError(
    `environment ${env.name} holds files only: node ${env.node} has no container engine, so no ${what} can run; give it one (DOCKER_HOST for the built-in pool, berth node --engine) and lease again`,
    'no_runtime',
  );
}

function validateArgv(argv: unknown): string[] {
  if (!Array.isArray(argv) || argv.length === 0) throw new ValidationError('command: must be a non-empty list of strings', 'command');
  if (argv.length > MAX_ARGS) throw new ValidationError(`command: at most ${MAX_ARGS} arguments`, 'command');
  if (argv.some((a) => typeof a !== 'string')) throw new ValidationError('command: must be a list of strings', 'command');
  if ((argv as string[]).some((a) => a.includes('\0'))) throw new ValidationError('command: arguments must not contain NUL', 'command');
  if (argv[0] === '') throw new ValidationError('command: the program must not be empty', 'command');
  if (commandLine(argv as string[]).length > MAX_COMMAND)
    throw new ValidationError(`command: longer than ${MAX_COMMAND} characters`, 'command');
  return argv as string[];
}

/** An Exec as REST and sessions show it (the spec's exec record). */
export function execRecord(e: Exec) {
  return {
    id: e.id,
    lease: e.environmentId,
    time: e.time.toISOString(),
    actor: e.actor,
    command: e.command,
    exitCode: e.exitCode,
    durationMs: e.durationMs,
  };
}

/** A started command: its events, and (sessions) its input and terminal. */
export interface StartedCommand {
  /** Its output, then its recorded Exec. Ending the iteration early stops the command (a session: leaves it). */
  events: AsyncIterable<SessionEvent>;
  /** Bytes for its input; resolves once fewer than SESSION_INPUT_WINDOW bytes wait on the way. */
  input(data: Buffer): Promise<void>;
  endInput(): void;
  resize(size: TermSize): void;
  /** An interactive command's session id (ses_…): it can be attached to again after a drop. */
  session?: string;
  /** Kills the command's whole session (the caller ended it, as against dropping away). */
  kill(): void;
}

/** What startCommand checks and how the command runs. */
export interface StartOptions {
  /** The caller went away: the command is stopped (recorded with the signal's exit code); a session is left to its grace. */
  signal?: AbortSignal;
  /** An interactive command: it takes input, and with `tty` has a terminal; it is a session (docs/agents.md, "Sessions"). */
  session?: SessionOptions;
}

/**
 * Runs `argv` on the environment's node (members of its organization; `ready` environments only)
 * and yields its output, then its recorded Exec. Ending the iteration early stops the command.
 */
export async function runCommand(
  deps: Deps,
  actor: Actor,
  envRef: string,
  command: unknown,
  signal?: AbortSignal,
): Promise<AsyncIterable<ExecEvent>> {
  // Not a session: nothing is replayed.
  return (await startCommand(deps, actor, envRef, command, { signal })).events as AsyncIterable<ExecEvent>;
}

/** The environment a command may run in: the caller's to use, ready, with a runtime whose engine answers. */
export async function commandEnvironment(deps: Deps, actor: Actor, envRef: string): Promise<Environment> {
  const { env, engineError } = await findCommandEnvironment(deps, actor, envRef);
  await checkAudited(deps, actor, { action: 'exec.run', target: { kind: 'environment', id: env.id } }, () =>
    requireOwner(actor, env, `environment ${env.name}`),
  );
  if (env.state !== 'ready')
    throw new ConflictError(`environment ${env.name} is ${env.state}; commands run in ready environments`, 'invalid_transition');
  requireRuntime(env, 'command');
  // Refused while the environment's node says its engine does not answer (it would only fail there).
  if (engineError) {
    throw new UnavailableError(
      `environment ${env.name} cannot run commands now: on node ${env.node}, ${engineError}; commands run again once it answers`,
      'engine_unavailable',
    );
  }
  return env;
}

export async function startCommand(
  deps: Deps,
  actor: Actor,
  envRef: string | Environment,
  command: unknown,
  options: StartOptions = {},
): Promise<StartedCommand> {
  const { signal, session } = options;
  const argv = validateArgv(command);
  const env = typeof envRef === 'string' ? await commandEnvironment(deps, actor, envRef) : envRef;
  const run = randomUUID();
  const node = env.nodeId;
  if (!node) throw new ConflictError(`environment ${env.name} is on no node`, 'no_runtime');
  const events = deps.events.subscribe(nodeTopics.exec(node, run))[Symbol.asyncIterator]();
  // Listening starts with the first next(), before the command starts.
  const first = events.next();
  const started = Date.now();
  const held = session ? await openSession(deps, actor, env, node, run, argv, session) : undefined;
  await sendToNode(deps, node, {
    type: 'exec',
    exec: run,
    environment: { id: env.id },
    argv,
    workdir: env.workdir,
    ...(session ? { session: { ...session, ...held!.wire } } : {}),
  });
  return follow(deps, env, node, run, events, first, {
    signal,
    interactive: session !== undefined,
    tty: session?.tty !== undefined,
    ...(held
      ? { session: held.id, attach: held.wire.attach }
      : {
          record: (exitCode: number) =>
            recordExecRow(deps, actor, env.id, { command: commandLine(argv), exitCode, durationMs: Date.now() - started }),
        }),
  });
}

/** A new session's row (what callers list) and what its node is told of it. */
async function openSession(
  deps: Deps,
  actor: Actor,
  env: Environment,
  node: string,
  run: string,
  argv: string[],
  options: SessionOptions,
): Promise<{ id: string; wire: { id: string; attach: string; graceMs: number; keepMs: number } }> {
  // Each holds up to a scrollback's worth of its node's memory, attached or not.
  const open = await deps.prisma.session.count({ where: { environmentId: env.id } });
  if (open >= MAX_ENVIRONMENT_SESSIONS) {
    throw new DomainError(
      `environment ${env.name} has ${open} sessions running, the most it may: end one (berth session end, DELETE …/sessions/{session}) first`,
      'too_many_sessions',
    );
  }
  const id = newId('ses');
  const now = deps.clock.now();
  await deps.prisma.session.create({
    data: {
      id,
      environmentId: env.id,
      orgId: env.orgId,
      nodeId: node,
      run,
      command: commandLine(argv),
      tty: options.tty !== undefined,
      startedBy: { ...whoOf(actor) },
      created: now,
      lastActivity: now,
      attached: 1,
    },
  });
  return { id, wire: { id, attach: randomUUID(), graceMs: deps.config.sessionGraceMs, keepMs: deps.config.nodeHeartbeatMs } };
}

/**
 * Another connection to a running session (its environment's rules checked by the caller): its
 * scrollback first, then live output, input and resizes as on the connection that started it.
 */
export async function attachSession(deps: Deps, env: Environment, sessionId: string, signal?: AbortSignal): Promise<StartedCommand> {
  const row = await deps.prisma.session.findFirst({ where: { id: sessionId, environmentId: env.id } });
  if (!row) throw new NotFoundError(`session ${sessionId} of environment ${env.name} (it ended, or never was)`);
  const events = deps.events.subscribe(nodeTopics.exec(row.nodeId, row.run))[Symbol.asyncIterator]();
  const first = events.next();
  const attach = randomUUID();
  await sendToNode(deps, row.nodeId, { type: 'exec-attach', exec: row.run, attach });
  return follow(deps, env, row.nodeId, row.run, events, first, {
    signal,
    interactive: true,
    tty: row.tty,
    session: row.id,
    attach,
    replaying: true,
  });
}

interface Follow {
  signal?: AbortSignal;
  /** It takes input (a session). */
  interactive: boolean;
  tty: boolean;
  /** A session: ending the iteration leaves it (`exec-detach`) instead of stopping it, and its node records its end. */
  session?: string;
  attach?: string;
  /** Live output is dropped until the node starts the replay of the scrollback for this attachment (which holds it). */
  replaying?: boolean;
  /** A plain command's end, recorded by the instance serving its caller. */
  record?: (exitCode: number) => Promise<Exec>;
}

/** The caller's side of a command on `node`: its events from the topic, and what the caller sends it. */
function follow(
  deps: Deps,
  env: Environment,
  node: string,
  run: string,
  events: AsyncIterator<ExecTopicEvent>,
  first: Promise<IteratorResult<ExecTopicEvent>>,
  opts: Follow,
): StartedCommand {
  const { signal, attach } = opts;
  let pending = first;
  let finished = false;
  let replaying = opts.replaying === true;
  const tagged = attach ? { attach } : {};
  // In the order sent (Events.send keeps it per topic).
  const toNode = (
    message: DistributiveOmit<
      ToNode<'exec-kill' | 'exec-credit' | 'exec-input' | 'exec-input-end' | 'exec-resize' | 'exec-detach' | 'exec-keep'>,
      'exec'
    >,
  ) => {
    sendToNode(deps, node, { ...message, exec: run } as ToNode<'exec-kill'>).catch(() => undefined);
  };
  // The caller going away stops a command; a session is only left (its node applies the grace).
  const leave = () => {
    if (finished) return;
    if (attach) toNode({ type: 'exec-detach', attach });
    else toNode({ type: 'exec-kill' });
  };
  // An attachment tells its node it is still there, or the node lets it go (an instance that died).
  const keep = attach ? setInterval(() => toNode({ type: 'exec-keep', attach }), deps.config.nodeHeartbeatMs) : undefined;
  keep?.unref();
  // Output the caller has taken (asked for the next event after it) and not yet granted back.
  let taken = 0;
  const grant = () => {
    if (taken < EXEC_GRANT || finished) return;
    const bytes = taken;
    taken = 0;
    toNode({ type: 'exec-credit', bytes, ...tagged });
  };
  // Input sent on and not yet written to the command's container, and who waits for room.
  let inFlight = 0;
  const room: (() => void)[] = [];
  const credited = (bytes: number) => {
    inFlight = Math.max(0, inFlight - bytes);
    if (inFlight < SESSION_INPUT_WINDOW) for (const wake of room.splice(0)) wake();
  };
  // A session's caller gone: this connection is done with it (the command runs on). A plain
  // command's caller gone: it is killed, and its end still recorded here.
  let left: () => void = () => undefined;
  const leaving = new Promise<'left'>((resolve) => {
    left = () => resolve('left');
  });
  const onAbort = () => {
    leave();
    if (attach) left();
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  let unsubscribed = false;
  const unsubscribe = async () => {
    if (unsubscribed) return;
    unsubscribed = true;
    clearInterval(keep);
    signal?.removeEventListener('abort', onAbort);
    await events.return?.();
  };
  const output = (async function* (): AsyncGenerator<SessionEvent, void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      for (;;) {
        const tick = new Promise<'tick'>((resolve) => {
          timer = setTimeout(() => resolve('tick'), 1000);
        });
        const got = await Promise.race([pending, tick, leaving]);
        clearTimeout(timer);
        if (got === 'left') return;
        if (got === 'tick') {
          const now = await deps.prisma.environment.findUnique({ where: { id: env.id }, select: { state: true, error: true } });
          if (now?.state !== 'ready' && now?.state !== 'stopping') {
            throw new DomainError(`environment ${env.name} is ${now?.state}${now?.error ? `: ${now.error}` : ''}`, 'invalid_transition');
          }
          continue;
        }
        if (got.done) throw new DomainError('the events bus closed', 'unavailable');
        pending = events.next();
        const event = got.value;
        if (event.type === 'exec-output') {
          // Another attachment's replay, or live output this one's replay already holds.
          if (event.attach ? event.attach !== attach : replaying) continue;
          const data = Buffer.from(event.data, 'base64');
          yield { kind: 'output', stream: event.stream, data };
          // A replay is bounded (the scrollback): only live output is paced.
          if (event.attach) continue;
          taken += data.length;
          grant();
        } else if (event.type === 'exec-replay') {
          if (event.attach !== attach) continue;
          replaying = false;
          yield { kind: 'replay', from: event.from };
        } else if (event.type === 'exec-input-credit') {
          if ((event.attach ?? undefined) === attach) credited(event.bytes);
        } else if (event.type === 'exec-exit') {
          finished = true;
          const exec = opts.record ? await opts.record(event.exitCode) : await recordedExec(deps, event);
          yield { kind: 'exit', exec };
          return;
        }
      }
    } finally {
      // A command that did not end (the caller left, the environment ended) is stopped, or left.
      leave();
      finished = true;
      clearTimeout(timer);
      for (const wake of room.splice(0)) wake();
      await unsubscribe();
    }
  })();
  return {
    ...(opts.session ? { session: opts.session } : {}),
    // Ending the iteration early (an unsubscribe) stops the command at once, not at its next output.
    events: {
      [Symbol.asyncIterator]: () => ({
        next: () => output.next(),
        return: async (value?: unknown) => {
          leave();
          const ended = await output.return(value as undefined);
          // An iteration never begun ran no finally: its subscription ends here.
          await unsubscribe();
          return ended;
        },
      }),
    },
    async input(data) {
      if (!opts.interactive || finished) return;
      for (let at = 0; at < data.length; at += EXEC_CHUNK) {
        const piece = data.subarray(at, at + EXEC_CHUNK);
        inFlight += piece.length;
        toNode({ type: 'exec-input', data: piece.toString('base64'), ...tagged });
      }
      if (inFlight >= SESSION_INPUT_WINDOW && !finished) await new Promise<void>((resolve) => room.push(resolve));
    },
    endInput() {
      if (!opts.interactive || finished) return;
      toNode({ type: 'exec-input-end' });
    },
    kill() {
      if (!finished) toNode({ type: 'exec-kill' });
    },
    resize(size) {
      if (!opts.tty || finished) return;
      toNode({ type: 'exec-resize', rows: size.rows, cols: size.cols });
    },
  };
}

/** A session's Exec row, written by the instance holding its node's channel (recordSessionEnd). */
async function recordedExec(deps: Deps, event: { exitCode: number; recorded?: number }): Promise<Exec> {
  const exec = event.recorded === undefined ? null : await deps.prisma.exec.findUnique({ where: { id: event.recorded } });
  if (exec) return exec;
  // Ended by someone else meanwhile (its node restarted, its environment ended): nothing of it to show.
  throw new DomainError(`the session's command ended (exit code ${event.exitCode}) but was not recorded here`, 'unavailable');
}
