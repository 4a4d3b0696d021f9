import { graphql } from '../../../generated/gql';
import { PAGE_PARAMS, type Route } from '../route';

graphql(`
  fragment EnvironmentFields on Environment {
    id name template state waiting node sandbox pool labels project readyMs error createdBy stoppedBy
    created ready stopped expires idleUntil idle hard
    exports { service listen target }
    shares { name direction envPath localPath files }
    snapshot
    restored { key root files created }
    image resources { cpus memory pids disk } network workdir runtime
  }
  fragment UsageFields on EnvironmentUsage { cpu memory pids disk sampled }
  fragment ExecFields on Exec { id lease time actor command exitCode durationMs }
  fragment QuotaFields on Quota { template maxLeases running idle hard warnings }
`);

export const environmentRoutes: Route[] = [
  {
    method: 'POST',
    path: '/v1/environments',
    summary: 'Lease an environment from a template; it is queued for a hot node',
    description:
      '202 with the environment in pending. 404 no_template / not_found (sandbox), 422 invalid, 429 quota, 503 queue_full (the environment is recorded as failed).',
    document: graphql(`
      mutation RestCreateEnvironment($input: CreateEnvironmentInput!) {
        createEnvironment(input: $input) { environment { ...EnvironmentFields } sandboxConfig }
      }
    `),
    body: { variable: 'input', required: true },
    result: { kind: 'field', field: 'createEnvironment' },
    status: 202,
  },
  {
    method: 'GET',
    path: '/v1/environments',
    summary: 'List environments, newest first',
    params: [
      { name: 'state', in: 'query', type: 'string', description: 'pending, starting, ready, stopping, stopped, failed, or live / ended' },
      { name: 'template', in: 'query', type: 'string' },
      { name: 'label', in: 'query', type: 'string', list: true, description: 'key=value; repeat to require several' },
      { name: 'sandbox', in: 'query', type: 'string', description: 'a sandbox id, or the name of a sandbox not removed' },
      { name: 'project', in: 'query', type: 'string' },
      ...PAGE_PARAMS,
    ],
    document: graphql(`
      query RestEnvironments($state: String, $template: String, $label: [String!], $sandbox: String, $project: String, $first: Int, $after: String) {
        environments(filter: { state: $state, template: $template, label: $label, sandbox: $sandbox, project: $project }, first: $first, after: $after) {
          nodes { ...EnvironmentFields }
          pageInfo { hasNextPage endCursor }
        }
      }
    `),
    result: { kind: 'list', field: 'environments', key: 'environments' },
    status: 200,
  },
  {
    method: 'GET',
    path: '/v1/environments/{id}',
    summary: 'An environment by id or by name (unwrapped)',
    document: graphql(`query RestEnvironment($id: String!) { environment(id: $id) { ...EnvironmentFields } }`),
    result: { kind: 'field', field: 'environment' },
    status: 200,
  },
  {
    method: 'DELETE',
    path: '/v1/environments/{id}',
    summary: 'End an environment: stopping, then stopped. Idempotent; answers the environment as it is now',
    document: graphql(`mutation RestStopEnvironment($id: String!) { stopEnvironment(id: $id) { ...EnvironmentFields } }`),
    result: { kind: 'wrap', field: 'stopEnvironment', key: 'environment' },
    status: 200,
  },
  {
    method: 'POST',
    path: '/v1/environments/{id}/keepalive',
    summary: 'Count as activity: idleUntil moves to now + idle',
    document: graphql(`mutation RestKeepAlive($id: String!) { keepEnvironmentAlive(id: $id) { ...EnvironmentFields } }`),
    result: { kind: 'wrap', field: 'keepEnvironmentAlive', key: 'environment' },
    status: 200,
  },
  {
    method: 'POST',
    path: '/v1/environments/{id}/previews',
    summary: 'A signed, expiring URL of a port inside the environment (docs/environments.md, "Preview URLs")',
    description:
      '201 with {preview: {url, port, expires}}. 403 not its owner, an admin or an API key; 404 no such environment; 409 PREVIEW_DOMAIN is not set, or the environment is not ready yet; 410 it has ended; 422 a port outside 1-65535 or a bad expiresIn (default 1h, at most 24h).',
    document: graphql(`
      mutation RestCreatePreview($id: String!, $input: CreatePreviewInput!) {
        createPreview(environment: $id, input: $input) { url port expires }
      }
    `),
    body: { variable: 'input', required: true },
    result: { kind: 'wrap', field: 'createPreview', key: 'preview' },
    status: 201,
  },
  {
    method: 'POST',
    path: '/v1/environments/{id}/execs',
    summary: "Record a command in the environment's log (counts as activity)",
    document: graphql(`
      mutation RestRecordExec($id: String!, $input: ExecInput!) { recordExec(environment: $id, input: $input) { ...ExecFields } }
    `),
    body: { variable: 'input', required: true },
    result: { kind: 'wrap', field: 'recordExec', key: 'exec' },
    status: 201,
  },
  {
    method: 'GET',
    path: '/v1/environments/{id}/execs',
    summary: 'Every command recorded for the environment, newest first',
    document: graphql(`query RestExecs($id: String!) { execs(environment: $id) { ...ExecFields } }`),
    result: { kind: 'wrap', field: 'execs', key: 'execs' },
    status: 200,
  },
  {
    method: 'GET',
    path: '/v1/environments/{id}/sessions',
    summary: "The environment's open sessions, oldest first (its owner, admins and API keys)",
    document: graphql(`
      query RestSessions($id: String!) { environment(id: $id) { sessions { id command tty created attached lastActivity } } }
    `),
    result: { kind: 'field', field: 'environment' },
    status: 200,
  },
  {
    method: 'DELETE',
    path: '/v1/environments/{id}/sessions/{session}',
    summary: "End a session: its command's whole session is killed and recorded (137); answers the Exec",
    document: graphql(`
      mutation RestEndSession($id: String!, $session: String!) { endSession(environment: $id, session: $session) { ...ExecFields } }
    `),
    result: { kind: 'wrap', field: 'endSession', key: 'exec' },
    status: 200,
  },
  {
    method: 'GET',
    path: '/v1/environments/{id}/usage',
    summary:
      "The environment's latest usage sample and the last hour's (history: oldest first, every sample of the last five minutes, at most one a minute before)",
    document: graphql(`
      query RestEnvironmentUsage($id: String!) { environment(id: $id) { usage { ...UsageFields } history: usageHistory { ...UsageFields } } }
    `),
    result: { kind: 'field', field: 'environment' },
    status: 200,
  },
  {
    method: 'PUT',
    path: '/v1/quotas/{template}',
    summary: 'Set the quota of a template, or * across all templates (admins only)',
    document: graphql(`
      mutation RestSetQuota($template: String!, $input: QuotaInput!) { setQuota(template: $template, input: $input) { ...QuotaFields } }
    `),
    body: { variable: 'input', required: true },
    result: { kind: 'wrap', field: 'setQuota', key: 'quota' },
    status: 200,
  },
  {
    method: 'GET',
    path: '/v1/quotas',
    summary: "The organization's quotas with live running counts",
    document: graphql(`query RestQuotas { quotas { ...QuotaFields } }`),
    result: { kind: 'wrap', field: 'quotas', key: 'quotas' },
    status: 200,
  },
];
