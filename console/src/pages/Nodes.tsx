import type { CombinedError } from '@urql/core';
import { useState } from 'react';
import { Link } from 'wouter';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { Failure, LiveNotice, Page, QueryState, StateBadge, Table } from '../components/ui';
import { bytes, when } from '../format';
import { graphql } from '../generated/gql';
import { useEvents, useOnEnvironmentChange } from '../live';
import { useSession } from '../session';

const NodeList = graphql(`
  query NodeList {
    nodes {
      id name pool builtin engine state reason slots lastSeen liveEnvironments { id name } cordoned { at by }
      capacity { cpus memory } allocated { cpus memory unlimited }
      warm { slot template state error }
    }
  }
`);

const NodesChanged = graphql(`
  subscription NodesChanged {
    nodesChanged { id state }
  }
`);

const CordonNode = graphql(`
  mutation CordonNode($id: ID!) {
    cordonNode(id: $id) { id cordoned { at by } }
  }
`);

const UncordonNode = graphql(`
  mutation UncordonNode($id: ID!) {
    uncordonNode(id: $id) { id cordoned { at by } }
  }
`);

interface Sized {
  capacity?: { cpus: number; memory: number } | null;
  allocated: { cpus: number; memory: number; unlimited: number };
}

/** What its live environments' limits take of the machine, and how many have none (theirs is in no sum). */
function allocation({ capacity, allocated }: Sized): string {
  if (!capacity) return 'not reported yet';
  const unlimited = allocated.unlimited ? `; ${allocated.unlimited} without limits` : '';
  return `${allocated.cpus} of ${capacity.cpus} CPUs, ${bytes(allocated.memory)} of ${bytes(capacity.memory)}${unlimited}`;
}

/** The built-in node and the organization's nodes, live: their state as it changes, their slots as environments come and go. */
export function NodesPage() {
  const { viewer } = useSession();
  const [list, refetch] = useQueryAnswer({ query: NodeList, requestPolicy: 'cache-and-network' });
  const reload = () => refetch({ requestPolicy: 'network-only' });
  const [cordoning, cordon] = useMutationAnswer(CordonNode);
  const [uncordoning, uncordon] = useMutationAnswer(UncordonNode);
  // The last cordon or uncordon's error only: one that succeeds after a failed one clears it.
  const [cordonError, setCordonError] = useState<CombinedError>();
  const setCordon = async (id: string, cordoned: boolean) => {
    const result = cordoned ? await cordon({ id }) : await uncordon({ id });
    setCordonError(result.error);
    if (!result.error) reload();
  };
  const nodeError = useEvents(NodesChanged, {}, reload, { resync: reload });
  // A slot is taken or given back when an environment on one of these nodes changes (one on the
  // built-in node shows its hot node's name, `<pool>-<n>`).
  const names = new Set(list.data?.nodes.map((n) => n.name));
  const builtin = Boolean(list.data?.nodes.some((n) => n.builtin));
  const envError = useOnEnvironmentChange(reload, (env) => Boolean(env.node && (builtin || names.has(env.node))));
  return (
    <Page title="Nodes">
      <p className="muted">
        The build machines running <code>berth node</code>: the built-in node, which the server runs for every organization's leases of the
        pools with hot nodes, and the organization's own, each serving one pool. An environment takes one of its node's slots while it is
        live, and its template's CPU and memory limits count as allocated (of the built-in node, only this organization's environments are
        shown). Free slots may keep warm containers of templates with <code>warm</code>, which leases claim. A cordoned node takes no new
        leases and keeps no warm containers; its live environments go on (admins cordon and uncordon the organization's nodes).
      </p>
      <LiveNotice error={nodeError ?? envError} />
      {cordonError ? <Failure error={cordonError} /> : null}
      <QueryState
        what="nodes"
        result={list}
        retry={reload}
        isEmpty={(d) => d.nodes.length === 0}
        empty={
          <>
            No nodes yet: an admin registers one (<code>POST /v1/nodes</code>) and starts <code>berth node</code> with its credential.
          </>
        }
      >
        {(data) => (
          <Table
            label="Nodes"
            head={[
              'Name',
              'Pool',
              'State',
              'Slots in use',
              'Allocated',
              'Warm containers',
              'Last seen',
              'Environments',
              ...(viewer.admin ? ['Cordon'] : []),
            ]}
          >
            {data.nodes.map((node) => (
              <tr key={node.id}>
                <th scope="row">
                  {node.name}
                  {node.builtin ? (
                    <span className="muted" title={node.engine ? `containers through ${node.engine}` : 'no container engine: files only'}>
                      {' '}
                      (built-in)
                    </span>
                  ) : null}
                </th>
                <td>{node.builtin ? 'hot pools' : node.pool}</td>
                <td>
                  <StateBadge state={node.state} />
                  {node.state === 'degraded' && node.reason ? <div className="state-reason small">{node.reason}</div> : null}
                  {node.cordoned ? (
                    <div className="cordoned small">
                      cordoned by {node.cordoned.by} since {when(node.cordoned.at)}
                    </div>
                  ) : null}
                </td>
                <td>
                  {node.liveEnvironments.length} of {node.slots}
                </td>
                <td>{allocation(node)}</td>
                <td>
                  {node.warm.length ? (
                    <ul className="inline-list">
                      {node.warm.map((w) => (
                        <li key={w.slot} title={w.error ?? undefined}>
                          {w.template}: {w.state}
                        </li>
                      ))}
                    </ul>
                  ) : (
                    '–'
                  )}
                </td>
                <td>{node.lastSeen ? when(node.lastSeen) : 'never'}</td>
                <td>
                  {node.liveEnvironments.length ? (
                    <ul className="inline-list">
                      {node.liveEnvironments.map((env) => (
                        <li key={env.id}>
                          <Link href={`/environments/${env.name}`}>{env.name}</Link>
                        </li>
                      ))}
                    </ul>
                  ) : (
                    '–'
                  )}
                </td>
                {viewer.admin ? (
                  <td>
                    {/* The built-in node serves every organization: no one organization's admin cordons it. */}
                    {node.builtin ? null : (
                      <button
                        type="button"
                        disabled={cordoning.fetching || uncordoning.fetching}
                        onClick={() => setCordon(node.id, !node.cordoned)}
                        aria-label={`${node.cordoned ? 'Uncordon' : 'Cordon'} ${node.name}`}
                        title={node.cordoned ? 'It takes new leases again' : 'No new leases go to it; its live environments go on'}
                      >
                        {node.cordoned ? 'Uncordon' : 'Cordon'}
                      </button>
                    )}
                  </td>
                ) : null}
              </tr>
            ))}
          </Table>
        )}
      </QueryState>
    </Page>
  );
}
