import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendError } from './respond';

// One CORS policy for REST and GraphQL (and WebSocket upgrades): same-origin by default, plus the
// origins of CORS_ORIGINS. Credentials are bearer tokens, never cookies, so no response allows
// credentials; an allowed origin may send the Authorization header.

const METHODS = 'GET, HEAD, POST, PUT, DELETE';
const REQUEST_HEADERS = 'authorization, content-type, accept, range, if-none-match, if-range, x-graphql-yoga-csrf, x-request-id';
const EXPOSED_HEADERS = 'retry-after, allow, etag, content-range, content-disposition, accept-ranges, x-request-id';
const MAX_AGE_SECONDS = '600';

export interface CorsPolicy {
  /** Answers a preflight (OPTIONS with Access-Control-Request-Method): 204 when allowed, 403 otherwise. */
  preflight(req: IncomingMessage, res: ServerResponse): boolean;
  /** Headers an actual request from an allowed cross origin gets (none for others). */
  headers(req: IncomingMessage): Record<string, string>;
  /** Whether a request carrying this Origin header may proceed (WebSocket upgrades). */
  allows(req: IncomingMessage): boolean;
}

export function corsPolicy(opts: { origins: readonly string[]; publicUrl?: () => string | undefined }): CorsPolicy {
  const allowed = new Set(opts.origins);

  /** Same origin: the Origin names the host the request was sent to, or PUBLIC_URL's origin. */
  const sameOrigin = (origin: string, req: IncomingMessage): boolean => {
    try {
      if (new URL(origin).host === req.headers.host) return true;
      const own = opts.publicUrl?.();
      return own !== undefined && new URL(own).origin === origin;
    } catch {
      return false;
    }
  };
  const crossOrigin = (req: IncomingMessage): string | undefined => {
    const origin = req.headers.origin;
    return origin && !sameOrigin(origin, req) ? origin : undefined;
  };

  return {
    preflight(req, res) {
      if (req.method !== 'OPTIONS' || !req.headers['access-control-request-method'] || !req.headers.origin) return false;
      const origin = req.headers.origin;
      const vary = { vary: 'Origin' };
      if (!allowed.has(origin) && !sameOrigin(origin, req)) {
        sendError(res, 'forbidden', `origin ${origin} is not allowed to call this API; CORS_ORIGINS lists the origins that are`, vary);
        return true;
      }
      res.writeHead(204, {
        ...vary,
        'access-control-allow-origin': origin,
        'access-control-allow-methods': METHODS,
        'access-control-allow-headers': REQUEST_HEADERS,
        'access-control-max-age': MAX_AGE_SECONDS,
        'content-length': '0',
      });
      res.end();
      return true;
    },
    headers(req): Record<string, string> {
      const origin = crossOrigin(req);
      if (!origin || !allowed.has(origin)) return {};
      return { 'access-control-allow-origin': origin, 'access-control-expose-headers': EXPOSED_HEADERS, vary: 'Origin' };
    },
    allows(req) {
      const origin = crossOrigin(req);
      return origin === undefined || allowed.has(origin);
    },
  };
}
