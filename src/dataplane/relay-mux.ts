// Many relay connections over one standing WebSocket (docs/agents.md, "The relay"). A new
// connection through a tunnel used to cost two authenticated WebSocket upgrades (the sandbox's,
// then the node's dial back) before its first byte: ~11 ms of the ~22 ms measured. On a mux it
// costs one frame each way, and its first bytes ride right behind the frame that opens it.
//
// Only one end opens streams (the sandbox agent to the server; the server to a node), so the ids
// are the opener's alone. Every frame is one binary message: a type byte, the stream's id (u32),
// then the payload.
//
//   open    what the stream is for, as JSON (at most OPEN_MAX bytes)
//   data    bytes (at most MUX_FRAME)
//   credit  u32: the receiver took that many more bytes of the stream
//   end     the sender has nothing more to send (a TCP half-close)
//   reset   the stream is gone both ways; the payload says why
//
// Flow control is per stream: a side sends at most MUX_WINDOW bytes beyond what its peer credited,
// and credits what its reader took, so one stalled connection stops only itself, and a mux holds at
// most MUX_WINDOW per stream each way (MUX_STREAMS streams at most). A peer that sends past its
// window, or out of protocol, loses the whole mux. The WebSocket itself is never paused: heartbeats
// (ws-bridge.ts) keep finding a vanished peer, which ends every stream.
import { Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';
import { CLOSE, closeReason } from './ws-bridge';

/** Bytes a side may send on a stream beyond what the peer credited: about what loopback carries in a few milliseconds. */
export const MUX_WINDOW = 1024 * 1024;
/**
 * Bytes in one data frame, at most. Writes that waited for credit together go out as one frame
 * (one copy, as any frame costs): fewer, larger messages through every hop of the relay.
 */
export const MUX_FRAME = 256 * 1024;
/** Streams open on one mux, at most: a sandbox agent's (its own connections). */
export const MUX_STREAMS = 256;
/** The same for a node's, which carries every sandbox's connections into its environments. */
export const NODE_MUX_STREAMS = 4096;
/** Bytes of an open frame's request, at most. */
const OPEN_MAX = 16 * 1024;
/** A frame's head: type and stream id. */
const HEAD = 5;
/** The largest frame a mux sends or takes. */
export const MUX_MAX_PAYLOAD = HEAD + MUX_FRAME;

const OPEN = 1;
const DATA = 2;
const CREDIT = 3;
const END = 4;
const RESET = 5;

/** A frame with `payload`, or with room for `length` bytes of payload to be copied in. */
function frame(type: number, id: number, payload?: Buffer, length = payload?.length ?? 0): Buffer {
  const bytes = Buffer.allocUnsafe(HEAD + length);
  bytes[0] = type;
  bytes.writeUInt32BE(id, 1);
  payload?.copy(bytes, HEAD);
  return bytes;
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/** One connection carried by a mux: a byte stream both ways, half-closable, like a TCP socket. */
export class MuxStream extends Duplex {
  /** Bytes this side may still send. */
  private credit = MUX_WINDOW;
  /** Bytes received, and bytes credited back beyond the first window. */
  private received = 0;
  private granted = 0;
  /** Writes not yet sent whole: their bytes left, in order, and their one callback. */
  private pending: { chunks: Buffer[]; left: number; callback: (error?: Error | null) => void } | undefined;
  private sentEnd = false;
  private gotEnd = false;
  private resetByPeer = false;

  constructor(
    private readonly mux: RelayMux,
    readonly id: number,
  ) {
    // A write waits only once a window waits unsent: a writer paused at every chunk costs more than the frames.
    super({ allowHalfOpen: true, readableHighWaterMark: MUX_WINDOW, writableHighWaterMark: MUX_WINDOW });
    // A stream's end is its owner's to read ('close', `errored`): one cut while nobody listens (a
    // stream still being checked when its mux closes) is no process's failure.
    this.on('error', () => undefined);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.pending = { chunks: [chunk], left: chunk.length, callback };
    this.pump();
  }

  override _writev(writes: { chunk: Buffer }[], callback: (error?: Error | null) => void): void {
    const chunks = writes.map((w) => w.chunk);
    this.pending = { chunks, left: chunks.reduce((sum, c) => sum + c.length, 0), callback };
    this.pump();
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.sentEnd = true;
    this.mux.send(frame(END, this.id));
    callback();
  }

  /** Bytes come as the peer sends them, within the window: read() credits what its reader took. */
  override _read(): void {}

  // Every way of reading (flowing, pipe, async iteration) takes bytes through read(); _read is no
  // place to credit them, as it is not called again until the next push, which waits for credit.
  override read(size?: number): ReturnType<Duplex['read']> {
    const chunk = super.read(size);
    this.grant();
    return chunk;
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.mux.forget(this);
    if (!this.resetByPeer && !(this.sentEnd && this.gotEnd)) {
      this.mux.send(frame(RESET, this.id, Buffer.from(closeReason(error?.message ?? 'the connection was closed'))));
    }
    const pending = this.pending;
    this.pending = undefined;
    pending?.callback(error ?? new Error('the connection was closed'));
    callback(error);
  }

  /** Sends what waits while the window has room; the write completes once all of it went. */
  private pump(): void {
    const pending = this.pending;
    if (!pending) return;
    while (pending.left > 0 && this.credit > 0) {
      const n = Math.min(pending.left, this.credit, MUX_FRAME);
      const bytes = frame(DATA, this.id, undefined, n);
      for (let at = HEAD; at < bytes.length; ) {
        const chunk = pending.chunks[0]!;
        const taken = chunk.copy(bytes, at, 0, Math.min(chunk.length, bytes.length - at));
        at += taken;
        if (taken === chunk.length) pending.chunks.shift();
        else pending.chunks[0] = chunk.subarray(taken);
      }
      if (!this.mux.send(bytes)) return void this.destroy(new Error('the relay closed'));
      this.credit -= n;
      pending.left -= n;
    }
    if (pending.left > 0) return;
    this.pending = undefined;
    pending.callback();
  }

  /** Credits the peer with what the reader took, a quarter window at a time (a frame per small message would double them). */
  private grant(): void {
    const owed = this.received - this.readableLength - this.granted;
    if (owed < MUX_WINDOW / 4 || this.destroyed || this.gotEnd) return;
    this.granted += owed;
    const bytes = Buffer.allocUnsafe(4);
    bytes.writeUInt32BE(owed);
    this.mux.send(frame(CREDIT, this.id, bytes));
  }

  /** A frame of the peer's for this stream; false when it broke the protocol. */
  onFrame(type: number, payload: Buffer): boolean {
    switch (type) {
      case DATA:
        if (this.gotEnd) return false;
        if (this.received + payload.length > MUX_WINDOW + this.granted) return false;
        this.received += payload.length;
        this.push(payload);
        // A flowing reader may have taken it already, without a read().
        this.grant();
        return true;
      case CREDIT: {
        // Credit for more than this side sent: a peer that would have it send without bound (and
        // stop reading its socket) would grow this process's memory by whatever it is sent.
        if (payload.length !== 4 || this.credit + payload.readUInt32BE(0) > MUX_WINDOW) return false;
        this.credit += payload.readUInt32BE(0);
        this.pump();
        return true;
      }
      case END:
        if (this.gotEnd) return false;
        this.gotEnd = true;
        this.push(null);
        return true;
      case RESET:
        this.resetByPeer = true;
        this.destroy(new Error(payload.toString() || 'the far end closed the connection'));
        return true;
      default:
        return false;
    }
  }
}

export interface MuxOptions {
  /**
   * Takes each stream the peer opens, with what its open frame said (parsed JSON). Without it the
   * peer may open none: this end is the opener.
   */
  accept?: (stream: MuxStream, request: unknown) => void;
  /** Streams open at once, at most (MUX_STREAMS). */
  maxStreams?: number;
}

/** One end of a mux on an open (or opening) relay WebSocket; it ends with the socket. */
export class RelayMux {
  private readonly streams = new Map<number, MuxStream>();
  private lastId = 0;
  /** Resolves when the socket closed (every stream is then destroyed). */
  readonly closed: Promise<void>;

  constructor(
    readonly ws: WebSocket,
    private readonly options: MuxOptions = {},
  ) {
    ws.on('message', (data, isBinary) => {
      if (!isBinary || !this.take(toBuffer(data))) this.fail('a frame out of protocol');
    });
    // A socket opened paused (openRelayMux) gives what it holds now that it is listened to.
    ws.resume();
    ws.on('error', () => undefined);
    this.closed = new Promise((resolve) => {
      ws.once('close', (code, reason) => {
        const why = new Error(reason.toString() || `the relay closed (${code})`);
        for (const stream of [...this.streams.values()]) stream.destroy(why);
        resolve();
      });
    });
  }

  get size(): number {
    return this.streams.size;
  }

  private get maxStreams(): number {
    return this.options.maxStreams ?? MUX_STREAMS;
  }

  /** Whether open() would give a stream now: this end opens, the socket is open, and the mux is not full. */
  get canOpen(): boolean {
    return !this.options.accept && this.ws.readyState === this.ws.OPEN && this.streams.size < this.maxStreams;
  }

  /** A new stream for `request` (sent as JSON); throws when the mux is closed or full. */
  open(request: object): MuxStream {
    if (this.options.accept) throw new Error('this end of the relay opens no connections');
    if (this.ws.readyState !== this.ws.OPEN) throw new Error('the relay is closed');
    if (this.streams.size >= this.maxStreams) throw new Error(`the relay carries ${this.maxStreams} connections at most`);
    this.lastId = this.lastId === 0xffffffff ? 1 : this.lastId + 1;
    const stream = new MuxStream(this, this.lastId);
    this.streams.set(stream.id, stream);
    this.send(frame(OPEN, stream.id, Buffer.from(JSON.stringify(request))));
    return stream;
  }

  /** Sends one frame; false when the socket is not open. */
  send(bytes: Buffer): boolean {
    if (this.ws.readyState !== this.ws.OPEN) return false;
    this.ws.send(bytes, { binary: true });
    return true;
  }

  forget(stream: MuxStream): void {
    if (this.streams.get(stream.id) === stream) this.streams.delete(stream.id);
  }

  close(code: number, reason: string): void {
    if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING) this.ws.close(code, closeReason(reason));
  }

  private fail(why: string): void {
    this.close(CLOSE.invalid, why);
  }

  /** One frame of the peer's; false when it broke the protocol. */
  private take(bytes: Buffer): boolean {
    if (bytes.length < HEAD) return false;
    const type = bytes[0]!;
    const id = bytes.readUInt32BE(1);
    const payload = bytes.subarray(HEAD);
    if (type !== OPEN) {
      if (payload.length > MUX_FRAME) return false;
      // A frame of a stream this end already ended (its reset crossed the peer's frames) is dropped.
      const stream = this.streams.get(id);
      return stream ? stream.onFrame(type, payload) : type >= DATA && type <= RESET;
    }
    const accept = this.options.accept;
    if (!accept || id === 0 || this.streams.has(id) || payload.length > OPEN_MAX) return false;
    if (this.streams.size >= this.maxStreams) {
      this.send(frame(RESET, id, Buffer.from(`the relay carries ${this.maxStreams} connections at most`)));
      return true;
    }
    let request: unknown;
    try {
      request = JSON.parse(payload.toString());
    } catch {
      return false;
    }
    const stream = new MuxStream(this, id);
    this.streams.set(id, stream);
    accept(stream, request);
    return true;
  }
}

/**
 * Carries `a` into `b` and `b` into `a` (each end's half-close passed on) until both are done;
 * one cut short (destroyed before both its directions ended) cuts the other with its reason.
 * `onTraffic` is called for every chunk carried either way.
 */
export function joinStreams(a: Duplex, b: Duplex, onTraffic?: () => void): Promise<void> {
  const carry = (from: Duplex, to: Duplex) => {
    from.on('data', (chunk: Buffer) => {
      onTraffic?.();
      if (!to.write(chunk)) {
        from.pause();
        to.once('drain', () => from.resume());
      }
    });
    from.once('end', () => to.end());
  };
  carry(a, b);
  carry(b, a);
  // A socket accepted with pauseOnConnect stays paused, 'data' listeners or not, until resumed.
  a.resume();
  b.resume();
  return new Promise((resolve) => {
    let closed = 0;
    const onClose = (self: Duplex, other: Duplex) => () => {
      if (!(self.readableEnded && self.writableFinished)) other.destroy(self.errored ?? new Error('the other end closed'));
      if (++closed === 2) resolve();
    };
    for (const [self, other] of [
      [a, b],
      [b, a],
    ] as const) {
      self.on('error', () => undefined);
      if (self.destroyed) onClose(self, other)();
      else self.once('close', onClose(self, other));
    }
  });
}
