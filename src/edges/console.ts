// Serves the built web console (console/, built by `npm install` into console/dist) at `/`.
// An edge like src/edges/rest/: the console itself speaks only GraphQL (and REST for artifact bytes).
import { createReadStream, type Stats } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, join, normalize, sep } from 'node:path';
import { packagePath } from '../platform/paths';

export const CONSOLE_DIR = `${packagePath('console', 'dist')}/`;

/** Paths that belong to the API: never answered with the console, even when nothing else matches. */
const API_PREFIXES = ['/graphql', '/v1', '/healthz'];

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};
const COMPRESSIBLE = new Set(['.html', '.js', '.css', '.svg', '.json', '.txt']);

/** Vite names every file under assets/ after a hash of its content: it never changes. */
const IMMUTABLE = 'public, max-age=31536000, immutable';
/** index.html and the other unhashed files: always revalidated, so a new build shows at once. */
const REVALIDATE = 'no-cache';

const NOT_BUILT =
  'The Berth web console is not built in this installation (console/dist is missing).\n' +
  'Run `npm install` (it builds the console) or `npm run build:console`, then reload.\n' +
  'The API works without it: /graphql and /v1.\n';

/** A Host header that is a host name or IP literal with an optional port: safe to repeat in a header or a script. */
export const HOST_HEADER = /^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;

/**
 * The console's headers. Scripts and styles only from files of this origin (nothing inline);
 * the page may talk only to its own origin, over HTTP and over the WebSocket of /graphql.
 */
export function securityHeaders(host: string | undefined): Record<string, string> {
  const sockets = host && HOST_HEADER.test(host) ? ` ws://${host} wss://${host}` : '';
  const csp = [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "font-src 'self'",
    `connect-src 'self'${sockets}`,
    "manifest-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return {
    'content-security-policy': csp,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'x-frame-options': 'DENY',
    'cross-origin-opener-policy': 'same-origin',
  };
}

export interface ConsoleHandler {
  /**
   * Answers GET/HEAD for the console's files and client routes; false for anything else (the
   * server then answers its JSON 404, as for any unknown path).
   */
  handle(req: IncomingMessage, res: ServerResponse): Promise<boolean>;
}

async function fileStats(path: string): Promise<Stats | undefined> {
  const stats = await stat(path).catch(() => undefined);
  return stats?.isFile() ? stats : undefined;
}

function acceptsEncoding(req: IncomingMessage, encoding: string): boolean {
  const header = req.headers['accept-encoding'];
  if (typeof header !== 'string') return false;
  return header.split(',').some((part) => {
    const [name, ...params] = part.trim().split(';');
    return name!.trim().toLowerCase() === encoding && !params.some((p) => /^\s*q=0(?:\.0*)?\s*$/.test(p));
  });
}

export function createConsoleHandler(dir: string = CONSOLE_DIR): ConsoleHandler {
  const root = normalize(dir + sep);

  function sendText(req: IncomingMessage, res: ServerResponse, status: number, text: string): void {
    res.writeHead(status, {
      ...securityHeaders(req.headers.host),
      'content-type': 'text/plain; charset=utf-8',
      'content-length': Buffer.byteLength(text),
      'cache-control': 'no-store',
    });
    res.end(req.method === 'HEAD' ? undefined : text);
  }

  /** Sends a file, its precompressed .br or .gz sibling when the client takes it. */
  async function sendFile(req: IncomingMessage, res: ServerResponse, path: string, stats: Stats, cache: string): Promise<void> {
    const ext = extname(path);
    const headers: Record<string, string | number> = {
      ...securityHeaders(req.headers.host),
      'content-type': TYPES[ext] ?? 'application/octet-stream',
      'cache-control': cache,
      'last-modified': stats.mtime.toUTCString(),
    };
    let body = path;
    let size = stats.size;
    let tag = `${stats.size.toString(36)}-${Math.trunc(stats.mtimeMs).toString(36)}`;
    if (COMPRESSIBLE.has(ext)) {
      headers.vary = 'Accept-Encoding';
      for (const [encoding, suffix] of [
        ['br', '.br'],
        ['gzip', '.gz'],
      ] as const) {
        if (!acceptsEncoding(req, encoding)) continue;
        const packed = await fileStats(path + suffix);
        if (!packed) continue;
        body = path + suffix;
        size = packed.size;
        tag += `-${encoding}`;
        headers['content-encoding'] = encoding;
        break;
      }
    }
    headers.etag = `"${tag}"`;
    const match = req.headers['if-none-match'];
    if (match?.split(',').some((t) => t.trim().replace(/^W\//, '') === headers.etag)) {
      delete headers['content-encoding'];
      res.writeHead(304, headers);
      res.end();
      return;
    }
    headers['content-length'] = size;
    res.writeHead(200, headers);
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    createReadStream(body)
      .on('error', () => res.destroy())
      .pipe(res);
  }

  return {
    async handle(req, res) {
      if (req.method !== 'GET' && req.method !== 'HEAD') return false;
      const raw = (req.url ?? '/').split('?')[0]!;
      if (API_PREFIXES.some((p) => raw === p || raw.startsWith(`${p}/`))) return false;
      let path: string;
      try {
        path = decodeURIComponent(raw);
      } catch {
        return false;
      }
      const file = normalize(join(root, path));
      if (path.includes('\0') || !file.startsWith(root)) return false;
      const asset = path.startsWith('/assets/');
      const stats = path.endsWith('/') ? undefined : await fileStats(file);
      if (stats) {
        await sendFile(req, res, file, stats, asset ? IMMUTABLE : REVALIDATE);
        return true;
      }
      // A missing hashed file is an old page asking for an old build: a 404, not the app.
      // Anything else a browser navigates to is a client route, answered by index.html.
      const navigation = path === '/' || String(req.headers.accept ?? '').includes('text/html');
      if (asset || !navigation) return false;
      const index = join(root, 'index.html');
      const indexStats = await fileStats(index);
      if (!indexStats) sendText(req, res, 503, NOT_BUILT);
      else await sendFile(req, res, index, indexStats, REVALIDATE);
      return true;
    },
  };
}
