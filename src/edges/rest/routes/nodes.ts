import type { IncomingMessage } from 'node:http';
import { PassThrough, pipeline } from 'node:stream';
import { GraphQLInt, GraphQLList, GraphQLNonNull, type GraphQLSchema, GraphQLString } from 'graphql';
import { graphql } from '../../../generated/gql';
import type { Environment, Snapshot } from '../../../generated/prisma/client';
import { BadRequestError, DomainError } from '../../../kernel/errors';
import { execRecord, runCommand } from '../../../modules/environments';
import { nodeOpenArchive, nodeRecordRestored, nodeRestorePlan, nodeSaveShare } from '../../../modules/nodes';
import { ARCHIVE_CONTENT_TYPE } from '../../../protocol/snapshot-archive';
import { sendJson } from '../../http/respond';
import { bodyFields } from '../body';
import { readJsonBody, UPLOAD_IDLE_MS } from '../http';
import type { Route } from '../route';
import { shapeOf } from '../shape';
import { SnapshotFields } from './snapshots';

graphql(`
  fragment NodeFields on Node {
    id name pool builtin engine state reason slots images environments capacity { cpus memory } allocated { cpus memory unlimited }
    cordoned { at by }
    warm { slot template state since error } lastSeen createdBy created
  }
`);

const dateTime = { type: 'string', format: 'date-time' };

// What a node's restore report answers: the environment with its Restored, as GraphQL shows them.
const RestoredShape = graphql(`
  fragment RestRestoredEnvironment on Environment {
    id name state node restored { key root files created }
  }
`);

function requireArchive(req: IncomingMessage): void {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== ARCHIVE_CONTENT_TYPE) {
    throw new BadRequestError(`expected Content-Type ${ARCHIVE_CONTENT_TYPE}, got "${type || 'none'}"`, 'bad_content_type');
  }
}

const RESTORED_BODY = bodyFields({
  root: { type: new GraphQLNonNull(GraphQLString) },
  files: { type: new GraphQLNonNull(GraphQLInt) },
});
const EXEC_BODY = bodyFields({ command: { type: new GraphQLNonNull(new GraphQLList(new GraphQLNonNull(GraphQLString))) } });

const NODE_ONLY = 'Node credentials (bnd_) only, for an environment currently on that node; others 403.';

