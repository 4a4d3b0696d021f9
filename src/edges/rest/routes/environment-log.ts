// GET /v1/environments/{id}/log: an environment's log as plain text (docs/environments.md,
// "Lifecycle commands and the environment's log"). The same text as Environment.log; a stream
// route, as its body is text, not JSON.
import { readEnvironmentLog } from '../../../modules/environments';
import type { StreamRoute } from '../route';

export const environmentLogRoute: StreamRoute = {
  method: 'GET',
  path: '/v1/environments/{id}/log',
  summary: "An environment's log: what its lifecycle commands printed, each command under a header naming it, with the time",
  description:
    'text/plain, e.g. `==> postCreateCommand (2026-11-29T22:40:01.123Z)` then its lines; empty before any command printed. ' +
    'Follow it with the GraphQL subscription environmentLog. 404 not_found (no such environment in the organization).',
  auth: 'bearer',
  openapi: {
    responses: {
      '200': { description: 'The log, as text', contentType: 'text/plain', schema: { type: 'string' } },
    },
  },
  async handle(_req, res, { ctx, params }) {
    const text = await readEnvironmentLog(ctx!.deps, ctx!.actor, params.id!);
    res.writeHead(200, {
      'content-type': 'text/plain; charset=utf-8',
      'content-length': Buffer.byteLength(text),
      'cache-control': 'private, no-cache',
    });
    res.end(text);
  },
};
