import type { IncomingMessage, ServerResponse } from 'node:http';
import { declaresBody } from './early-answer';
import { sendError } from './respond';

// Requests as a whole have no time limit (a 2 GiB upload takes minutes on a slow link), so a body
// that stops arriving would hold its connection, and whatever waits on it, forever. Every request
// that declares a body gets its socket's idle timeout: a body silent that long is answered
// `408 request_timeout` and its connection closed. Upload routes set a longer idle time on the
// same socket (`req.setTimeout`); this answer still ends it.

/** Answers 408 when `req`'s declared body receives nothing for `idleMs`. */
export function watchBodyIdle(req: IncomingMessage, res: ServerResponse, idleMs: number): void {
  if (!declaresBody(req)) return;
  // On the response: Node emits a request's `timeout` only while its body is incomplete, and
  // destroys the socket when nobody listens.
  res.setTimeout(idleMs, () => {
    // The whole body is here (perhaps unread), and the socket was quiet for another reason (a
    // long answer): not this watch's business any more.
    if (req.complete) return void res.setTimeout(0);
    if (res.headersSent) return void req.socket.destroy();
    const seconds = (req.socket.timeout ?? idleMs) / 1000;
    sendError(res, 'request_timeout', `the request body stopped arriving for ${seconds}s`, { connection: 'close' });
  });
}
