import { type FormEvent, useState } from 'react';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { formErrors } from '../api';
import { Copyable, Failure, Field, LiveNotice, Page, QueryState, Section, ShownOnce, Table, useForm } from '../components/ui';
import { when } from '../format';
import { graphql } from '../generated/gql';
import { useEvents } from '../live';
import { useSession } from '../session';
import { WebhooksSection } from './SettingsWebhooks';

const Tokens = graphql(`
  query SettingsTokens {
    tokens { id name person admin prefix createdBy created expires revoked lastUsed }
  }
`);

const ApiKeys = graphql(`
  query SettingsApiKeys {
    apiKeys { id name admin prefix createdBy created expires revoked lastUsed }
  }
`);

const CredentialsChanged = graphql(`
  subscription CredentialsChanged {
    credentialsChanged { kind action id }
  }
`);

const CreateToken = graphql(`
  mutation CreateToken($input: CreateTokenInput) {
    createToken(input: $input) { secret token { id name person } }
  }
`);

const CreateApiKey = graphql(`
  mutation CreateApiKey($input: CreateApiKeyInput!) {
    createApiKey(input: $input) { secret key { id name } }
  }
`);

const RevokeToken = graphql(`
  mutation RevokeToken($id: ID!) {
    revokeToken(id: $id) { id revoked }
  }
`);

const RevokeApiKey = graphql(`
  mutation RevokeApiKey($id: ID!) {
    revokeApiKey(id: $id) { id revoked }
  }
`);

const ShredProject = graphql(`
  mutation ShredProject($project: String!) {
    shredProject(project: $project) { project shredded at }
  }
`);

export function SettingsPage() {
  const { viewer } = useSession();
  const [tokens, refetchTokens] = useQueryAnswer({ query: Tokens, requestPolicy: 'cache-and-network' });
  const [keys, refetchKeys] = useQueryAnswer({ query: ApiKeys, requestPolicy: 'cache-and-network', pause: !viewer.admin });
  // Admins see every token and key of the organization change as it happens.
  const liveError = useEvents(
    CredentialsChanged,
    {},
    (data) => {
      if (data.credentialsChanged.kind === 'key') refetchKeys({ requestPolicy: 'network-only' });
      else refetchTokens({ requestPolicy: 'network-only' });
    },
    {
      pause: !viewer.admin,
      resync: () => {
        refetchTokens({ requestPolicy: 'network-only' });
        refetchKeys({ requestPolicy: 'network-only' });
      },
    },
  );
  return (
    <Page title="Settings">
      <p className="muted">
        Signed in as {viewer.name}
        {viewer.admin ? ', an admin' : ''} of {viewer.organization.name} (
        {viewer.kind === 'apiKey' ? 'with an API key' : 'with a CLI token'}).
      </p>
      <LiveNotice error={liveError} />
      <Section title="CLI tokens">
        <p className="muted">A CLI token acts as the person it belongs to, for the berth command, scripts and this console.</p>
        <NewToken admin={viewer.admin} onCreated={() => refetchTokens({ requestPolicy: 'network-only' })} />
        <QueryState
          what="tokens"
          result={tokens}
          retry={() => refetchTokens({ requestPolicy: 'network-only' })}
          isEmpty={(d) => d.tokens.length === 0}
          empty="No tokens."
        >
          {(data) => (
            <CredentialTable
              label="CLI tokens"
              rows={data.tokens.map((t) => ({ ...t, owner: `${t.person}${t.admin ? ' (admin)' : ''}` }))}
              ownerHead="Person"
              revokeMutation="token"
              onRevoked={() => refetchTokens({ requestPolicy: 'network-only' })}
            />
          )}
        </QueryState>
      </Section>
      {viewer.admin ? (
        <>
          <Section title="API keys">
            <p className="muted">An API key belongs to the organization; what it creates shows the key's name as its creator.</p>
            <NewApiKey onCreated={() => refetchKeys({ requestPolicy: 'network-only' })} />
            <QueryState
              what="API keys"
              result={keys}
              retry={() => refetchKeys({ requestPolicy: 'network-only' })}
              isEmpty={(d) => d.apiKeys.length === 0}
              empty="No API keys."
            >
              {(data) => (
                <CredentialTable
                  label="API keys"
                  rows={data.apiKeys.map((k) => ({ ...k, owner: k.admin ? 'admin key' : 'member key' }))}
                  ownerHead="Kind"
                  revokeMutation="key"
                  onRevoked={() => refetchKeys({ requestPolicy: 'network-only' })}
                />
              )}
            </QueryState>
          </Section>
          <WebhooksSection />
          <Shred />
        </>
      ) : null}
    </Page>
  );
}

