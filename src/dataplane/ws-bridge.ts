// Carrying bytes over the relay's WebSockets (docs/agents.md, "The relay").
//
// On the wire a relay is a plain byte stream in each direction: binary messages carry bytes, the
// one text message `eof` says the sender has nothing more to send (a TCP half-close). So a
// WebSocket can stand for a TCP connection or any other Duplex (bridge), and the server can join
// two WebSockets without reading what they carry (joinSockets). Both keep backpressure: a side
// stops reading while the other has more than HIGH_WATER bytes queued.
//
// A side that stopped reading would not see its peer go away (neither a close nor a FIN is read
// by a paused socket), so every relay socket has a heartbeat (heartbeat()): each end pings its
// peer every HEARTBEAT_MS, which a vanished peer's machine answers with a reset that fails the
// write, and cuts a peer it reads from that sent nothing for SILENT_BEATS beats (gone without a
// FIN). A close is answered within CLOSE_MS or the socket is cut (RELAY_SOCKET_OPTIONS), so an
// end's going away reaches the far end within a few seconds however full the sockets between are.
import { Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';
import { closeCodeOf } from '../kernel/error-codes';

/** Bytes queued on a WebSocket above which its source is paused. */
export const HIGH_WATER = 1024 * 1024;
export const EOF = 'eof';

/** How often each end of a relay socket pings its peer. */
export const HEARTBEAT_MS = 1000;
/** Beats in a row without a frame from a peer being read, after which it is taken for gone. */
export const SILENT_BEATS = 4;
/** How long a closing relay socket waits for its peer's close before it is cut. */
export const CLOSE_MS = 1000;

/**
 * Options of every relay WebSocket, at the agent, the server and the node: a close not answered
 * within CLOSE_MS cuts the socket; pings are answered by heartbeat(), at most one pong queued at a
 * time (the library's own would queue one per ping behind a backed-up socket, then cut it).
 */
export const RELAY_SOCKET_OPTIONS = { perMessageDeflate: false, closeTimeout: CLOSE_MS, autoPong: false } as const;

/** Close codes of the relay (4000-4999 are the application's; 4000 + status for an error code's). */
export const CLOSE = {
  normal: 1000,
  /** The node side could not reach the import's target, or failed in the share sync. */
  nodeFailed: 4502,
  /** The environment's node did not join the relay in time. */
  nodeTimeout: 4504,
  /** The server is shutting down. */
  goingAway: 1001,
  /** The credential that opened it was revoked or expired, or its sandbox removed. */
  revoked: closeCodeOf('unauthorized'),
  /** The peer sent what the protocol does not allow (a session's malformed message). */
  invalid: closeCodeOf('bad_request'),
  /** The server failed (a session whose environment ended under it says why first). */
  internal: 1011,
} as const;

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/** A WebSocket close reason is at most 123 bytes. */
export function closeReason(message: string): string {
  let reason = message;
  while (Buffer.byteLength(reason) > 123) reason = reason.slice(0, -2);
  return reason;
}

/**
 * Keeps `ws` (a relay socket opened with RELAY_SOCKET_OPTIONS) honest about its peer until it
 * closes: a ping every HEARTBEAT_MS (one in flight at most), so a peer gone while this side does
 * not read is found by the write that fails; each of the peer's pings answered (one pong in flight
 * at most); and the socket cut when the peer sent nothing, not even its own pings, for SILENT_BEATS
 * beats while this side was reading. A paused side hears nothing and counts no silence.
 */
export function heartbeat(ws: WebSocket): void {
  let heard = true;
  let silent = 0;
  let pinging = false;
  let ponging = false;
  const hear = () => {
    heard = true;
  };
  ws.on('message', hear);
  ws.on('pong', hear);
  ws.on('ping', (data) => {
    heard = true;
    if (ponging || ws.readyState !== ws.OPEN) return;
    ponging = true;
    ws.pong(data, undefined, () => {
      ponging = false;
    });
  });
  const timer = setInterval(() => {
    if (ws.readyState !== ws.OPEN) return;
    if (heard || ws.isPaused) silent = 0;
    else if (++silent >= SILENT_BEATS) return void ws.terminate();
    heard = false;
    if (pinging) return;
    pinging = true;
    ws.ping(undefined, undefined, () => {
      pinging = false;
    });
  }, HEARTBEAT_MS);
  timer.unref();
  ws.once('close', () => clearInterval(timer));
}

export interface BridgeEnd {
  code: number;
  reason: string;
}

/**
 * Carries `stream` over `ws` both ways until both directions ended (then the socket closes
 * normally) or either side fails (the other is torn down). Resolves with how the socket closed.
 * `onTraffic` is called for every chunk carried either way.
 */
export function bridge(ws: WebSocket, stream: Duplex, onTraffic?: () => void): Promise<BridgeEnd> {
  return new Promise((resolve) => {
    let sentEof = false;
    let gotEof = false;
    let done = false;
    const finish = () => {
      if (sentEof && gotEof && ws.readyState === ws.OPEN) ws.close(CLOSE.normal);
    };
    ws.on('message', (data, isBinary) => {
      onTraffic?.();
      if (!isBinary) {
        if (data.toString() === EOF && !gotEof) {
          gotEof = true;
          stream.end();
          finish();
        }
        return;
      }
      if (gotEof) return;
      if (!stream.write(toBuffer(data))) {
        ws.pause();
        stream.once('drain', () => ws.resume());
      }
    });
    stream.on('data', (chunk: Buffer) => {
      onTraffic?.();
      if (ws.readyState !== ws.OPEN) return;
      ws.send(chunk, { binary: true }, () => {
        if (stream.isPaused() && ws.bufferedAmount < HIGH_WATER / 2) stream.resume();
      });
      if (ws.bufferedAmount > HIGH_WATER) stream.pause();
    });
    // A socket accepted with pauseOnConnect stays paused until resumed; a relay socket opened paused
    // (openRelay) holds what came with its upgrade until now.
    stream.resume();
    ws.resume();
    stream.on('end', () => {
      sentEof = true;
      if (ws.readyState === ws.OPEN) ws.send(EOF);
      finish();
    });
    stream.on('error', (error) => {
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close(CLOSE.nodeFailed, closeReason(error.message));
    });
    stream.on('close', () => {
      // A stream closed before both ends finished was cut (a reset TCP connection, a failed sync).
      if (!(sentEof && gotEof) && (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING)) {
        ws.close(CLOSE.nodeFailed, 'the other end closed');
      }
    });
    ws.on('close', (code, reason) => {
      if (done) return;
      done = true;
      if (!(sentEof && gotEof)) stream.destroy();
      resolve({ code, reason: reason.toString() });
    });
    ws.on('error', () => stream.destroy());
  });
}

/**
 * Joins two WebSockets message by message (binary and text kept apart), with backpressure both
 * ways; a close of either closes the other with the same code. The bytes are never looked at.
 * `onTraffic` is called for every message carried either way.
 */
export function joinSockets(a: WebSocket, b: WebSocket, onTraffic?: () => void): Promise<void> {
  const forward = (from: WebSocket, to: WebSocket) => {
    from.on('message', (data, isBinary) => {
      onTraffic?.();
      if (to.readyState !== to.OPEN) return;
      to.send(data, { binary: isBinary }, () => {
        if (from.isPaused && to.bufferedAmount < HIGH_WATER / 2) from.resume();
      });
      if (to.bufferedAmount > HIGH_WATER) from.pause();
    });
  };
  forward(a, b);
  forward(b, a);
  return new Promise((resolve) => {
    let closed = 0;
    const onClose = (other: WebSocket) => (code: number, reason: Buffer) => {
      if (other.readyState === other.OPEN || other.readyState === other.CONNECTING) {
        const forwardable = code === 1000 || (code >= 3000 && code <= 4999);
        other.close(forwardable ? code : CLOSE.nodeFailed, closeReason(reason.toString()));
      }
      if (++closed === 2) resolve();
    };
    a.on('close', onClose(b));
    b.on('close', onClose(a));
    a.on('error', () => undefined);
    b.on('error', () => undefined);
  });
}

/**
 * The byte stream a relay socket carries, as a Duplex (the server's end of a preview's connection:
 * an HTTP client writes and reads it as if it were a TCP socket). Backpressure both ways: the
 * socket stops being read while the stream's reader lags, and a write completes only once fewer
 * than HIGH_WATER bytes wait on the socket. `end()` sends `eof`; the peer's `eof` ends the readable
 * side, and so does a close after bytes came. A socket that closes before any byte came fails the
 * stream with the close's reason (the node's "cannot reach port …").
 */
export function socketStream(ws: WebSocket): Duplex {
  let gotEof = false;
  let sentEof = false;
  const closeIfDone = () => {
    if (gotEof && sentEof && ws.readyState === ws.OPEN) ws.close(CLOSE.normal);
  };
  const stream = new Duplex({
    allowHalfOpen: true,
    read() {
      if (ws.isPaused) ws.resume();
    },
    write(chunk: Buffer, _encoding, callback) {
      if (ws.readyState !== ws.OPEN) return callback(new Error('the relay socket closed'));
      let held = false;
      ws.send(chunk, { binary: true }, (error) => {
        if (held) callback(error ?? null);
        else if (error) stream.destroy(error);
      });
      if (ws.bufferedAmount > HIGH_WATER) held = true;
      else callback();
    },
    final(callback) {
      sentEof = true;
      if (ws.readyState === ws.OPEN) ws.send(EOF);
      closeIfDone();
      callback();
    },
    destroy(error, callback) {
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) {
        if (gotEof && sentEof) ws.close(CLOSE.normal);
        else ws.close(CLOSE.nodeFailed, closeReason(error?.message ?? 'the stream was closed'));
      }
      callback(error);
    },
  });
  ws.on('message', (data, isBinary) => {
    if (!isBinary) {
      if (data.toString() === EOF && !gotEof) {
        gotEof = true;
        stream.push(null);
        closeIfDone();
      }
      return;
    }
    if (gotEof) return;
    received = true;
    if (!stream.push(toBuffer(data))) ws.pause();
  });
  let received = false;
  const closed = (code: number, reason: string) => {
    if (gotEof) return;
    // Bytes came, then the far end went away without its `eof` (the port's connection closed
    // before the node sent it): the stream ends there, as a TCP connection's FIN would end it.
    if (received) {
      gotEof = true;
      stream.push(null);
      return;
    }
    stream.destroy(new Error(reason || `the relay socket closed (${code})`));
  };
  if (ws.readyState !== ws.OPEN) closed(0, 'the relay socket closed before it was used');
  else ws.on('close', (code, reason) => closed(code, reason.toString()));
  ws.on('error', (error) => stream.destroy(error));
  return stream;
}
