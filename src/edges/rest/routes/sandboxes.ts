import { GraphQLNonNull, GraphQLString } from 'graphql';
import { graphql } from '../../../generated/gql';
import { joinSandbox, type SandboxRecord } from '../../../modules/sandboxes';
import { sendJson } from '../../http/respond';
import { bodyFields } from '../body';
import { readJsonBody, stripNulls } from '../http';
import type { JsonSchema } from '../json-schema';
import type { Route } from '../route';

graphql(`
  fragment SandboxFields on Sandbox {
    id org name createdBy created lastSeen removed removedBy
  }
`);

const dateTime = { type: 'string', format: 'date-time' };

/** The Sandbox object as REST shows it (the join route builds its body without GraphQL). */
const SANDBOX_SCHEMA: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    org: { type: 'string' },
    name: { type: 'string' },
    createdBy: { type: 'string' },
    created: dateTime,
    lastSeen: dateTime,
    removed: dateTime,
    removedBy: { type: 'string' },
  },
  required: ['id', 'org', 'name', 'createdBy', 'created'],
  additionalProperties: false,
};

function sandboxJson(s: SandboxRecord) {
  return {
    id: s.id,
    org: s.org,
    name: s.name,
    createdBy: s.createdBy,
    created: s.created.toISOString(),
    lastSeen: s.lastSeen?.toISOString(),
    removed: s.removed?.toISOString(),
    removedBy: s.removedBy,
  };
}

const JOIN_BODY = bodyFields({
  key: { type: new GraphQLNonNull(GraphQLString), description: 'The join key from POST /v1/sandboxes' },
});

export const sandboxRoutes: Route[] = [
  {
    method: 'POST',
    path: '/v1/sandboxes',
    summary: 'Register a machine as a sandbox',
    description:
      "Body: name (a DNS label; empty: the first label of hostname, else a generated name), hostname (the machine's). " +
      'Answers the sandbox, its configuration and a network join key: single use, valid one hour.',
    document: graphql(`
      mutation RestRegisterSandbox($input: RegisterSandboxInput) {
        registerSandbox(input: $input) { sandbox { ...SandboxFields } config key }
      }
    `),
    body: { variable: 'input' },
    result: { kind: 'field', field: 'registerSandbox' },
    status: 201,
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/join',
    summary: "Spend a join key: the sandbox agent's first call",
    description:
      'Needs no bearer credential: the key is the credential. Body: {key}. Answers the sandbox, its configuration and ' +
      "the sandbox's own credential (shown once). A used key is 409 key_used, an expired one 410 key_expired, a removed " +
      "sandbox's 410 sandbox_removed; an unknown key is 401 and counts toward the 429 lock.",
    auth: 'none',
    openapi: {
      requestBody: JOIN_BODY.schema,
      responses: {
        '201': {
          description: 'Joined: a new sandbox credential',
          schema: {
            type: 'object',
            properties: { sandbox: SANDBOX_SCHEMA, config: { type: 'object' }, credential: { type: 'string' } },
            required: ['sandbox', 'config', 'credential'],
            additionalProperties: false,
          },
        },
      },
    },
    handle: async (req, res, { deps, clientAddress }) => {
      const body = await readJsonBody(req);
      JOIN_BODY.check(body);
      const joined = await joinSandbox(deps, { key: body.key }, { address: clientAddress });
      sendJson(res, 201, stripNulls({ sandbox: sandboxJson(joined.sandbox), config: joined.config, credential: joined.credential }));
    },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes',
    summary: "The organization's sandboxes with their live environment counts",
    params: [{ name: 'removed', in: 'query', type: 'boolean', description: 'Include removed sandboxes (default false)' }],
    document: graphql(`
      query RestSandboxes($removed: Boolean) {
        sandboxes(removed: $removed) { sandbox { ...SandboxFields } environments }
      }
    `),
    result: { kind: 'wrap', field: 'sandboxes', key: 'sandboxes' },
    status: 200,
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/{id}',
    summary: 'One sandbox (by id, or by the name of one not removed) with its live environment count',
    document: graphql(`
      query RestSandbox($id: ID!) {
        sandbox(id: $id) { sandbox { ...SandboxFields } environments }
      }
    `),
    result: { kind: 'field', field: 'sandbox' },
    status: 200,
  },
  {
    method: 'DELETE',
    path: '/v1/sandboxes/{id}',
    summary: 'Remove a sandbox (idempotent)',
    description:
      'Sets removed, revokes its credential and join key, and refuses new wiring. Environments still wired keep running ' +
      'until they end; the sandbox configuration no longer lists them.',
    document: graphql(`mutation RestRemoveSandbox($id: ID!) { removeSandbox(id: $id) { ...SandboxFields } }`),
    result: { kind: 'wrap', field: 'removeSandbox', key: 'sandbox' },
    status: 200,
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/{id}/config',
    summary: "The sandbox's configuration (members, or the sandbox's own credential)",
    document: graphql(`query RestSandboxConfig($id: ID!) { sandboxConfig(id: $id) }`),
    result: { kind: 'wrap', field: 'sandboxConfig', key: 'config' },
    status: 200,
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/heartbeat',
    summary: "The sandbox's agent reports that it is alive (sets lastSeen)",
    document: graphql(`mutation RestSandboxHeartbeat($id: ID!) { sandboxHeartbeat(id: $id) { ...SandboxFields } }`),
    result: { kind: 'wrap', field: 'sandboxHeartbeat', key: 'sandbox' },
    status: 200,
  },
];
