// GET /metrics: Prometheus' text format, only to `Authorization: Bearer <METRICS_TOKEN>`; without a
// token configured there is no such route (404). Shared by the server and `berth node`.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { sendError } from '../http/respond';

export const METRICS_PATH = '/metrics';

const digest = (text: string) => createHash('sha256').update(text).digest();

/** Compares digests, so neither the token's length nor its bytes show in the time taken. */
function authorized(header: string | undefined, token: string): boolean {
  const given = /^Bearer (\S+)$/i.exec(header ?? '')?.[1];
  return given !== undefined && timingSafeEqual(digest(given), digest(token));
}

export async function sendMetrics(req: IncomingMessage, res: ServerResponse, registry: Registry, token: string | undefined): Promise<void> {
  req.resume();
  if (!token) return sendError(res, 404, `no route for ${METRICS_PATH}`, 'not_found');
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    return sendError(res, 405, `${req.method} is not allowed on ${METRICS_PATH}; allowed: GET`, 'method_not_allowed', { allow: 'GET' });
  }
  if (!authorized(req.headers.authorization, token)) {
    return sendError(res, 401, `${METRICS_PATH} needs Authorization: Bearer <METRICS_TOKEN>`, 'unauthorized', {
      'www-authenticate': 'Bearer',
    });
  }
  const text = await registry.metrics();
  res.writeHead(200, { 'content-type': registry.contentType, 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  res.end(req.method === 'HEAD' ? undefined : text);
}
