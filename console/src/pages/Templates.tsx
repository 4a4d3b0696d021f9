import { Link } from 'wouter';
import { useQueryAnswer } from '../answers';
import { Page, QueryState, Table } from '../components/ui';
import { limits, warmState } from '../format';
import { graphql } from '../generated/gql';

const TemplateList = graphql(`
  query TemplateList {
    templates { name description pool image network idle hard warm warmReady resources { cpus memory pids disk } }
  }
`);

export const templateHref = (name: string) => `/templates/${encodeURIComponent(name)}`;

/**
 * The templates the organization can lease from: the catalog's, with its own versions in their
 * place. Read when opened (warm counts included: no event says a warm container became ready).
 */
export function TemplatesPage() {
  const [list, refetch] = useQueryAnswer({ query: TemplateList, requestPolicy: 'cache-and-network' });
  return (
    <Page title="Templates">
      <p className="muted">
        What an environment is leased from: its image, limits, shares and services, the pool of nodes that runs it and its default
        time-outs.
      </p>
      <QueryState
        what="templates"
        result={list}
        retry={() => refetch({ requestPolicy: 'network-only' })}
        isEmpty={(d) => d.templates.length === 0}
        empty="This organization has no templates to lease from."
      >
        {(data) => (
          <Table label="Templates" head={['Name', 'Description', 'Pool', 'Image', 'Network', 'Warm', 'Limits', 'Idle', 'Hard']}>
            {data.templates.map((t) => (
              <tr key={t.name}>
                <th scope="row">
                  <Link href={templateHref(t.name)}>{t.name}</Link>
                </th>
                <td>{t.description ?? '–'}</td>
                <td>{t.pool}</td>
                <td>{t.image ? <code>{t.image}</code> : '–'}</td>
                <td>{t.network}</td>
                <td>{warmState(t)}</td>
                <td>{limits(t.resources)}</td>
                <td>{t.idle}</td>
                <td>{t.hard}</td>
              </tr>
            ))}
          </Table>
        )}
      </QueryState>
    </Page>
  );
}
