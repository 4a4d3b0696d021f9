import { type FormEvent, useState } from 'react';
import { Link } from 'wouter';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { formErrors } from '../api';
import { Copyable, Failure, Field, LiveNotice, Page, QueryState, Section, ShownOnce, Table } from '../components/ui';
import { when } from '../format';
import { graphql } from '../generated/gql';
import { useOnEnvironmentChange } from '../live';

const SandboxList = graphql(`
  query SandboxList($removed: Boolean) {
    sandboxes(removed: $removed) {
      environments
      sandbox { id name createdBy created lastSeen removed }
    }
  }
`);

const RegisterSandbox = graphql(`
  mutation RegisterSandbox($input: RegisterSandboxInput) {
    registerSandbox(input: $input) { key sandbox { id name } }
  }
`);

export function SandboxesPage() {
  const [removed, setRemoved] = useState(false);
  const [list, refetch] = useQueryAnswer({ query: SandboxList, variables: { removed }, requestPolicy: 'cache-and-network' });
  // The counts change when an environment wired to a sandbox changes state.
  const liveError = useOnEnvironmentChange(
    () => refetch({ requestPolicy: 'network-only' }),
    (env) => Boolean(env.sandbox),
  );
  return (
    <Page title="Sandboxes">
      <p className="muted">
        The organization's machines that environments are wired to: their agent forwards the environments' services to local ports and syncs
        share folders.
      </p>
      <Register onRegistered={() => refetch({ requestPolicy: 'network-only' })} />
      <Section title="All sandboxes">
        <label className="check">
          <input type="checkbox" checked={removed} onChange={(e) => setRemoved(e.target.checked)} /> Show removed sandboxes
        </label>
        <LiveNotice error={liveError} />
        <QueryState
          what="sandboxes"
          result={list}
          retry={() => refetch({ requestPolicy: 'network-only' })}
          isEmpty={(d) => d.sandboxes.length === 0}
          empty="No sandboxes yet: register one to wire environments to a machine."
        >
          {(data) => (
            <Table label="Sandboxes" head={['Name', 'Live environments', 'Last seen', 'Created', 'Created by', 'Removed']}>
              {data.sandboxes.map(({ sandbox, environments }) => (
                <tr key={sandbox.id}>
                  <th scope="row">
                    <Link href={`/sandboxes/${sandbox.id}`}>{sandbox.name}</Link>
                  </th>
                  <td>{environments}</td>
                  <td>{sandbox.lastSeen ? when(sandbox.lastSeen) : 'never'}</td>
                  <td>{when(sandbox.created)}</td>
                  <td>{sandbox.createdBy}</td>
                  <td>{when(sandbox.removed)}</td>
                </tr>
              ))}
            </Table>
          )}
        </QueryState>
      </Section>
    </Page>
  );
}

function Register({ onRegistered }: { onRegistered(): void }) {
  const [name, setName] = useState('');
  const [result, register] = useMutationAnswer(RegisterSandbox);
  const [shown, setShown] = useState<{ key: string; name: string }>();
  const errors = formErrors(result.error, ['name']);
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const r = await register({ input: { name: name.trim() } });
    const registered = r.data?.registerSandbox;
    if (registered) {
      setShown({ key: registered.key, name: registered.sandbox.name });
      setName('');
      onRegistered();
    }
  };
  const command = shown ? `berth agent --server ${window.location.origin} --join ${shown.key} --dir .` : '';
  return (
    <Section title="Register a sandbox">
      <form className="inline" onSubmit={submit} noValidate>
        <Field label="Name" error={errors.name} hint="Its name on the private network (a DNS label); empty: a generated one">
          {(props) => <input {...props} value={name} onChange={(e) => setName(e.target.value)} placeholder="dev-laptop" />}
        </Field>
        <button type="submit" className="primary" disabled={result.fetching}>
          Register sandbox
        </button>
      </form>
      {errors.form ? <Failure error={errors.form} /> : null}
      {shown ? (
        <ShownOnce title={`Join key of ${shown.name}`}>
          <p>Single use, valid for one hour. Start the agent on the machine, in the folder its shares live in, with:</p>
          <Copyable what="Agent command" value={command} multiline />
          <Copyable what="Join key" value={shown.key} />
        </ShownOnce>
      ) : null}
    </Section>
  );
}
