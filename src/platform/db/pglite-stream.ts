// The embedded PGlite spoken to by node-postgres over an in-process stream instead of a socket.
// Through @electric-sql/pglite-socket every statement crossed a Unix socket twice and each of its
// five protocol messages was a write of its own: ~200 µs a statement on these machines, three
// times PGlite's own work (docs/benchmarks.md, "The embedded database's wire"). Here a connection's
// bytes go straight into PGlite, and what one turn of the event loop wrote runs as one batch.
import { Duplex } from 'node:stream';
import type { PGlite } from '@electric-sql/pglite';

/**
 * One PGlite, one session: its connections' batches run one at a time, in order. A connection
 * that replaces another (the pool drops a broken one) starts on a clean session: the old one's
 * open transaction rolled back, its prepared statements gone (node-postgres prepares a named
 * statement again on every new connection).
 */
export class PGliteSession {
  private queue: Promise<void> = Promise.resolve();
  private connections = 0;

  constructor(private readonly db: PGlite) {}

  /** A new connection's stream (node-postgres' `stream` option). */
  connect(): PGliteStream {
    this.connections += 1;
    return new PGliteStream(this, this.connections > 1);
  }

  /** Runs `task` after every batch queued before it; a failure fails that task only. */
  run<T>(task: (db: PGlite) => Promise<T>): Promise<T> {
    const result = this.queue.then(() => task(this.db));
    this.queue = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

/** A startup packet has no type byte: its first Int32 is its whole length. */
const STARTUP_HEADER = 4;
/** Every later message: a type byte, then its length (itself included). */
const MESSAGE_HEADER = 5;

/** A node-postgres connection's stream into a PGliteSession (what node-postgres needs of a net.Socket). */
export class PGliteStream extends Duplex {
  private inbox: Buffer[] = [];
  private started = false;
  private scheduled = false;

  constructor(
    private readonly session: PGliteSession,
    private readonly replacing: boolean,
  ) {
    super();
  }

  connect(): this {
    process.nextTick(() => this.emit('connect'));
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  ref(): this {
    return this;
  }
  unref(): this {
    return this;
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.inbox.push(chunk);
    // node-postgres writes a statement as five messages in one go: they run as one batch.
    if (!this.scheduled) {
      this.scheduled = true;
      process.nextTick(() => this.flush());
    }
    callback();
  }

  override _final(callback: (error?: Error | null) => void): void {
    // After what was written before the end (its Terminate is ignored by PGlite).
    this.session
      .run(async () => undefined)
      .then(() => {
        this.push(null);
        callback();
      }, callback);
  }

  private flush(): void {
    this.scheduled = false;
    let bytes = this.inbox.length === 1 ? this.inbox[0]! : Buffer.concat(this.inbox);
    this.inbox = [];
    if (!this.started) {
      if (bytes.length < STARTUP_HEADER || bytes.length < bytes.readInt32BE(0)) {
        this.inbox = [bytes];
        return;
      }
      const length = bytes.readInt32BE(0);
      this.started = true;
      this.execute(bytes.subarray(0, length), this.replacing);
      bytes = bytes.subarray(length);
    }
    let whole = 0;
    while (whole + MESSAGE_HEADER <= bytes.length) {
      const next = whole + 1 + bytes.readInt32BE(whole + 1);
      if (next > bytes.length) break;
      whole = next;
    }
    if (whole < bytes.length) this.inbox = [bytes.subarray(whole)];
    if (whole > 0) this.execute(bytes.subarray(0, whole), false);
  }

  private execute(messages: Buffer, fresh: boolean): void {
    this.session
      .run(async (db) => {
        if (this.destroyed) return;
        if (fresh) {
          if (db.isInTransaction()) await db.exec('ROLLBACK');
          await db.exec('DEALLOCATE ALL');
        }
        const out: Uint8Array[] = [];
        // PGlite reuses the buffer it hands over: each piece is copied.
        await db.execProtocolRawStream(new Uint8Array(messages), { onRawData: (data) => out.push(data.slice()) });
        if (out.length > 0 && !this.destroyed) this.push(out.length === 1 ? out[0] : Buffer.concat(out));
      })
      .catch((error: unknown) => this.destroy(error instanceof Error ? error : new Error(String(error))));
  }
}
