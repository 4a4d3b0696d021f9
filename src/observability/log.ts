// The server's log (docs/operations.md, "Logs"): pino, JSON lines for collectors, or readable
// lines on a terminal. Nothing here is given headers, and paths pass through `loggedPath`, so no
// credential reaches a line.
import { writeSync } from 'node:fs';
import pino, { type DestinationStream, type Logger } from 'pino';
import type { LogFormat, LogLevel } from '../app/config';
import type { Log } from '../app/context';
import { currentRequest } from './requests';

export type { Logger };

const STDOUT = 1;
/** Log bytes held for a reader that does not keep up. */
const LOG_BUFFER_BYTES = 16 * 1024 * 1024;

export interface LoggerOptions {
  format: LogFormat;
  level: LogLevel;
  /** Where lines go (default stdout); tests pass a stream to read them. */
  destination?: DestinationStream;
}

export function createLogger({ format, level, destination }: LoggerOptions): Logger {
  // Written on libuv's threads, not the event loop's: a slow or stopped reader of stdout (a pipe,
  // a paused terminal) must not hold up requests. What it cannot take is held up to
  // LOG_BUFFER_BYTES, past which lines are dropped rather than memory grown; at exit the rest is
  // written synchronously (pino registers that).
  const out = destination ?? batched(pino.destination({ dest: STDOUT, sync: false, maxLength: LOG_BUFFER_BYTES }), STDOUT);
  return pino(
    {
      level,
      timestamp: pino.stdTimeFunctions.isoTime,
      // `"level":"info"` reads better in a collector than pino's numbers.
      formatters: { level: (label) => ({ level: label }) },
      // Nothing logs these; should a future line carry one, it shows as [redacted].
      redact: {
        paths: [
          'headers',
          'authorization',
          'token',
          'secret',
          'password',
          '*.headers',
          '*.authorization',
          '*.token',
          '*.secret',
          '*.password',
        ],
        censor: '[redacted]',
      },
    },
    format === 'pretty' ? readable(out) : out,
  );
}

/**
 * The same log without redaction, for the request line only: its fields are fixed, none a secret
 * (src/app/server.ts), and redaction walked every line, ~5% of a read's CPU (docs/benchmarks.md).
 */
export function requestLogger(logger: Logger): Logger {
  return logger.child({}, { redact: [] });
}

/**
 * The `Log` services are given: a message with an error is an `error` (with its stack), one
 * without a `warn`; either names the request it happened in.
 */
export function logFunction(logger: Logger): Log {
  return (message, err) => {
    const reqId = currentRequest()?.id;
    if (err === undefined) logger.warn({ reqId }, message);
    else logger.error({ err, reqId }, message);
  };
}

/**
 * Lines written in one turn of the event loop go to `out` as one write at its end: under load a
 * line per request would otherwise be a write (a system call on another thread) per request.
 * Nothing waits longer than the turn; at exit what is left is written at once.
 */
function batched(out: DestinationStream, fd: number): DestinationStream {
  let lines: string[] = [];
  const flush = () => {
    if (lines.length === 0) return;
    const chunk = lines.join('');
    lines = [];
    out.write(chunk);
  };
  process.once('exit', () => {
    if (lines.length === 0) return;
    try {
      writeSync(fd, lines.join(''));
    } catch {
      // stdout is gone: nothing to tell
    }
  });
  return {
    write(line: string) {
      if (lines.push(line) === 1) setImmediate(flush);
    },
  };
}

const HIDDEN = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'err']);

/** A terminal's line: `22:41:03.120 INFO  request method=GET path=/v1/me status=200 …`, then an error's stack. */
function readable(out: DestinationStream): DestinationStream {
  return {
    write(line: string) {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line);
      } catch {
        return out.write(line);
      }
      const time = typeof entry.time === 'string' ? entry.time.slice(11, 23) : '';
      const fields = Object.entries(entry)
        .filter(([key, value]) => !HIDDEN.has(key) && value !== undefined)
        .map(([key, value]) => `${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`);
      const err = entry.err as { stack?: string; message?: string } | undefined;
      const stack = err ? `\n    ${(err.stack ?? err.message ?? String(err)).replace(/\n/g, '\n    ')}` : '';
      const text = [time, String(entry.level).toUpperCase().padEnd(5), String(entry.msg ?? ''), ...fields].join(' ');
      out.write(`${text}${stack}\n`);
    },
  };
}
