import { type FormEvent, useState } from 'react';
import { Link, useLocation } from 'wouter';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { errorMessage, formErrors } from '../api';
import { ConfirmAction, Copyable, Failure, Fields, Labels, Page, QueryState, Section, Table } from '../components/ui';
import { bytes, when } from '../format';
import { graphql } from '../generated/gql';
import { DownloadButton } from './Artifacts';

const ArtifactDetail = graphql(`
  query ArtifactDetail($id: ID!) {
    artifact(id: $id) {
      id name project size sha256 contentType labels keyVersion manifest chunks sealedBytes createdBy created expires
      segments { name size objects }
    }
  }
`);

const CreateLink = graphql(`
  mutation CreateArtifactLink($id: ID!, $input: ArtifactLinkInput) {
    createArtifactLink(id: $id, input: $input) { url expires }
  }
`);

const RevokeLinks = graphql(`
  mutation RevokeArtifactLinks($id: ID!) {
    revokeArtifactLinks(id: $id) { id }
  }
`);

const DeleteArtifact = graphql(`
  mutation DeleteArtifact($id: ID!) {
    deleteArtifact(id: $id)
  }
`);

export function ArtifactPage({ id }: { id: string }) {
  const [detail, refetch] = useQueryAnswer({ query: ArtifactDetail, variables: { id } });
  const [, navigate] = useLocation();
  const [deletion, remove] = useMutationAnswer(DeleteArtifact);
  const onDelete = async () => {
    const result = await remove({ id });
    if (!result.error) navigate('/artifacts');
  };
  const name = detail.data?.artifact.name;
  return (
    <Page title={name ? `Artifact ${name}` : 'Artifact'}>
      <p>
        <Link href="/artifacts">Back to the artifacts</Link>
      </p>
      <QueryState what={`artifact ${id}`} result={detail} retry={() => refetch({ requestPolicy: 'network-only' })}>
        {({ artifact: a }) => (
          <>
            <div className="actions">
              <DownloadButton id={a.id} name={a.name} />
              <ConfirmAction
                label="Delete"
                question={`Delete ${a.name}? Its bytes go and its links stop working.`}
                confirm="Delete for good"
                busy={deletion.fetching}
                onConfirm={onDelete}
              />
            </div>
            {deletion.error ? <Failure error={deletion.error} /> : null}
            <Fields
              items={[
                ['Id', <code key="id">{a.id}</code>],
                ['Name', a.name],
                ['Project', a.project],
                ['Size', `${bytes(a.size)} (${a.size} bytes)`],
                [
                  'SHA-256',
                  <code key="sha" className="hash">
                    {a.sha256}
                  </code>,
                ],
                ['Content type', a.contentType],
                ['Labels', <Labels key="labels" labels={a.labels} />],
                ['Created by', a.createdBy],
                ['Created', when(a.created)],
                ['Expires', when(a.expires)],
                ['Key version', a.keyVersion],
                ['Sealed', `${bytes(a.sealedBytes)} in ${a.chunks} chunks`],
                ['Manifest', <code key="m">{a.manifest}</code>],
              ]}
            />
            <Links id={a.id} />
            <Section title="Segments">
              <Table label="Segments" head={['Object', 'Sealed bytes', 'Chunks']}>
                {a.segments.map((s) => (
                  <tr key={s.name}>
                    <td>
                      <code>{s.name}</code>
                    </td>
                    <td>{bytes(s.size)}</td>
                    <td>{s.objects}</td>
                  </tr>
                ))}
              </Table>
            </Section>
          </>
        )}
      </QueryState>
    </Page>
  );
}

function Links({ id }: { id: string }) {
  const [lifetime, setLifetime] = useState('');
  const [made, create] = useMutationAnswer(CreateLink);
  const [revoked, revoke] = useMutationAnswer(RevokeLinks);
  const [revokedAt, setRevokedAt] = useState<string>();
  const errors = formErrors(made.error, ['lifetime']);
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setRevokedAt(undefined);
    await create({ id, input: lifetime.trim() ? { lifetime: lifetime.trim() } : {} });
  };
  const onRevoke = async () => {
    const result = await revoke({ id });
    if (!result.error) setRevokedAt(new Date().toISOString());
  };
  const link = revokedAt ? undefined : made.data?.createArtifactLink;
  return (
    <Section title="Signed links">
      <p className="muted">A signed link downloads the file without a token until it expires; anyone holding it can use it.</p>
      <form className="inline" onSubmit={submit} noValidate>
        <label htmlFor="link-lifetime">Link lifetime</label>
        <input
          id="link-lifetime"
          value={lifetime}
          onChange={(e) => setLifetime(e.target.value)}
          placeholder="24h"
          aria-invalid={errors.lifetime ? true : undefined}
          aria-describedby={errors.lifetime ? 'link-lifetime-error' : undefined}
        />
        <button type="submit" disabled={made.fetching}>
          Create link
        </button>
        <button type="button" className="danger" onClick={onRevoke} disabled={revoked.fetching}>
          Revoke all links
        </button>
      </form>
      {errors.lifetime ? (
        <small id="link-lifetime-error" className="error">
          {errors.lifetime}
        </small>
      ) : null}
      {errors.form || revoked.error ? <Failure error={errors.form ?? errorMessage(revoked.error)} /> : null}
      {link ? (
        <div role="status">
          <p>Valid until {when(link.expires)}:</p>
          <Copyable what="Link" value={link.url} />
        </div>
      ) : null}
      {revokedAt ? <p role="status">Every link made so far stopped working.</p> : null}
    </Section>
  );
}
