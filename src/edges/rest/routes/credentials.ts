import { graphql } from '../../../generated/gql';
import type { Route } from '../route';

graphql(`
  fragment CliTokenFields on CliToken {
    id name person admin prefix createdBy created expires revoked lastUsed
  }
  fragment ApiKeyFields on ApiKey {
    id name admin prefix createdBy created expires revoked lastUsed
  }
`);

export const credentialRoutes: Route[] = [
  {
    method: 'GET',
    path: '/v1/me',
    summary: 'Who the credential acts as',
    document: graphql(`query RestViewer { viewer { kind name admin organization { id name storage { used limit } poolShare } } }`),
    result: { kind: 'field', field: 'viewer' },
    status: 200,
  },
  {
    method: 'POST',
    path: '/v1/tokens',
    summary: 'Create a CLI token',
    description: 'For the caller, or (admins) for any member by email, adding the member when new. The secret is returned once.',
    document: graphql(`
      mutation RestCreateToken($input: CreateTokenInput) {
        createToken(input: $input) { token { ...CliTokenFields } secret }
      }
    `),
    body: { variable: 'input' },
    result: { kind: 'field', field: 'createToken' },
    status: 201,
  },
  {
    method: 'GET',
    path: '/v1/tokens',
    summary: "List CLI tokens (admins: the organization's; others: their own)",
    document: graphql(`query RestTokens { tokens { ...CliTokenFields } }`),
    result: { kind: 'wrap', field: 'tokens', key: 'tokens' },
    status: 200,
  },
  {
    method: 'DELETE',
    path: '/v1/tokens/{id}',
    summary: 'Revoke a CLI token (idempotent)',
    document: graphql(`mutation RestRevokeToken($id: ID!) { revokeToken(id: $id) { ...CliTokenFields } }`),
    result: { kind: 'wrap', field: 'revokeToken', key: 'token' },
    status: 200,
  },
  {
    method: 'POST',
    path: '/v1/keys',
    summary: 'Create an organization API key (admins only)',
    document: graphql(`
      mutation RestCreateKey($input: CreateApiKeyInput!) {
        createApiKey(input: $input) { key { ...ApiKeyFields } secret }
      }
    `),
    body: { variable: 'input', required: true },
    result: { kind: 'field', field: 'createApiKey' },
    status: 201,
  },
  {
    method: 'GET',
    path: '/v1/keys',
    summary: "List the organization's API keys (admins only)",
    document: graphql(`query RestKeys { apiKeys { ...ApiKeyFields } }`),
    result: { kind: 'wrap', field: 'apiKeys', key: 'keys' },
    status: 200,
  },
  {
    method: 'DELETE',
    path: '/v1/keys/{id}',
    summary: 'Revoke an API key (admins only; idempotent)',
    document: graphql(`mutation RestRevokeKey($id: ID!) { revokeApiKey(id: $id) { ...ApiKeyFields } }`),
    result: { kind: 'wrap', field: 'revokeApiKey', key: 'key' },
    status: 200,
  },
];