/** The node's routes; the save and the restore report answer records through their GraphQL types. */
export function nodeRoutes(schema: GraphQLSchema): Route[] {
  // The Snapshot of GET /v1/snapshots: one shape wherever a snapshot is shown.
  const snapshot = shapeOf<Snapshot>(schema, SnapshotFields);
  const restored = shapeOf<Environment>(schema, RestoredShape);
  return [
    {
      method: 'POST',
      path: '/v1/nodes',
      summary: 'Create a node credential for one pool (admins)',
      description:
        'Body: {pool, name}. 201 {node, secret}: the secret (bnd_…) is shown once, for `berth node --token`. ' +
        '409 name_taken when a node of the organization has that name; 422 for an unknown pool or a bad name.',
      document: graphql(`
      mutation RestCreateNode($input: CreateNodeInput!) {
        createNode(input: $input) { node { ...NodeFields } secret }
      }
    `),
      body: { variable: 'input', required: true },
      result: { kind: 'field', field: 'createNode' },
      status: 201,
    },
    {
      method: 'GET',
      path: '/v1/nodes',
      summary:
        "The built-in node, then the organization's nodes, with their state, slots, capacity, what is allocated and live environments",
      description:
        "The built-in node (builtin: true) serves every organization: it shows only the caller's environments, allocation and warm containers.",
      document: graphql(`query RestNodes { nodes { ...NodeFields } }`),
      result: { kind: 'wrap', field: 'nodes', key: 'nodes' },
      status: 200,
    },
    {
      method: 'DELETE',
      path: '/v1/nodes/{id}',
      summary: 'Drain a node now and revoke it once its live environments have ended (admins)',
      description:
        "200 {node} with state draining. Another organization's node, like an unknown or revoked one, is 404; the built-in node 409 (it stops with the server).",
      document: graphql(`mutation RestRemoveNode($id: ID!) { removeNode(id: $id) { ...NodeFields } }`),
      result: { kind: 'wrap', field: 'removeNode', key: 'node' },
      status: 200,
    },
    {
      method: 'POST',
      path: '/v1/nodes/{id}/cordon',
      summary: 'Cordon a node: no new leases go to it; its live environments go on (admins)',
      description:
        '200 {node} with cordoned {at, by}; a cordoned node also keeps no warm containers. Asking again changes nothing. ' +
        "Another organization's node, like an unknown or revoked one, is 404; the built-in node 409 (it serves every organization).",
      document: graphql(`mutation RestCordonNode($id: ID!) { cordonNode(id: $id) { ...NodeFields } }`),
      result: { kind: 'wrap', field: 'cordonNode', key: 'node' },
      status: 200,
    },
    {
      method: 'POST',
      path: '/v1/nodes/{id}/uncordon',
      summary: 'Uncordon a node: it takes new leases again (admins)',
      description:
        "200 {node} with cordoned null. Another organization's node, like an unknown or revoked one, is 404; the built-in node 409.",
      document: graphql(`mutation RestUncordonNode($id: ID!) { uncordonNode(id: $id) { ...NodeFields } }`),
      result: { kind: 'wrap', field: 'uncordonNode', key: 'node' },
      status: 200,
    },
    {
      method: 'PUT',
      path: '/v1/snapshots/{lease}/{share}',
      summary: "A node saves one share of an environment it is releasing (the share's tar archive)",
      description: `${NODE_ONLY} 201 the new snapshot; 200 the existing one when that share of the lease is already saved; 409 when the lease has no snapshot key or is not stopping.`,
      auth: 'bearer',
      openapi: {
        requestBody: { contentType: ARCHIVE_CONTENT_TYPE, type: 'string', format: 'binary' },
        responses: {
          '201': { description: 'Saved', schema: snapshot.schema },
          '200': { description: 'Already saved', schema: snapshot.schema },
        },
      },
      async handle(req, res, { ctx, params }) {
        requireArchive(req);
        req.setTimeout(UPLOAD_IDLE_MS);
        // Through a stream of its own: a save refused half-way (over the storage limit) destroys
        // that one, while the request's rest is drained and the node reads the answer (early-answer.ts).
        const body = new PassThrough();
        req.pipe(body);
        const saved = await nodeSaveShare(ctx!.deps, ctx!.actor, params.lease!, params.share!, body).catch((error: unknown) => {
          req.unpipe(body);
          body.destroy();
          throw error;
        });
        sendJson(res, saved.created ? 201 : 200, await snapshot.json(saved.snapshot, ctx));
      },
    },
    {
      method: 'GET',
      path: '/v1/environments/{id}/restore',
      summary: 'What an environment starting on the calling node restores',
      description: `${NODE_ONLY} 200 {key, root, created, shares: [{share, snapshot}]}; 204 when nothing matches.`,
      auth: 'bearer',
      openapi: {
        responses: {
          '200': {
            description: 'The save to restore',
            schema: {
              type: 'object',
              properties: {
                key: { type: 'string' },
                root: { type: 'string' },
                created: dateTime,
                shares: {
                  type: 'array',
                  items: {
                    type: 'object',
                    properties: { share: { type: 'string' }, snapshot: { type: 'string' } },
                    required: ['share', 'snapshot'],
                    additionalProperties: false,
                  },
                },
              },
              required: ['key', 'root', 'created', 'shares'],
              additionalProperties: false,
            },
          },
          '204': { description: 'Nothing to restore' },
        },
      },
      async handle(_req, res, { ctx, params }) {
        const plan = await nodeRestorePlan(ctx!.deps, ctx!.actor, params.id!);
        if (!plan) {
          res.writeHead(204).end();
          return;
        }
        sendJson(res, 200, {
          key: plan.key,
          root: plan.root,
          created: plan.created.toISOString(),
          shares: plan.shares.map((s) => ({ share: s.share, snapshot: s.id })),
        });
      },
    },
    {
      method: 'GET',
      path: '/v1/snapshots/{snapshot}/archive',
      summary: "One saved share's tar archive, for a node restoring it",
      description: `${NODE_ONLY} The archive is authenticated chunk by chunk as it is sent; a damaged chunk aborts the response.`,
      auth: 'bearer',
      openapi: {
        responses: {
          '200': { description: 'The archive', contentType: ARCHIVE_CONTENT_TYPE, schema: { type: 'string', format: 'binary' } },
        },
      },
      async handle(_req, res, { ctx, params }) {
        const stream = await nodeOpenArchive(ctx!.deps, ctx!.actor, params.snapshot!);
        res.writeHead(200, { 'content-type': ARCHIVE_CONTENT_TYPE });
        pipeline(stream, res, () => undefined);
      },
    },
    {
      method: 'POST',
      path: '/v1/environments/{id}/restored',
      summary: 'A node reports what it restored into an environment starting on it',
      description: `${NODE_ONLY} Body: {root, files}. 200 {id, name, state, node, restored}; only while the environment is starting.`,
      auth: 'bearer',
      openapi: {
        requestBody: RESTORED_BODY.schema,
        responses: { '200': { description: 'Recorded', schema: restored.schema } },
      },
      async handle(req, res, { ctx, params }) {
        const body = await readJsonBody(req);
        RESTORED_BODY.check(body);
        const env = await nodeRecordRestored(ctx!.deps, ctx!.actor, params.id!, body);
        sendJson(res, 200, await restored.json(env, ctx));
      },
    },
  ];
}

