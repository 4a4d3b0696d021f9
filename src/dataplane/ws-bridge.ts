// Carrying bytes over the relay's WebSockets (docs/agents.md, "The relay").
//
// On the wire a relay is a plain byte stream in each direction: binary messages carry bytes, the
// one text message `eof` says the sender has nothing more to send (a TCP half-close). So a
// WebSocket can stand for a TCP connection or any other Duplex (bridge), and the server can join
// two WebSockets without reading what they carry (joinSockets). Both keep backpressure: a side
// stops reading while the other has more than HIGH_WATER bytes queued.
import type { Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';
import { closeCodeOf } from '../kernel/error-codes';

/** Bytes queued on a WebSocket above which its source is paused. */
export const HIGH_WATER = 1024 * 1024;
export const EOF = 'eof';

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
    // A socket accepted with pauseOnConnect stays paused until resumed.
    stream.resume();
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