interface CredentialRow {
  id: string;
  name: string;
  owner: string;
  prefix: string;
  created: string;
  expires?: string | null;
  revoked?: string | null;
  lastUsed?: string | null;
}

function CredentialTable({
  label,
  rows,
  ownerHead,
  revokeMutation,
  onRevoked,
}: {
  label: string;
  rows: CredentialRow[];
  ownerHead: string;
  revokeMutation: 'token' | 'key';
  onRevoked(): void;
}) {
  const [tokenRevocation, revokeToken] = useMutationAnswer(RevokeToken);
  const [keyRevocation, revokeKey] = useMutationAnswer(RevokeApiKey);
  const revocation = revokeMutation === 'token' ? tokenRevocation : keyRevocation;
  const revoke = async (id: string) => {
    const result = revokeMutation === 'token' ? await revokeToken({ id }) : await revokeKey({ id });
    if (!result.error) onRevoked();
  };
  return (
    <>
      {revocation.error ? <Failure error={revocation.error} /> : null}
      <Table label={label} head={['Name', ownerHead, 'Starts with', 'Created', 'Expires', 'Last used', 'Revoked', 'Revoke']}>
        {rows.map((r) => (
          <tr key={r.id}>
            <th scope="row">{r.name}</th>
            <td>{r.owner}</td>
            <td>
              <code>{r.prefix}…</code>
            </td>
            <td>{when(r.created)}</td>
            <td>{r.expires ? when(r.expires) : 'never'}</td>
            <td>{when(r.lastUsed)}</td>
            <td>{when(r.revoked)}</td>
            <td>
              {r.revoked ? null : (
                <button type="button" className="danger" onClick={() => revoke(r.id)} aria-label={`Revoke ${r.name} (${r.prefix}…)`}>
                  Revoke
                </button>
              )}
            </td>
          </tr>
        ))}
      </Table>
    </>
  );
}

function NewToken({ admin, onCreated }: { admin: boolean; onCreated(): void }) {
  const { form, text, check, reset } = useForm({ name: '', expiresIn: '', email: '', admin: false });
  const [result, create] = useMutationAnswer(CreateToken);
  const [secret, setSecret] = useState<{ value: string; label: string }>();
  const errors = formErrors(result.error, ['name', 'expiresIn', 'email']);
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSecret(undefined);
    const r = await create({
      input: {
        ...(form.name.trim() ? { name: form.name.trim() } : {}),
        ...(form.expiresIn.trim() ? { expiresIn: form.expiresIn.trim() } : {}),
        ...(admin && form.email.trim() ? { email: form.email.trim(), admin: form.admin } : {}),
      },
    });
    const created = r.data?.createToken;
    if (created) {
      setSecret({ value: created.secret, label: `${created.token.name} for ${created.token.person}` });
      reset();
      onCreated();
    }
  };
  return (
    <>
      <form className="inline" onSubmit={submit} noValidate>
        <Field label="Token name" error={errors.name} hint='A label to tell it apart; default "cli"'>
          {(props) => <input {...props} {...text('name')} placeholder="laptop" />}
        </Field>
        <Field label="Expires in" error={errors.expiresIn} hint="A duration such as 90d; empty: never">
          {(props) => <input {...props} {...text('expiresIn')} placeholder="90d" />}
        </Field>
        {admin ? (
          <>
            <Field label="For member" error={errors.email} hint="Email of the member it acts as; empty: you. A new email adds the member.">
              {(props) => <input {...props} type="email" {...text('email')} />}
            </Field>
            <label className="check">
              <input type="checkbox" {...check('admin')} /> A new member is an admin
            </label>
          </>
        ) : null}
        <button type="submit" className="primary" disabled={result.fetching}>
          Create token
        </button>
      </form>
      {errors.form ? <Failure error={errors.form} /> : null}
      {secret ? (
        <ShownOnce title={`New token ${secret.label}`}>
          <Copyable what="Token" value={secret.value} />
        </ShownOnce>
      ) : null}
    </>
  );
}

