// A session on its node (docs/agents.md, "Sessions"): an interactive command that outlives the
// connection it was started on. The node keeps its recent output (SCROLLBACK bytes) and the
// connections attached to it, each with its own output credit: the command is read as fast as the
// slowest attached connection takes its output, and freely (into the scrollback only) while none
// is. With none attached it runs on for its grace, then is killed (137, like a dropped exec).
import { EXEC_WINDOW, execOutput } from '../protocol/dataplane';
import type { Command } from './command';

/** The output a session keeps for the next connection to attach (its screen and more). */
export const SCROLLBACK = 1024 * 1024;
/** An attachment not kept (`exec-keep`, credit or input) for this many of its keep intervals is gone. */
const KEEP_MISSES = 3;

type Stream = 'stdout' | 'stderr';

/** What a session says, as `exec-*` events of its run. */
export type SessionEvent =
  | { type: 'exec-output'; stream: Stream; data: string; attach?: string }
  | { type: 'exec-replay'; attach: string; from: number }
  | { type: 'exec-attached'; session: string; attached: number };

interface Attachment {
  /** Output bytes (of the command's whole output) it has taken. */
  taken: number;
  seen: number;
}

export class NodeSession {
  private readonly attachments = new Map<string, Attachment>();
  private readonly scrollback: { stream: Stream; data: Buffer }[] = [];
  private kept = 0;
  /** Output bytes the command produced, and how far it may produce (its credit so far). */
  private produced = 0;
  private allowed = EXEC_WINDOW;
  private grace: NodeJS.Timeout | undefined;
  private readonly sweep: NodeJS.Timeout;
  private ended = false;

  constructor(
    readonly id: string,
    private readonly command: Command,
    private readonly send: (event: SessionEvent) => void,
    private readonly options: { attach: string; graceMs: number; keepMs: number; now?: () => number },
  ) {
    this.attachments.set(options.attach, { taken: 0, seen: this.now() });
    this.sweep = setInterval(() => this.dropUnkept(), options.keepMs);
    this.sweep.unref();
  }

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  /** The command's output: kept, sent to the attached connections, paced by the slowest. */
  output(stream: Stream, data: Buffer): void {
    this.keep(stream, data);
    this.produced += data.length;
    if (this.attachments.size > 0) for (const event of execOutput(stream, data)) this.send(event);
    this.pace();
  }

  /** `attach` took `bytes` more of the output. */
  credit(attach: string, bytes: number): void {
    const a = this.attachments.get(attach);
    if (!a) return;
    a.taken += bytes;
    a.seen = this.now();
    this.pace();
  }

  /** A new connection: the scrollback for it alone, then live output with everyone else. */
  attach(attach: string): void {
    if (this.ended || this.attachments.has(attach)) return;
    // Where the replay starts in the command's whole output: a client that saw more skips that much.
    this.send({ type: 'exec-replay', attach, from: this.produced - this.kept });
    for (const { stream, data } of this.scrollback) for (const event of execOutput(stream, data)) this.send({ ...event, attach });
    this.attachments.set(attach, { taken: this.produced, seen: this.now() });
    clearTimeout(this.grace);
    this.grace = undefined;
    this.said();
  }

  /** The connection is still there (it also counts as seen on credit and input). */
  seen(attach: string): void {
    const a = this.attachments.get(attach);
    if (a) a.seen = this.now();
  }

  detach(attach: string): void {
    if (!this.attachments.delete(attach)) return;
    this.said();
    this.pace();
    if (this.attachments.size === 0) this.startGrace();
  }

  /** The command ended: nothing more is said or kept. */
  end(): void {
    this.ended = true;
    clearInterval(this.sweep);
    clearTimeout(this.grace);
  }

  private keep(stream: Stream, data: Buffer): void {
    const last = this.scrollback.at(-1);
    // Small writes (a terminal echoing keystrokes) are joined, so the list stays short.
    if (last && last.stream === stream && last.data.length + data.length <= 64 * 1024)
      this.scrollback[this.scrollback.length - 1] = { stream, data: Buffer.concat([last.data, data]) };
    else this.scrollback.push({ stream, data: Buffer.from(data) });
    this.kept += data.length;
    while (this.kept > SCROLLBACK) {
      const first = this.scrollback[0]!;
      const over = this.kept - SCROLLBACK;
      if (first.data.length <= over) {
        this.scrollback.shift();
        this.kept -= first.data.length;
      } else {
        first.data = first.data.subarray(over);
        this.kept -= over;
      }
    }
  }

  /** Lets the command produce up to EXEC_WINDOW past what the slowest attached connection took (past what it produced, with none). */
  private pace(): void {
    let floor = this.produced;
    for (const a of this.attachments.values()) floor = Math.min(floor, a.taken);
    const limit = floor + EXEC_WINDOW;
    if (limit <= this.allowed) return;
    this.command.grant(limit - this.allowed);
    this.allowed = limit;
  }

  private startGrace(): void {
    if (this.ended) return;
    if (this.options.graceMs === 0) {
      this.command.kill();
      return;
    }
    this.grace = setTimeout(() => this.command.kill(), this.options.graceMs);
    this.grace.unref();
  }

  private dropUnkept(): void {
    const bound = this.now() - KEEP_MISSES * this.options.keepMs;
    for (const [id, a] of this.attachments) if (a.seen < bound) this.detach(id);
  }

  private said(): void {
    if (!this.ended) this.send({ type: 'exec-attached', session: this.id, attached: this.attachments.size });
  }
}
