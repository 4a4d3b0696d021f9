import type { IncomingMessage, ServerResponse } from 'node:http';
import type { GraphQLSchema } from 'graphql';
import type { Deps } from '../../../app/context';
import { graphql } from '../../../generated/gql';
import {
  type ArtifactLink,
  type ArtifactRecord,
  asIntegrityError,
  getArtifact,
  openArtifact,
  resolveLink,
  storeArtifact,
  type UploadParams,
} from '../../../modules/artifacts';
import { sendError, sendJson } from '../../http/respond';
import { UPLOAD_IDLE_MS } from '../http';
import type { JsonSchema } from '../json-schema';
import { contentDisposition, etagMatches, parseRange } from '../range';
import { PAGE_PARAMS, type Param, type Route, type StreamRoute } from '../route';
import { shapeOf } from '../shape';

const ArtifactFields = graphql(`
  fragment ArtifactFields on Artifact {
    id project name size sha256 contentType labels keyVersion manifest
    segments { name size objects }
    chunks sealedBytes createdBy created expires
  }
`);

const LinkFields = graphql(`fragment ArtifactLinkFields on ArtifactLink { url expires }`);

const UPLOAD_PARAMS: Param[] = [
  { name: 'name', in: 'query', type: 'string', description: 'name to store it under (default: the artifact id); up to 255 characters' },
  { name: 'project', in: 'query', type: 'string', description: 'project whose key seals it (default: `default`)' },
  { name: 'retention', in: 'query', type: 'string', description: 'how long to keep it, e.g. 12h or 7d (default 7d, at most 30d)' },
  { name: 'label', in: 'query', type: 'string', list: true, description: 'key=value; repeatable' },
  {
    name: 'link',
    in: 'query',
    type: 'string',
    description: 'also make a signed link lasting this long, e.g. 24h (at most 30d, never past the artifact expiry)',
  },
];

const BINARY: JsonSchema = { type: 'string', format: 'binary' };

/** The upload's query parameters (the adapter already refused unknown and repeated ones). */
function uploadParams(req: IncomingMessage, query: URLSearchParams): UploadParams {
  const one = (name: string) => query.get(name) ?? undefined;
  const declared = req.headers['content-length'];
  return {
    name: one('name'),
    project: one('project'),
    retention: one('retention'),
    labels: query.getAll('label'),
    link: one('link'),
    contentType: req.headers['content-type'],
    declaredSize: declared === undefined ? undefined : Number(declared),
  };
}

/**
 * Serves an artifact's bytes: ETag (its SHA-256), single byte ranges (206 / 416), If-None-Match,
 * If-Range, HEAD. Headers are committed only once the first chunk has been authenticated, so a
 * damaged start is a clean 500; damage found later aborts the response (the socket is destroyed),
 * so a client never receives bytes that failed authentication.
 */
