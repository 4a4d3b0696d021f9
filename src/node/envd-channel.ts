// The node's one line to an environment container (docs/environments.md, "Commands"): one engine
// exec of berth-envd's `serve` (src/node/envd/berth-envd.c, where the frames are described), held
// open, over which every command of the environment starts, streams and ends. A command then costs
// a frame each way instead of an engine exec (create, attach, inspect: hundreds of milliseconds).
//
// Flow control is per command, so a caller that stops reading stops only its own command: berth-envd
// reads a command's output only as far as the credit the node forwards from grant(), and takes at
// most SERVE_INPUT_WINDOW of its input ahead of the command. The node never pauses the line, and so
// never holds more than those windows.

import type { Readable, Writable } from 'node:stream';
import { EXEC_WINDOW } from '../protocol/dataplane';
import { type Command, type SessionOptions, sessionMode } from './command';

/** The running `serve` (an engine exec, src/node/engine.ts; in tests a local process). */
export interface ServeLine {
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  /** Resolves (or rejects) when it ended. */
  exited: Promise<number>;
}

/** Input sent to one command and not yet taken by it, at most (berth-envd's INPUT_MAX). */
export const SERVE_INPUT_WINDOW = 256 * 1024;
/** The longest payload berth-envd takes (SERVE_PAYLOAD_MAX); its own output frames are shorter. */
const PAYLOAD_MAX = 512 * 1024;
/** Input bytes in one frame. */
const DATA_MAX = 64 * 1024;
/**
 * Frames written to the line and not yet taken by berth-envd, at most: past this it is taken to be
 * stuck (stopped from inside the environment) and the line ends, rather than the node's memory
 * growing with every command asked of it.
 */
export const LINE_BACKLOG_MAX = 32 * 1024 * 1024;
/** What a command's exit is when it was killed, or lost with the line. */
const KILLED = 137;

type Output = (stream: 'stdout' | 'stderr', data: Buffer) => void;

interface Running {
  output: Output;
  end: (code: number) => void;
  killed: boolean;
  /** Input not sent yet (beyond the window), in pieces of at most DATA_MAX. */
  queued: { data: Buffer; written?: () => void }[];
  /** Input bytes sent and not yet taken by the command. */
  unacknowledged: number;
  /** Callers told once the command took their input's last byte, counted from the first byte sent. */
  waiting: { upTo: number; written: () => void }[];
  sent: number;
  taken: number;
  endQueued: boolean;
  endSent: boolean;
}

const head = (type: string, id: number, length: number) => {
  const bytes = Buffer.alloc(9);
  bytes.write(type, 0, 'latin1');
  bytes.writeUInt32BE(4 + length, 1);
  bytes.writeUInt32BE(id, 5);
  return bytes;
};

const number = (n: number) => {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(n);
  return bytes;
};

export class EnvdChannel {
  private readonly commands = new Map<number, Running>();
  private lastId = 0;
  private pending: Buffer = Buffer.alloc(0);
  private problem = '';
  closed = false;

  /**
   * `line` is the running `serve`; `onClose` hears once that it ended (the container ended, the
   * engine went away, the process was killed, or it spoke out of protocol), with why.
   */
  constructor(
    private readonly line: ServeLine,
    private readonly onClose: (why: string) => void,
  ) {
    line.stdout.on('data', (chunk: Buffer) => this.take(chunk));
    line.stderr.on('data', (chunk: Buffer) => {
      this.problem = (this.problem + chunk.toString()).slice(-1000);
    });
    line.exited.then(
      (code) => this.close(this.problem.trim().replace(/^berth-envd: /, '') || `berth-envd serve ended with ${code}`),
      (error: Error) => this.close(error.message),
    );
  }

  /** Ends the line; berth-envd kills every command it started. */
  end(): void {
    this.line.stdin.destroy();
    this.close('ended by the node');
  }

