import { GraphQLNonNull, type GraphQLSchema, GraphQLString } from 'graphql';
import { graphql } from '../../../generated/gql';
import { joinSandbox } from '../../../modules/sandboxes';
import { sendJson } from '../../http/respond';
import { bodyFields } from '../body';
import { readJsonBody } from '../http';
import type { Route } from '../route';
import { shapeOf } from '../shape';

graphql(`
  fragment SandboxFields on Sandbox {
    id org name createdBy created lastSeen removed removedBy
  }
`);

/** The join's answer, as the GraphQL `joinSandbox` mutation gives it (the route spends the key itself). */
const JoinedFields = graphql(`
  fragment RestJoinedSandbox on JoinedSandbox { sandbox { ...SandboxFields } config credential }
`);

const JOIN_BODY = bodyFields({
  key: { type: new GraphQLNonNull(GraphQLString), description: 'The join key from POST /v1/sandboxes' },
});

/** The /v1 sandbox routes; the join authenticates by its key, so it calls the service itself. */
export function sandboxRoutes(schema: GraphQLSchema): Route[] {
  const joined = shapeOf<Awaited<ReturnType<typeof joinSandbox>>>(schema, JoinedFields);
  return [
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
          '201': { description: 'Joined: a new sandbox credential', schema: joined.schema },
        },
      },
      handle: async (req, res, { deps, clientAddress }) => {
        const body = await readJsonBody(req);
        JOIN_BODY.check(body);
        sendJson(res, 201, await joined.json(await joinSandbox(deps, { key: body.key }, { address: clientAddress })));
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
}