async function sendContent(req: IncomingMessage, res: ServerResponse, deps: Deps, artifact: ArtifactRecord): Promise<void> {
  const size = Number(artifact.size);
  const etag = `"${artifact.sha256}"`;
  const lastModified = artifact.created.toUTCString();
  const headers: Record<string, string | number> = {
    etag,
    'last-modified': lastModified,
    'accept-ranges': 'bytes',
    'cache-control': 'private, no-cache',
  };
  if (etagMatches(req.headers['if-none-match'], etag)) {
    res.writeHead(304, headers);
    res.end();
    return;
  }
  const ifRange = req.headers['if-range'];
  let range = parseRange(req.headers.range, size);
  if (ifRange !== undefined && ifRange !== etag && ifRange !== lastModified) range = undefined;
  if (range === 'unsatisfiable') {
    sendError(res, 'range_not_satisfiable', `the range ${req.headers.range} is not satisfiable for ${size} bytes`, {
      'content-range': `bytes */${size}`,
    });
    return;
  }
  // What a browser does with the bytes: save them, never render them on this origin.
  Object.assign(headers, {
    'content-type': artifact.contentType,
    'content-disposition': contentDisposition(artifact.name),
    'x-content-type-options': 'nosniff',
    'content-security-policy': "default-src 'none'; sandbox",
    ...(range ? { 'content-range': `bytes ${range.start}-${range.end}/${size}` } : {}),
  });
  const status = range ? 206 : 200;
  const length = range ? range.end - range.start + 1 : size;
  if (req.method === 'HEAD') {
    res.writeHead(status, { ...headers, 'content-length': length });
    res.end();
    return;
  }
  const opened = await openArtifact(deps, artifact, range);
  const pieces = opened.pieces();
  let next: IteratorResult<Buffer>;
  try {
    next = await pieces.next();
  } catch (err) {
    throw asIntegrityError(artifact.id, err);
  }
  res.writeHead(status, { ...headers, 'content-length': opened.length });
  try {
    // Each piece is a pooled buffer, given back when the next is asked for: ask only once the
    // socket has taken it.
    for (; !next.done; next = await pieces.next()) {
      await writeOut(res, next.value);
      deps.metrics.artifactBytes.inc({ direction: 'download' }, next.value.length);
    }
    res.end();
  } catch {
    // The client went away, or a chunk failed authentication: either way the response is cut short.
    res.destroy();
    await pieces.return(undefined).catch(() => {});
  }
}

/** Writes `data` and resolves once the socket no longer needs it; rejects if the response closes first. */
function writeOut(res: ServerResponse, data: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const onClose = () => reject(new Error('the response closed'));
    res.once('close', onClose);
    res.write(data, (err) => {
      res.off('close', onClose);
      if (err) reject(err);
      else resolve();
    });
  });
}