  /** Starts argv in `workdir` ('' for the container's); see NodeRuntime.exec. */
  spawn(argv: string[], workdir: string, output: Output, session?: SessionOptions): Command {
    if (this.closed) throw new Error('the line to the environment is closed');
    const fields = [session ? sessionMode(session) : 'none', workdir, ...argv];
    if (fields.some((f) => f.includes('\0'))) throw new Error('a command argument contains NUL');
    const spec = Buffer.from(fields.map((f) => `${f}\0`).join(''));
    if (spec.length + 4 > PAYLOAD_MAX) throw new Error('the command is too long');
    const id = this.newId();
    let ended!: (code: number) => void;
    const exited = new Promise<number>((resolve) => (ended = resolve));
    const running: Running = {
      output,
      end: (code) => ended(running.killed ? KILLED : code),
      killed: false,
      queued: [],
      unacknowledged: 0,
      waiting: [],
      sent: 0,
      taken: 0,
      endQueued: false,
      endSent: false,
    };
    this.commands.set(id, running);
    this.send(head('s', id, spec.length), spec);
    this.send(head('c', id, 4), number(EXEC_WINDOW));
    const live = () => this.commands.get(id) === running;
    return {
      exited,
      kill: () => {
        if (!live() || running.killed) return;
        running.killed = true;
        this.send(head('k', id, 0));
      },
      grant: (bytes) => {
        if (live() && bytes > 0) this.send(head('c', id, 4), number(Math.min(bytes, 0xffffffff)));
      },
      input: (data, written) => {
        if (!session || !live() || running.killed || running.endQueued) return written();
        if (data.length === 0) return written();
        for (let at = 0; at < data.length; at += DATA_MAX) {
          const last = at + DATA_MAX >= data.length;
          running.queued.push({ data: data.subarray(at, at + DATA_MAX), written: last ? written : undefined });
        }
        this.pump(id, running);
      },
      endInput: () => {
        if (!session || !live() || running.endQueued) return;
        running.endQueued = true;
        this.pump(id, running);
      },
      resize: (size) => {
        if (!session?.tty || !live()) return;
        const payload = Buffer.alloc(4);
        payload.writeUInt16BE(size.rows, 0);
        payload.writeUInt16BE(size.cols, 2);
        this.send(head('r', id, 4), payload);
      },
    };
  }

  private newId(): number {
    do this.lastId = this.lastId === 0xffffffff ? 1 : this.lastId + 1;
    while (this.commands.has(this.lastId));
    return this.lastId;
  }

  private send(...parts: Buffer[]): void {
    if (this.closed || this.line.stdin.destroyed) return;
    for (const part of parts) this.line.stdin.write(part);
    if (this.line.stdin.writableLength > LINE_BACKLOG_MAX) {
      this.line.stdin.destroy();
      this.close('berth-envd stopped taking frames');
    }
  }

  /** Sends queued input while the command's window has room, then its end once all of it went. */
  private pump(id: number, running: Running): void {
    while (running.queued.length > 0 && running.unacknowledged + running.queued[0]!.data.length <= SERVE_INPUT_WINDOW) {
      const { data, written } = running.queued.shift()!;
      this.send(head('d', id, data.length), data);
      running.unacknowledged += data.length;
      running.sent += data.length;
      if (written) running.waiting.push({ upTo: running.sent, written });
    }
    if (running.queued.length === 0 && running.endQueued && !running.endSent) {
      running.endSent = true;
      this.send(head('e', id, 0));
    }
  }

  /** Frames from berth-envd; one out of protocol ends the line. */
  private take(chunk: Buffer): void {
    if (this.closed) return;
    let bytes = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    while (bytes.length >= 5) {
      const type = String.fromCharCode(bytes[0]!);
      const length = bytes.readUInt32BE(1);
      const fixed = type === 'a' || type === 'x';
      if (!'12ax'.includes(type) || length < 4 || length > DATA_MAX + 4 || (fixed && length !== 8)) {
        this.line.stdin.destroy();
        this.close(`berth-envd sent a frame out of protocol (type ${bytes[0]}, ${length} bytes)`);
        return;
      }
      if (bytes.length < 5 + length) break;
      const id = bytes.readUInt32BE(5);
      const payload = bytes.subarray(9, 5 + length);
      bytes = bytes.subarray(5 + length);
      const running = this.commands.get(id);
      if (!running) continue;
      if (type === '1' || type === '2') {
        if (!running.killed) running.output(type === '1' ? 'stdout' : 'stderr', payload);
      } else if (type === 'a') {
        running.taken += payload.readUInt32BE(0);
        running.unacknowledged = running.sent - running.taken;
        while (running.waiting.length > 0 && running.waiting[0]!.upTo <= running.taken) running.waiting.shift()!.written();
        this.pump(id, running);
      } else {
        this.commands.delete(id);
        this.release(running);
        running.end(payload.readUInt32BE(0));
      }
    }
    // Copied: a slice would keep the whole chunk it came from.
    this.pending = Buffer.from(bytes);
  }

  /** Tells every caller still waiting on input it is done with: the command ended. */
  private release(running: Running): void {
    for (const { written } of running.waiting.splice(0)) written();
    for (const { written } of running.queued.splice(0)) written?.();
  }

  private close(why: string): void {
    if (this.closed) return;
    this.closed = true;
    this.pending = Buffer.alloc(0);
    for (const running of this.commands.values()) {
      this.release(running);
      running.end(KILLED);
    }
    this.commands.clear();
    this.onClose(why);
  }
}
