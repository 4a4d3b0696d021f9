// GET /metrics: Prometheus' text format, only to `Authorization: Bearer <METRICS_TOKEN>`. Shared by
// the server (no token: no such route) and `berth node --metrics-port` (no token: open, on loopback).
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { sendError } from '../edges/http/respond';

export const METRICS_PATH = '/metrics';

const digest = (text: string) => createHash('sha256').update(text).digest();

/** Compares digests, so neither the token's length nor its bytes show in the time taken. */
function authorized(header: string | undefined, token: string): boolean {
  const given = /^Bearer (\S+)$/i.exec(header ?? '')?.[1];
  return given !== undefined && timingSafeEqual(digest(given), digest(token));
}

/** Answers a scrape; `token` undefined: asks no credential. */
export async function sendMetrics(req: IncomingMessage, res: ServerResponse, registry: Registry, token: string | undefined): Promise<void> {
  req.resume();
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    return sendError(res, 'method_not_allowed', `${req.method} is not allowed on ${METRICS_PATH}; allowed: GET`, { allow: 'GET' });
  }
  if (token !== undefined && !authorized(req.headers.authorization, token)) {
    return sendError(res, 'unauthorized', `${METRICS_PATH} needs Authorization: Bearer <METRICS_TOKEN>`, {
      'www-authenticate': 'Bearer',
    });
  }
  const text = await registry.metrics();
  res.writeHead(200, { 'content-type': registry.contentType, 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  res.end(req.method === 'HEAD' ? undefined : text);
}

/** A server of /metrics alone (`berth node --metrics-port`); resolves with its URL once listening. */
export async function serveMetrics(
  registry: Registry,
  host: string,
  port: number,
  token: string | undefined,
): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === METRICS_PATH) {
      sendMetrics(req, res, registry, token).catch(() => res.destroy());
      return;
    }
    req.resume();
    sendError(res, 'not_found', `no route for ${path}; metrics are at ${METRICS_PATH}`);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  server.unref();
  const address = server.address() as AddressInfo;
  const where = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return { server, url: `http://${where}:${address.port}${METRICS_PATH}` };
}
