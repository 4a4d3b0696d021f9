import { type FormEvent, useRef, useState } from 'react';
import { Link } from 'wouter';
import { useQueryAnswer } from '../answers';
import { Copyable, Failure, Field, Page, Pager, QueryState, Section, Table, useForm, usePager } from '../components/ui';
import { bytes, parsePairs, when } from '../format';
import { graphql } from '../generated/gql';
import { downloadArtifact, type RestError, uploadArtifact } from '../rest';
import { useSession } from '../session';

const ArtifactList = graphql(`
  query ArtifactList($first: Int!, $after: String, $project: String) {
    artifacts(first: $first, after: $after, project: $project) {
      nodes { id name project size sha256 expires created }
      pageInfo { hasNextPage endCursor }
    }
  }
`);

const PAGE_SIZE = 25;

export function ArtifactsPage() {
  const [project, setProject] = useState('');
  const [filter, setFilter] = useState('');
  const pager = usePager();
  const [list, refetch] = useQueryAnswer({
    query: ArtifactList,
    variables: { first: PAGE_SIZE, after: pager.after, project: filter || undefined },
    requestPolicy: 'cache-and-network',
  });
  return (
    <Page title="Artifacts">
      <Upload onUploaded={() => refetch({ requestPolicy: 'network-only' })} />
      <Section title="Stored artifacts">
        <search aria-label="Filter artifacts">
          <form
            className="filters"
            onSubmit={(e) => {
              e.preventDefault();
              pager.reset();
              setFilter(project.trim());
            }}
          >
            <Field label="Project filter">
              {(props) => <input {...props} value={project} onChange={(e) => setProject(e.target.value)} placeholder="every project" />}
            </Field>
            <button type="submit">Filter</button>
          </form>
        </search>
        <QueryState
          what="artifacts"
          result={list}
          retry={() => refetch({ requestPolicy: 'network-only' })}
          isEmpty={(d) => d.artifacts.nodes.length === 0}
          empty={filter ? `No artifacts in project ${filter}.` : 'No artifacts yet: upload one above.'}
        >
          {(data) => (
            <>
              <Table label="Artifacts" head={['Name', 'Project', 'Size', 'SHA-256', 'Expires', 'Download']}>
                {data.artifacts.nodes.map((a) => (
                  <tr key={a.id}>
                    <th scope="row">
                      <Link href={`/artifacts/${a.id}`}>{a.name}</Link>
                    </th>
                    <td>{a.project}</td>
                    <td>{bytes(a.size)}</td>
                    <td>
                      <code className="hash">{a.sha256}</code>
                    </td>
                    <td>{when(a.expires)}</td>
                    <td>
                      <DownloadButton id={a.id} name={a.name} />
                    </td>
                  </tr>
                ))}
              </Table>
              <Pager pager={pager} hasNext={data.artifacts.pageInfo.hasNextPage} nextCursor={data.artifacts.pageInfo.endCursor} />
            </>
          )}
        </QueryState>
      </Section>
    </Page>
  );
}

/** Fetches with the bearer header and saves the bytes; no token ever goes in a URL. */
export function DownloadButton({ id, name }: { id: string; name: string }) {
  const { api } = useSession();
  const [state, setState] = useState<{ busy?: boolean; error?: string }>({});
  const download = async () => {
    setState({ busy: true });
    try {
      await downloadArtifact(api.token, id, name);
      setState({});
    } catch (error) {
      const e = error as RestError;
      if (e.status === 401) return api.refused(e.message);
      setState({ error: e.message ?? String(error) });
    }
  };
  return (
    <>
      <button type="button" onClick={download} disabled={state.busy} aria-label={`Download ${name}`}>
        {state.busy ? 'Downloading…' : 'Download'}
      </button>
      {state.error ? (
        <span className="error" role="alert">
          {state.error}
        </span>
      ) : null}
    </>
  );
}

const UPLOAD_FIELDS = ['name', 'project', 'retention', 'label', 'link'];

