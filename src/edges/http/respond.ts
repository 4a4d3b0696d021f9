import type { ServerResponse } from 'node:http';
import { type ErrorCode, statusOf } from '../../kernel/error-codes';

/** Error messages never echo a client's value at length: a 5 MB value must not come back as a 5 MB message. */
export const MAX_MESSAGE = 500;

export function boundMessage(message: string): string {
  return message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE)}… (${message.length} characters)` : message;
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** The one error shape every HTTP answer uses: `{error, code}`, with the code's status. */
export function sendError(res: ServerResponse, code: ErrorCode, error: string, headers: Record<string, string> = {}): void {
  sendJson(res, statusOf(code), { error: boundMessage(error), code }, headers);
}