/** The Exec row as the exec stream's last line shows it (the same fields as GET …/execs). */
export const execRoute: Route = {
  method: 'POST',
  path: '/v1/environments/{id}/exec',
  summary: "Run a command on the environment's node, its output streamed back as it comes",
  description:
    'Body: {command: [program, ...args]}; runs with the environment root as working directory (members; ready environments, else 409). ' +
    '200 application/x-ndjson, one JSON object a line: {stream: "stdout"|"stderr", data: <base64>} as output arrives, then ' +
    '{exitCode, exec} (the recorded Exec: actor is the caller, durationMs measured by the server), or {error, code} when it ' +
    'could not finish (the node was lost). Closing the request stops the command.',
  auth: 'bearer',
  openapi: {
    requestBody: EXEC_BODY.schema,
    responses: { '200': { description: 'Output lines, then the exit', contentType: 'application/x-ndjson', schema: { type: 'string' } } },
  },
  async handle(req, res, { ctx, params }) {
    const body = await readJsonBody(req);
    EXEC_BODY.check(body);
    const gone = new AbortController();
    // Closed before its end was written: the caller went away.
    res.once('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const events = await runCommand(ctx!.deps, ctx!.actor, params.id!, body.command, gone.signal);
    const it = events[Symbol.asyncIterator]();
    res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
    try {
      for (let next = await it.next(); !next.done; next = await it.next()) {
        const event = next.value;
        const line =
          event.kind === 'output'
            ? { stream: event.stream, data: event.data.toString('base64') }
            : { exitCode: event.exec.exitCode, exec: execRecord(event.exec) };
        if (!res.write(`${JSON.stringify(line)}\n`) && !gone.signal.aborted) {
          // Each wait takes its listeners away again: a slow reader waits many times.
          await new Promise<void>((resolve) => {
            const done = () => {
              res.off('drain', done);
              res.off('close', done);
              resolve();
            };
            res.once('drain', done);
            res.once('close', done);
          });
        }
      }
    } catch (error) {
      const code = error instanceof DomainError ? error.code : 'internal';
      res.write(`${JSON.stringify({ error: error instanceof Error ? error.message : String(error), code })}\n`);
    }
    res.end();
  },
};
