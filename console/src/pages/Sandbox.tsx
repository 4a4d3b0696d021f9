import { useState } from 'react';
import { Link } from 'wouter';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { ConfirmAction, Empty, Failure, Fields, LiveNotice, Page, QueryState, Section, StateBadge, Table } from '../components/ui';
import { when } from '../format';
import { graphql } from '../generated/gql';
import { useEvents } from '../live';

const SandboxDetail = graphql(`
  query SandboxDetail($id: ID!) {
    sandbox(id: $id) {
      environments
      sandbox { id name org createdBy created lastSeen removed removedBy }
    }
  }
`);

const SandboxConfigUpdates = graphql(`
  subscription SandboxConfigUpdates($id: ID!) {
    sandboxConfig(id: $id)
  }
`);

const RemoveSandbox = graphql(`
  mutation RemoveSandbox($id: ID!) {
    removeSandbox(id: $id) { id removed }
  }
`);

/** What the page shows of a sandbox configuration (Berth sends the keyring only to the sandbox's own agent). */
interface ShownConfig {
  version?: number;
  environments?: {
    id: string;
    name: string;
    state: string;
    template: string;
    project: string;
    node?: string;
    imports?: { service: string; listen: string; target: string }[];
    shares?: { name: string; direction: string; localPath: string; envPath: string }[];
  }[];
  [key: string]: unknown;
}

export function SandboxPage({ id }: { id: string }) {
  const [detail, refetch] = useQueryAnswer({ query: SandboxDetail, variables: { id }, requestPolicy: 'cache-and-network' });
  const [config, setConfig] = useState<ShownConfig>();
  const [removal, remove] = useMutationAnswer(RemoveSandbox);
  const sandboxId = detail.data?.sandbox.sandbox.id;
  // The whole configuration now, then again on every change.
  const liveError = useEvents(SandboxConfigUpdates, { id: sandboxId ?? '' }, (data) => setConfig(data.sandboxConfig as ShownConfig), {
    pause: !sandboxId,
    resync: () => refetch({ requestPolicy: 'network-only' }),
  });

  const onRemove = async (sandbox: string) => {
    await remove({ id: sandbox });
    refetch({ requestPolicy: 'network-only' });
  };

  return (
    <Page title={detail.data ? `Sandbox ${detail.data.sandbox.sandbox.name}` : 'Sandbox'}>
      <p>
        <Link href="/sandboxes">Back to the sandboxes</Link>
      </p>
      <QueryState what={`sandbox ${id}`} result={detail} retry={() => refetch({ requestPolicy: 'network-only' })}>
        {({ sandbox: { sandbox } }) => (
          <>
            <Fields
              items={[
                ['Id', <code key="id">{sandbox.id}</code>],
                ['Name', sandbox.name],
                ['Organization', sandbox.org],
                ['Live environments', config?.environments?.length ?? detail.data?.sandbox.environments],
                ['Last seen', sandbox.lastSeen ? when(sandbox.lastSeen) : 'never'],
                ['Created', when(sandbox.created)],
                ['Created by', sandbox.createdBy],
                ['Removed', when(sandbox.removed)],
                ['Removed by', sandbox.removedBy],
              ]}
            />
            {sandbox.removed ? null : (
              <div className="actions">
                <ConfirmAction
                  label="Remove sandbox"
                  question={`Remove ${sandbox.name}? Its agent loses its credential; its environments leave its configuration.`}
                  confirm="Remove for good"
                  busy={removal.fetching}
                  onConfirm={() => onRemove(sandbox.id)}
                />
              </div>
            )}
            {removal.error ? <Failure error={removal.error} /> : null}
            <Section title="Configuration">
              <LiveNotice error={liveError} />
              {config ? <ConfigView config={config} /> : <p className="muted">Loading the configuration…</p>}
            </Section>
          </>
        )}
      </QueryState>
    </Page>
  );
}

function ConfigView({ config }: { config: ShownConfig }) {
  const environments = config.environments ?? [];
  return (
    <>
      <p className="muted">
        Version {config.version ?? '–'}: what the agent applies, updated live. Its keyring (the data keys of the projects) goes only to the
        sandbox's own agent, never to people.
      </p>
      {environments.length ? (
        <Table label="Wired environments" head={['Name', 'State', 'Template', 'Project', 'Node', 'Services', 'Shares']}>
          {environments.map((env) => (
            <tr key={env.id}>
              <th scope="row">
                <Link href={`/environments/${env.name}`}>{env.name}</Link>
              </th>
              <td>
                <StateBadge state={env.state} />
              </td>
              <td>{env.template}</td>
              <td>{env.project}</td>
              <td>{env.node ?? '–'}</td>
              <td>{(env.imports ?? []).map((i) => `${i.service} ${i.listen} → ${i.target}`).join(', ') || '–'}</td>
              <td>{(env.shares ?? []).map((s) => `${s.name} (${s.direction}) ${s.localPath} ↔ ${s.envPath}`).join(', ') || '–'}</td>
            </tr>
          ))}
        </Table>
      ) : (
        <Empty>No live environment is wired to this sandbox.</Empty>
      )}
      <details>
        <summary>The configuration as JSON</summary>
        <pre>{JSON.stringify(config, null, 2)}</pre>
      </details>
    </>
  );
}
