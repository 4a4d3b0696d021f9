import { graphql } from '../../../generated/gql';
import { PAGE_PARAMS, type Route } from '../route';

export const auditRoutes: Route[] = [
  {
    method: 'GET',
    path: '/v1/audit',
    summary: "The organization's audit events, newest first (admins only)",
    description:
      '200 {events, next}. 403 forbidden for members who are not admins; 422 invalid naming the parameter (an unknown action, a time that is not RFC 3339).',
    params: [
      { name: 'action', in: 'query', type: 'string', description: 'one action, such as environment.create' },
      { name: 'actor', in: 'query', type: 'string', description: "an actor's id (usr_…, key_…, sb_…, a node's id) or a person's email" },
      { name: 'target', in: 'query', type: 'string', description: "a target's id" },
      { name: 'since', in: 'query', type: 'string', description: 'RFC 3339: events at or after this time' },
      { name: 'until', in: 'query', type: 'string', description: 'RFC 3339: events before this time' },
      ...PAGE_PARAMS,
    ],
    document: graphql(`
      query RestAuditEvents($action: String, $actor: String, $target: String, $since: String, $until: String, $first: Int, $after: String) {
        auditEvents(filter: { action: $action, actor: $actor, target: $target, since: $since, until: $until }, first: $first, after: $after) {
          nodes { id time action actor { kind id name } target { kind id } address outcome detail }
          pageInfo { hasNextPage endCursor }
        }
      }
    `),
    result: { kind: 'list', field: 'auditEvents', key: 'events' },
    status: 200,
  },
];
