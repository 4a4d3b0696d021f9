import type { IncomingMessage, ServerResponse } from 'node:http';
import { BadRequestError, PayloadTooLargeError } from '../services/errors';

export const JSON_BODY_LIMIT = 1024 * 1024;

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export function sendError(res: ServerResponse, status: number, error: string, code?: string, headers: Record<string, string> = {}): void {
  sendJson(res, status, code ? { error, code } : { error }, headers);
}

/** Reads a JSON object body: right content type, at most 1 MiB, well-formed, an object. Empty is `{}`. */
export async function readJsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > JSON_BODY_LIMIT) throw new PayloadTooLargeError(`JSON bodies are limited to ${JSON_BODY_LIMIT} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > JSON_BODY_LIMIT) throw new PayloadTooLargeError(`JSON bodies are limited to ${JSON_BODY_LIMIT} bytes`);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json' && !type.endsWith('+json')) {
    throw new BadRequestError(`expected Content-Type application/json, got "${type || 'none'}"`, 'bad_content_type');
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

export function clientAddress(req: IncomingMessage): string {
  return req.socket.remoteAddress ?? 'unknown';
}
