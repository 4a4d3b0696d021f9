import type { IncomingMessage } from 'node:http';
import { BadRequestError, ValidationError } from '../../kernel/errors';
import { readBody } from '../http/read-body';
import { findTextIssue } from '../http/text';

/** A streamed upload (an artifact, a snapshot archive) that receives nothing for this long is cut. */
export const UPLOAD_IDLE_MS = 5 * 60 * 1000;

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Reads a JSON object body: right content type, at most 1 MiB, valid UTF-8, well-formed, an
 * object, every string storable (src/edges/http/text.ts). Empty is `{}`.
 */
export async function readJsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const bytes = await readBody(req);
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
