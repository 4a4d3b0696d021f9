import type { IncomingMessage } from 'node:http';
import { BadRequestError, PayloadTooLargeError, ValidationError } from '../../kernel/errors';
import { findTextIssue, MAX_JSON_BODY_BYTES } from '../http/text';

/** A streamed upload (an artifact, a snapshot archive) that receives nothing for this long is cut. */
export const UPLOAD_IDLE_MS = 5 * 60 * 1000;

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The body's bytes, at most `limit`; a body that ends early is a client error, not ours (one that
 * stalls is answered 408 by the server's body-idle watch, src/edges/http/body-idle.ts).
 */
function readBytes(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const fail = (error: Error) => {
      cleanup();
      req.pause();
      reject(error);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return fail(new PayloadTooLargeError(`JSON bodies are limited to ${limit} bytes`));
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks));
    };
    const onAborted = () => fail(new BadRequestError('the request body ended before its Content-Length'));
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onAborted);
      req.off('close', onClose);
    };
    const onClose = () => {
      if (!req.complete) onAborted();
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAborted);
    req.on('close', onClose);
  });
}

/**
 * Reads a JSON object body: right content type, at most 1 MiB, valid UTF-8, well-formed, an
 * object, every string storable (src/edges/http/text.ts). Empty is `{}`.
 */
export async function readJsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_JSON_BODY_BYTES) throw new PayloadTooLargeError(`JSON bodies are limited to ${MAX_JSON_BODY_BYTES} bytes`);
  const bytes = await readBytes(req, MAX_JSON_BODY_BYTES);
  if (bytes.every((b) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09)) return {};
  const [type = '', ...params] = (req.headers['content-type'] ?? '').split(';').map((p) => p.trim().toLowerCase());
  if (type !== 'application/json' && !type.endsWith('+json')) {
    throw new BadRequestError(`expected Content-Type application/json, got "${type || 'none'}"`, 'bad_content_type');
  }
  const charset = params
    .find((p) => p.startsWith('charset='))
    ?.slice('charset='.length)
    .replace(/"/g, '');
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    throw new BadRequestError(`JSON bodies are UTF-8, not ${charset}`, 'bad_content_type');
  }
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new BadRequestError('the body is not valid UTF-8', 'invalid_json');
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new BadRequestError(`malformed JSON body: ${(err as Error).message}`, 'invalid_json');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new BadRequestError('the JSON body must be an object', 'invalid_json');
  }
  const issue = findTextIssue(value, '');
  if (issue) throw new ValidationError(`${issue.field || 'body'}: ${issue.problem}`, issue.field || 'body');
  return value as Record<string, unknown>;
}

/** REST leaves out null fields (like `omitempty`), so absent and null read the same to clients. */
export function stripNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stripNulls);
  if (value && typeof value === 'object' && isPlainObject(value)) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) if (v !== null && v !== undefined) out[k] = stripNulls(v);
    return out;
  }
  return value;
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === null || proto === Object.prototype;
}
