// A command running in an environment, as both kinds of node hold it (src/node/runtime.ts, through
// src/node/envd-channel.ts).

/** A terminal's size. */
export interface TermSize {
  rows: number;
  cols: number;
}

/** What an interactive command gets: input always; a terminal of this size when `tty` is set. */
export interface SessionOptions {
  tty?: TermSize;
}

export interface Command {
  /** The exit code: the command's, or 137 when it was killed. */
  exited: Promise<number>;
  kill(): void;
  /** The caller took `bytes` more of the output: that much more may come (EXEC_WINDOW). */
  grant(bytes: number): void;
  /** Bytes for the command's input (sessions only); `written` once they left for the container. */
  input(data: Buffer, written: () => void): void;
  /** The command's input ends (EOF; on a terminal, its EOF character). */
  endInput(): void;
  /** The terminal's new size (tty sessions only). */
  resize(size: TermSize): void;
}

/** The largest terminal a session may ask for, rows and columns alike. */
export const MAX_TERM = 1000;

/** `{rows, cols}` when `value` carries a well-formed terminal size, else undefined. */
export function termSize(value: unknown): TermSize | undefined {
  const { rows, cols } = (value ?? {}) as { rows?: unknown; cols?: unknown };
  const fine = (n: unknown): n is number => Number.isInteger(n) && (n as number) >= 1 && (n as number) <= MAX_TERM;
  return fine(rows) && fine(cols) ? { rows, cols } : undefined;
}

/** berth-envd's mode argument for a session. */
export const sessionMode = (options: SessionOptions) => (options.tty ? `tty:${options.tty.rows}:${options.tty.cols}` : 'pipe');

/**
 * A command whose start is still under way: what the caller asks of it meanwhile (a kill, credit,
 * input, a resize) is kept, in order, and applied once it started. A start that fails is the
 * command ending with `failed`'s exit code.
 */
export function whenStarted(start: Promise<Command>, failed: (error: Error) => number): Command {
  let command: Command | undefined;
  const queued: ((c: Command) => void)[] = [];
  const apply = (call: (c: Command) => void) => {
    if (command) call(command);
    else queued.push(call);
  };
  const exited = start.then(
    (started) => {
      command = started;
      for (const call of queued.splice(0)) call(started);
      return started.exited;
    },
    (error: Error) => failed(error),
  );
  return {
    exited,
    kill: () => apply((c) => c.kill()),
    grant: (bytes) => apply((c) => c.grant(bytes)),
    input: (data, written) => apply((c) => c.input(data, written)),
    endInput: () => apply((c) => c.endInput()),
    resize: (size) => apply((c) => c.resize(size)),
  };
}
