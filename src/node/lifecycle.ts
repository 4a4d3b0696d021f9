// Lifecycle commands (docs/environments.md, "Lifecycle commands and the environment's log"): what a
// template runs inside its container, as devcontainer.json's onCreateCommand, updateContentCommand
// and postCreateCommand when the container is made, and postStartCommand when the environment starts
// or claims a warm container. The phases run one after the other; the commands of one phase (the
// object form's) side by side. Their output is the environment's log, handed on in pieces of whole
// lines, each naming the command it is of (its `step`). Of commands side by side, each one's output
// is held until it ends (up to HOLD_MAX, then it goes as it comes), so the log shows each under its
// own header rather than their lines interleaved.
import { StringDecoder } from 'node:string_decoder';
import { BERTH_STEP, cutNote, cutToBytes, ENV_LOG_PIECE } from '../protocol/environment-log';
import type { Command } from './command';

/** The devcontainer.json lifecycle properties a node runs, in the order it runs them. */
export const LIFECYCLE_PHASES = ['onCreateCommand', 'updateContentCommand', 'postCreateCommand', 'postStartCommand'] as const;
export type LifecyclePhase = (typeof LIFECYCLE_PHASES)[number];
/** Run when the container is made (for a warm template: before any claim). */
export const CREATE_PHASES: readonly LifecyclePhase[] = ['onCreateCommand', 'updateContentCommand', 'postCreateCommand'];
/** Run when the environment starts or claims a warm container. */
export const START_PHASES: readonly LifecyclePhase[] = ['postStartCommand'];

/** One command of a phase (src/modules/templates/catalog.ts, LifecycleCommand). */
export interface LifecycleCommand {
  phase: LifecyclePhase;
  /** The object form's key. */
  name?: string;
  argv: string[];
}

/** One piece of an environment's log: whose it is (`postCreateCommand`, `postCreateCommand (deps)`, `berth`), its text, when. */
export interface LogPiece {
  step: string;
  text: string;
  at: Date;
}
export type LogSink = (piece: LogPiece) => void;

/** A lifecycle command exited non-zero: the environment's own fault, said as `postCreateCommand exited 3`. */
export class LifecycleError extends Error {}

/** What a command is called in the log and in errors: `postCreateCommand`, or `postCreateCommand (deps)` for the object form. */
export const stepOf = (command: LifecycleCommand): string => (command.name ? `${command.phase} (${command.name})` : command.phase);

/** Starts argv in the environment (in its workdir, as its user), handing its output to `output`. */
export type Spawn = (argv: string[], output: (stream: 'stdout' | 'stderr', data: Buffer) => void) => Promise<Command>;

/**
 * Runs the commands of `phases`, in order, each phase's side by side; resolves when all exited 0.
 * One that exits non-zero fails its phase once the phase's other commands ended: a LifecycleError
 * naming the first of them that failed, with its code, which the log says too.
 */
export async function runLifecycle(
  commands: readonly LifecycleCommand[],
  phases: readonly LifecyclePhase[],
  spawn: Spawn,
  log: LogSink,
): Promise<void> {
  for (const phase of phases) {
    const ofPhase = commands.filter((c) => c.phase === phase);
    if (ofPhase.length === 0) continue;
    const codes = await Promise.all(
      ofPhase.map((c) => runOne(c, spawn, ofPhase.length > 1 ? held(log) : { log, release: () => undefined })),
    );
    const failed = codes.findIndex((code) => code !== 0);
    if (failed >= 0) {
      const message = `${stepOf(ofPhase[failed]!)} exited ${codes[failed]}`;
      log({ step: BERTH_STEP, text: `${message}\n`, at: new Date() });
      throw new LifecycleError(message);
    }
  }
}

/** A command's output held, at most this many bytes of it, until it ends (commands side by side). */
export const HOLD_MAX = 64 * 1024;

