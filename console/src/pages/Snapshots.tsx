import { type FormEvent, useState } from 'react';
import { Link, useSearchParams } from 'wouter';
import { useQueryAnswer } from '../answers';
import { Field, Page, Pager, QueryState, Table, usePager } from '../components/ui';
import { bytes, when } from '../format';
import { graphql } from '../generated/gql';

const SnapshotList = graphql(`
  query SnapshotList($project: String, $prefix: String, $first: Int, $after: String) {
    snapshots(project: $project, prefix: $prefix, first: $first, after: $after) {
      project next
      snapshots { key share files bytes created createdBy lease }
    }
  }
`);

const PAGE_SIZE = 50;

export const snapshotHref = (project: string, key: string) => `/snapshots/${encodeURIComponent(project)}/${encodeURIComponent(key)}`;

export function SnapshotsPage() {
  const [search, setSearch] = useSearchParams();
  const project = search.get('project') || 'default';
  const prefix = search.get('prefix') ?? '';
  const [form, setForm] = useState({ project, prefix });
  const pager = usePager();
  const [list, refetch] = useQueryAnswer({
    query: SnapshotList,
    variables: { project, prefix: prefix || undefined, first: PAGE_SIZE, after: pager.after },
    requestPolicy: 'cache-and-network',
  });
  const submit = (event: FormEvent) => {
    event.preventDefault();
    const params = new URLSearchParams();
    if (form.project.trim() && form.project.trim() !== 'default') params.set('project', form.project.trim());
    if (form.prefix) params.set('prefix', form.prefix);
    pager.reset();
    setSearch(params);
  };
  return (
    <Page title="Snapshots">
      <p className="muted">The files environments saved when they ended, per project, newest first.</p>
      <search aria-label="Search snapshots">
        <form className="filters" onSubmit={submit}>
          <Field label="Project">
            {(props) => <input {...props} value={form.project} onChange={(e) => setForm((f) => ({ ...f, project: e.target.value }))} />}
          </Field>
          <Field label="Key prefix">
            {(props) => (
              <input
                {...props}
                type="search"
                value={form.prefix}
                onChange={(e) => setForm((f) => ({ ...f, prefix: e.target.value }))}
                placeholder="ci/main"
              />
            )}
          </Field>
          <button type="submit">Search</button>
        </form>
      </search>
      <QueryState
        what="snapshots"
        result={list}
        retry={() => refetch({ requestPolicy: 'network-only' })}
        isEmpty={(d) => d.snapshots.snapshots.length === 0}
        empty={prefix ? `No snapshot of project ${project} has a key starting with "${prefix}".` : `Project ${project} has no snapshots.`}
      >
        {(data) => (
          <>
            <Table label="Snapshots" head={['Key', 'Share', 'Files', 'Size', 'Saved', 'By', 'Environment']}>
              {data.snapshots.snapshots.map((s) => (
                <tr key={`${s.key}\u0000${s.share}`}>
                  <th scope="row">
                    <Link href={snapshotHref(data.snapshots.project, s.key)}>{s.key}</Link>
                  </th>
                  <td>{s.share}</td>
                  <td>{s.files}</td>
                  <td>{bytes(s.bytes)}</td>
                  <td>{when(s.created)}</td>
                  <td>{s.createdBy}</td>
                  <td>
                    <Link href={`/environments/${s.lease}`}>{s.lease}</Link>
                  </td>
                </tr>
              ))}
            </Table>
            <Pager pager={pager} hasNext={Boolean(data.snapshots.next)} nextCursor={data.snapshots.next} />
          </>
        )}
      </QueryState>
    </Page>
  );
}