function NewApiKey({ onCreated }: { onCreated(): void }) {
  const { form, text, check, reset } = useForm({ name: '', expiresIn: '', admin: false });
  const [result, create] = useMutationAnswer(CreateApiKey);
  const [secret, setSecret] = useState<{ value: string; name: string }>();
  const errors = formErrors(result.error, ['name', 'expiresIn']);
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSecret(undefined);
    const r = await create({
      input: { name: form.name.trim(), admin: form.admin, ...(form.expiresIn.trim() ? { expiresIn: form.expiresIn.trim() } : {}) },
    });
    const created = r.data?.createApiKey;
    if (created) {
      setSecret({ value: created.secret, name: created.key.name });
      reset();
      onCreated();
    }
  };
  return (
    <>
      <form className="inline" onSubmit={submit} noValidate>
        <Field label="Key name" error={errors.name} hint="Shown as the creator of what it creates">
          {(props) => <input {...props} {...text('name')} placeholder="deploy-bot" />}
        </Field>
        <Field label="Key expires in" error={errors.expiresIn} hint="A duration such as 90d; empty: never">
          {(props) => <input {...props} {...text('expiresIn')} placeholder="90d" />}
        </Field>
        <label className="check">
          <input type="checkbox" {...check('admin')} /> Admin key (quotas, shredding, keys)
        </label>
        <button type="submit" className="primary" disabled={result.fetching}>
          Create API key
        </button>
      </form>
      {errors.form ? <Failure error={errors.form} /> : null}
      {secret ? (
        <ShownOnce title={`New API key ${secret.name}`}>
          <Copyable what="API key" value={secret.value} />
        </ShownOnce>
      ) : null}
    </>
  );
}

function Shred() {
  const { form, text, reset } = useForm({ project: '', again: '' });
  const [result, shred] = useMutationAnswer(ShredProject);
  const ready = form.project.trim() !== '' && form.project === form.again;
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (!ready) return;
    const r = await shred({ project: form.project.trim() });
    if (r.data) reset();
  };
  const done = result.data?.shredProject;
  return (
    <Section title="Shred a project">
      <p>
        Shredding destroys the project's keys, then its snapshots and artifacts. Nothing sealed under those keys can be read again, not even
        from a copy of the stored objects. This cannot be undone.
      </p>
      <form className="inline" onSubmit={submit} noValidate>
        <Field label="Project to shred">{(props) => <input {...props} {...text('project')} autoComplete="off" />}</Field>
        <Field label="Type the project name again to confirm">
          {(props) => <input {...props} {...text('again')} autoComplete="off" />}
        </Field>
        <button type="submit" className="danger" disabled={!ready || result.fetching}>
          Shred project
        </button>
      </form>
      {result.error ? <Failure error={result.error} /> : null}
      {done ? (
        <p role="status">
          Project {done.project} {done.shredded ? 'shredded' : 'had nothing new to shred'} at {when(done.at)}.
        </p>
      ) : null}
    </Section>
  );
}
