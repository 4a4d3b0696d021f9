import { graphql } from '../../../generated/gql';
import { PAGE_PARAMS, type Route } from '../route';

/** A Snapshot as every route shows it (also the answer of a node's save, routes/nodes.ts). */
export const SnapshotFields = graphql(`
  fragment SnapshotFields on Snapshot {
    project key share root keyVersion
    segments { name size objects }
    files bytes objects sealedBytes lease createdBy created
  }
`);

export const snapshotRoutes: Route[] = [
  {
    method: 'GET',
    path: '/v1/snapshots',
    summary: "A project's snapshots, newest first",
    params: [
      { name: 'project', in: 'query', type: 'string', description: 'project (default: `default`)' },
      { name: 'prefix', in: 'query', type: 'string', description: 'only keys starting with this' },
      ...PAGE_PARAMS,
    ],
    document: graphql(`
      query RestSnapshots($project: String, $prefix: String, $first: Int, $after: String) {
        snapshots(project: $project, prefix: $prefix, first: $first, after: $after) { project snapshots { ...SnapshotFields } next }
      }
    `),
    result: { kind: 'field', field: 'snapshots' },
    status: 200,
  },
  {
    method: 'DELETE',
    path: '/v1/project-keys/{project}',
    summary: 'Shred a project: its keys, then its snapshots and artifacts (admins only)',
    description:
      '200 {project, shredded: true, at}; repeated with nothing new to shred: the same answer with the `at` of the latest shred. 403 forbidden for non-admins, 404 not_found for a project that never had a key, snapshot or artifact.',
    document: graphql(`mutation RestShredProject($project: String!) { shredProject(project: $project) { project shredded at } }`),
    result: { kind: 'field', field: 'shredProject' },
    status: 200,
  },
];
