import { Link } from 'wouter';
import { useQueryAnswer } from '../answers';
import { Fields, Page, QueryState, Section, Table } from '../components/ui';
import { bytes, when } from '../format';
import { graphql } from '../generated/gql';

const SnapshotDetail = graphql(`
  query SnapshotDetail($project: String!, $prefix: String!) {
    snapshots(project: $project, prefix: $prefix, first: 100) {
      snapshots {
        project key share root keyVersion files bytes objects sealedBytes lease createdBy created
        segments { name size objects }
      }
    }
  }
`);

/** One snapshot key of a project: every share saved under it (newest first), with its objects. */
export function SnapshotPage({ project, snapshotKey }: { project: string; snapshotKey: string }) {
  const [detail, refetch] = useQueryAnswer({ query: SnapshotDetail, variables: { project, prefix: snapshotKey } });
  return (
    <Page title={`Snapshot ${snapshotKey}`}>
      <p>
        <Link href={`/snapshots${project === 'default' ? '' : `?project=${encodeURIComponent(project)}`}`}>Back to the snapshots</Link>
      </p>
      <QueryState
        what={`snapshot ${snapshotKey}`}
        result={detail}
        retry={() => refetch({ requestPolicy: 'network-only' })}
        isEmpty={(d) => !d.snapshots.snapshots.some((s) => s.key === snapshotKey)}
        empty={`Project ${project} has no snapshot with the key ${snapshotKey}.`}
      >
        {(data) =>
          data.snapshots.snapshots
            .filter((s) => s.key === snapshotKey)
            .map((s) => (
              <Section key={`${s.root}\u0000${s.share}`} title={`Share ${s.share}, saved ${when(s.created)}`}>
                <Fields
                  items={[
                    ['Project', s.project],
                    ['Key', s.key],
                    ['Share', s.share],
                    ['Files', s.files],
                    ['Size', `${bytes(s.bytes)} (${bytes(s.sealedBytes)} sealed in ${s.objects} chunks)`],
                    ['Key version', s.keyVersion],
                    ['Root', <code key="root">{s.root}</code>],
                    [
                      'Environment',
                      <Link key="env" href={`/environments/${s.lease}`}>
                        {s.lease}
                      </Link>,
                    ],
                    ['Saved by', s.createdBy],
                    ['Saved', when(s.created)],
                  ]}
                />
                <Table label={`Segments of ${s.share}`} head={['Object', 'Sealed bytes', 'Chunks']}>
                  {s.segments.map((seg) => (
                    <tr key={seg.name}>
                      <td>
                        <code>{seg.name}</code>
                      </td>
                      <td>{bytes(seg.size)}</td>
                      <td>{seg.objects}</td>
                    </tr>
                  ))}
                </Table>
              </Section>
            ))
        }
      </QueryState>
    </Page>
  );
}