function Upload({ onUploaded }: { onUploaded(): void }) {
  const { api } = useSession();
  const [file, setFile] = useState<File | null>(null);
  const { form, text, reset } = useForm({ name: '', project: '', retention: '', labels: '', link: '' });
  const [progress, setProgress] = useState<{ sent: number; total: number }>();
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [done, setDone] = useState<{ id: string; name: string; link?: { url: string; expires: string } }>();
  const abort = useRef<AbortController>(null);
  const fileInput = useRef<HTMLInputElement>(null);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (!file) {
      setErrors({ file: 'Choose a file to upload.' });
      return;
    }
    const labels = parsePairs(form.labels);
    if (labels.bad) {
      setErrors({ label: `"${labels.bad}" is not key=value` });
      return;
    }
    const params = new URLSearchParams();
    params.set('name', form.name.trim() || file.name);
    if (form.project.trim()) params.set('project', form.project.trim());
    if (form.retention.trim()) params.set('retention', form.retention.trim());
    if (form.link.trim()) params.set('link', form.link.trim());
    for (const pair of labels.pairs) params.append('label', pair);
    setErrors({});
    setDone(undefined);
    setProgress({ sent: 0, total: file.size });
    abort.current = new AbortController();
    try {
      const uploaded = await uploadArtifact({
        token: api.token,
        file,
        params,
        signal: abort.current.signal,
        onProgress: (sent, total) => setProgress({ sent, total }),
      });
      setDone({ id: uploaded.artifact.id, name: uploaded.artifact.name, link: uploaded.link });
      setFile(null);
      reset();
      if (fileInput.current) fileInput.current.value = '';
      onUploaded();
    } catch (error) {
      const e = error as RestError;
      if (e.status === 401) return api.refused(e.message);
      // REST errors name their field first ("retention: …").
      const field = UPLOAD_FIELDS.find((f) => e.message.startsWith(`${f}:`) || e.message.startsWith(`${f}s:`));
      setErrors({ [field ?? 'form']: e.message });
    } finally {
      setProgress(undefined);
      abort.current = null;
    }
  };

  return (
    <Section title="Upload">
      <form className="stacked" onSubmit={submit} noValidate>
        <Field label="File" error={errors.file} hint="Up to 2 GiB; sealed under the project's key as it arrives">
          {(props) => <input {...props} ref={fileInput} type="file" onChange={(e) => setFile(e.target.files?.[0] ?? null)} />}
        </Field>
        <div className="row">
          <Field label="Name" error={errors.name} hint="Default: the file's name">
            {(props) => <input {...props} {...text('name')} placeholder={file?.name ?? ''} />}
          </Field>
          <Field label="Project" error={errors.project} hint="Whose key seals it; default: default">
            {(props) => <input {...props} {...text('project')} placeholder="default" />}
          </Field>
        </div>
        <div className="row">
          <Field label="Retention" error={errors.retention} hint="How long to keep it, at most 30d; default 7d">
            {(props) => <input {...props} {...text('retention')} placeholder="7d" />}
          </Field>
          <Field label="Link lifetime" error={errors.link} hint="Also make a signed link lasting this long, e.g. 24h">
            {(props) => <input {...props} {...text('link')} placeholder="no link" />}
          </Field>
        </div>
        <Field label="Labels" error={errors.label} hint="key=value, separated by commas">
          {(props) => <input {...props} {...text('labels')} placeholder="build=1234" />}
        </Field>
        {progress ? (
          <div className="progress">
            <progress aria-label="Upload progress" max={progress.total || 1} value={progress.sent} />
            <span>
              {bytes(progress.sent)} of {bytes(progress.total)}
            </span>
            <button type="button" onClick={() => abort.current?.abort()}>
              Cancel upload
            </button>
          </div>
        ) : null}
        {errors.form ? <Failure error={errors.form} /> : null}
        <div className="actions">
          <button type="submit" className="primary" disabled={Boolean(progress)}>
            Upload
          </button>
        </div>
      </form>
      {done ? (
        <div className="done" role="status">
          <p>
            Stored <Link href={`/artifacts/${done.id}`}>{done.name}</Link>.
          </p>
          {done.link ? (
            <>
              <p>Signed link, valid until {when(done.link.expires)}; anyone holding it can download the file:</p>
              <Copyable what="Link" value={done.link.url} />
            </>
          ) : null}
        </div>
      ) : null}
    </Section>
  );
}