/** `log`, holding what it is given until release() or until that passes HOLD_MAX. */
function held(log: LogSink): { log: LogSink; release: () => void } {
  let pieces: LogPiece[] | undefined = [];
  let bytes = 0;
  const release = () => {
    for (const piece of pieces ?? []) log(piece);
    pieces = undefined;
  };
  return {
    log: (piece) => {
      if (!pieces) return log(piece);
      pieces.push(piece);
      bytes += Buffer.byteLength(piece.text);
      if (bytes > HOLD_MAX) release();
    },
    release,
  };
}

async function runOne(command: LifecycleCommand, spawn: Spawn, sink: { log: LogSink; release: () => void }): Promise<number> {
  const { log, release } = sink;
  const step = stepOf(command);
  // Its header (with the time it started), even when it prints nothing.
  log({ step, text: '', at: new Date() });
  const writer = new LineWriter(step, log);
  let started: Command | undefined;
  try {
    started = await spawn(command.argv, (stream, data) => {
      writer.write(stream, data);
      // Taken at once: its output never waits on the log.
      started?.grant(data.length);
    });
  } catch (error) {
    writer.end();
    release();
    throw new Error(`cannot run ${step}: ${(error as Error).message}`);
  }
  const code = await started.exited;
  writer.end();
  release();
  return code;
}

/** How long output waits for more before it goes as a piece. */
const FLUSH_MS = 100;

/**
 * One command's output as log pieces: whole lines of text (UTF-8 decoded per stream, NUL replaced:
 * PostgreSQL's text holds none), at most ENV_LOG_PIECE characters each, sent once that much is
 * ready or FLUSH_MS after the first line waiting; a line longer than a piece goes in parts.
 */
export class LineWriter {
  private readonly decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  private readonly partial = { stdout: '', stderr: '' };
  private ready = '';
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly step: string,
    private readonly log: LogSink,
  ) {}

  write(stream: 'stdout' | 'stderr', data: Buffer): void {
    this.take(stream, this.decoders[stream].write(data));
  }

  /** The command ended: what is left goes now. */
  end(): void {
    for (const stream of ['stdout', 'stderr'] as const) {
      this.take(stream, this.decoders[stream].end());
      this.ready += this.partial[stream];
      this.partial[stream] = '';
    }
    this.flush();
  }

  private take(stream: 'stdout' | 'stderr', text: string): void {
    if (!text) return;
    // biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is replaced.
    let pending = this.partial[stream] + text.replace(/\u0000/g, '\uFFFD');
    const lineEnd = pending.lastIndexOf('\n');
    if (lineEnd >= 0) {
      this.ready += pending.slice(0, lineEnd + 1);
      pending = pending.slice(lineEnd + 1);
    }
    if (pending.length >= ENV_LOG_PIECE) {
      this.ready += pending;
      pending = '';
    }
    this.partial[stream] = pending;
    if (this.ready.length >= ENV_LOG_PIECE) this.flush();
    else if (this.ready && !this.timer) {
      this.timer = setTimeout(() => this.flush(), FLUSH_MS);
      this.timer.unref();
    }
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.ready) {
      let end = Math.min(ENV_LOG_PIECE, this.ready.length);
      // Never between the halves of a surrogate pair.
      if (end < this.ready.length && /[\uD800-\uDBFF]/.test(this.ready[end - 1]!)) end--;
      this.log({ step: this.step, text: this.ready.slice(0, end), at: new Date() });
      this.ready = this.ready.slice(end);
    }
  }
}

/**
 * `sink`, passing on at most `maxBytes` of text (UTF-8): past that, one line of Berth's says the log
 * was cut there, and nothing more goes.
 */
export function boundedLog(sink: LogSink, maxBytes: number): LogSink {
  let used = 0;
  let cut = false;
  return (piece) => {
    if (cut) return;
    const bytes = Buffer.byteLength(piece.text);
    if (used + bytes <= maxBytes) {
      used += bytes;
      return sink(piece);
    }
    cut = true;
    const fits = cutToBytes(piece.text, maxBytes - used);
    if (fits) sink({ ...piece, text: fits });
    sink({ step: BERTH_STEP, text: cutNote(maxBytes), at: piece.at });
  };
}