/** The /v1 artifact routes; the upload and the two downloads stream bytes, the rest are operations. */
export function artifactRoutes(schema: GraphQLSchema): Route[] {
  // The upload answers with the records GET /v1/artifacts/{id} and POST …/links show.
  const artifact = shapeOf<ArtifactRecord>(schema, ArtifactFields);
  const link = shapeOf<ArtifactLink>(schema, LinkFields);
  const upload: StreamRoute = {
    method: 'POST',
    path: '/v1/artifacts',
    summary: 'Store an artifact: the raw body (at most 2 GiB) is sealed and packed as it arrives',
    description:
      'Body: the raw bytes; Content-Type is recorded and served back (default application/octet-stream; form encodings are 415). ' +
      '201 {artifact, link?}. 413 too_large over the limit (at once from Content-Length, else as soon as the body crosses it; nothing is kept), ' +
      '422 invalid for a bad parameter. Uploads are REST only.',
    auth: 'bearer',
    params: UPLOAD_PARAMS,
    openapi: {
      requestBody: { contentType: 'application/octet-stream', ...BINARY },
      responses: {
        '201': {
          description: 'Stored',
          schema: {
            type: 'object',
            properties: { artifact: artifact.schema, link: link.schema },
            required: ['artifact'],
            additionalProperties: false,
          },
        },
      },
    },
    async handle(req, res, { ctx, query }) {
      const controller = new AbortController();
      const onClose = () => {
        if (!res.writableFinished) controller.abort(new Error('the client closed the connection'));
      };
      try {
        const params = uploadParams(req, query);
        res.once('close', onClose);
        req.setTimeout(UPLOAD_IDLE_MS);
        const stored = await storeArtifact(ctx!.deps, ctx!.actor, { ...params, body: req, signal: controller.signal }).finally(() =>
          res.off('close', onClose),
        );
        const body = { artifact: await artifact.json(stored.artifact, ctx) };
        sendJson(res, 201, stored.link ? { ...body, link: await link.json(stored.link, ctx) } : body);
      } catch (err) {
        // The client went away mid-upload: nobody to answer; storeArtifact removed what it wrote.
        if (controller.signal.aborted || (req.destroyed && !req.complete)) return void res.destroy();
        throw err;
      }
    },
  };

  const DOWNLOAD_RESPONSES: StreamRoute['openapi']['responses'] = {
    '200': { description: 'The plain bytes', contentType: 'application/octet-stream', schema: BINARY },
    '206': { description: 'The requested range (Content-Range)', contentType: 'application/octet-stream', schema: BINARY },
    '304': { description: 'Not modified (If-None-Match)' },
  };

  const content: StreamRoute = {
    method: 'GET',
    path: '/v1/artifacts/{id}/content',
    summary: "Download an artifact's bytes (Range: bytes=a-b, a-, -n; ETag is its sha256)",
    description: '200 the whole file, 206 one range, 304 for a matching If-None-Match, 416 range_not_satisfiable, 404 not_found.',
    auth: 'bearer',
    openapi: { responses: DOWNLOAD_RESPONSES },
    async handle(req, res, { ctx, params }) {
      await sendContent(req, res, ctx!.deps, await getArtifact(ctx!.deps, ctx!.actor, params.id!));
    },
  };

  const viaLink: StreamRoute = {
    method: 'GET',
    path: '/v1/links/{token}',
    summary: 'Download through a signed link, without a bearer token (Range as for content)',
    description:
      '403 invalid_link (altered or foreign), 410 link_expired / link_revoked, 404 not_found (the artifact was deleted or expired).',
    auth: 'none',
    openapi: { responses: DOWNLOAD_RESPONSES },
    async handle(req, res, { deps, params }) {
      await sendContent(req, res, deps, await resolveLink(deps, params.token!));
    },
  };

  return [
    upload,
    {
      method: 'GET',
      path: '/v1/artifacts',
      summary: "List the organization's artifacts, newest first",
      params: [
        { name: 'project', in: 'query', type: 'string', description: 'only this project (default: all)' },
        { name: 'name', in: 'query', type: 'string', description: 'only artifacts with exactly this name' },
        { name: 'label', in: 'query', type: 'string', list: true, description: 'key=value; repeat to require several' },
        ...PAGE_PARAMS,
      ],
      document: graphql(`
        query RestArtifacts($project: String, $name: String, $label: [String!], $first: Int, $after: String) {
          artifacts(project: $project, name: $name, label: $label, first: $first, after: $after) {
            nodes { ...ArtifactFields }
            pageInfo { hasNextPage endCursor }
          }
        }
      `),
      result: { kind: 'list', field: 'artifacts', key: 'artifacts' },
      status: 200,
    },
    {
      method: 'GET',
      path: '/v1/artifacts/{id}',
      summary: "An artifact's record (unwrapped, like an environment)",
      document: graphql(`query RestArtifact($id: ID!) { artifact(id: $id) { ...ArtifactFields } }`),
      result: { kind: 'field', field: 'artifact' },
      status: 200,
    },
    {
      method: 'DELETE',
      path: '/v1/artifacts/{id}',
      summary: 'Delete an artifact: its objects and record go, its links stop working',
      document: graphql(`mutation RestDeleteArtifact($id: ID!) { deleteArtifact(id: $id) }`),
      result: { kind: 'wrap', field: 'deleteArtifact', key: 'deleted' },
      status: 200,
    },
    content,
    {
      method: 'POST',
      path: '/v1/artifacts/{id}/links',
      summary: 'Make a signed link: body {lifetime} (default 24h, at most 30d, never past the artifact expiry)',
      document: graphql(`
        mutation RestCreateArtifactLink($id: ID!, $input: ArtifactLinkInput) {
          createArtifactLink(id: $id, input: $input) { ...ArtifactLinkFields }
        }
      `),
      body: { variable: 'input' },
      result: { kind: 'wrap', field: 'createArtifactLink', key: 'link' },
      status: 201,
    },
    {
      method: 'DELETE',
      path: '/v1/artifacts/{id}/links',
      summary: 'Revoke every signed link made so far (they answer 410 link_revoked)',
      document: graphql(`mutation RestRevokeArtifactLinks($id: ID!) { revokeArtifactLinks(id: $id) { ...ArtifactFields } }`),
      result: { kind: 'wrap', field: 'revokeArtifactLinks', key: 'artifact' },
      status: 200,
    },
    viaLink,
  ];
}
