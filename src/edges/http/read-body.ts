import type { IncomingMessage } from 'node:http';
import { BadRequestError, PayloadTooLargeError } from '../../kernel/errors';
import { MAX_JSON_BODY_BYTES } from './text';

/**
 * A request's body, REST's or GraphQL's, at most `limit` bytes: over it, `413 too_large` as soon as
 * the body crosses it (from Content-Length, before reading anything); what was read is dropped and
 * the rest is left to the answer's lingering close (src/edges/http/early-answer.ts). A body that
 * ends early is a client error, not ours (one that stalls is answered 408 by the body-idle watch).
 */
export function readBody(req: IncomingMessage, limit = MAX_JSON_BODY_BYTES): Promise<Buffer> {
  const tooLarge = () => new PayloadTooLargeError(`request bodies are limited to ${limit} bytes`);
  if (Number(req.headers['content-length'] ?? 0) > limit) return Promise.reject(tooLarge());
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const fail = (error: Error) => {
      cleanup();
      chunks.length = 0;
      req.pause();
      reject(error);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return fail(tooLarge());
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    };
    const onAborted = () => fail(new BadRequestError('the request body ended before its Content-Length'));
    const onClose = () => {
      if (!req.complete) onAborted();
    };
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onAborted);
      req.off('close', onClose);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAborted);
    req.on('close', onClose);
  });
}
