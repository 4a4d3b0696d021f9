import { useState } from 'react';
import { AUDIT_ACTIONS } from '../../../src/kernel/event-names';
import { useQueryAnswer } from '../answers';
import { Field, Page, Pager, QueryState, Section, Table, usePager } from '../components/ui';
import { when } from '../format';
import { graphql } from '../generated/gql';

const AuditList = graphql(`
  query AuditList($first: Int!, $after: String, $filter: AuditFilter) {
    auditEvents(first: $first, after: $after, filter: $filter) {
      nodes { id time action actor { kind id name } target { kind id } address outcome detail }
      pageInfo { hasNextPage endCursor }
    }
  }
`);

const PAGE_SIZE = 25;

interface Filter {
  action: string;
  actor: string;
  target: string;
  since: string;
  until: string;
}

const NONE: Filter = { action: '', actor: '', target: '', since: '', until: '' };

/** A `datetime-local` value (the browser's time zone) as the RFC 3339 the API takes. */
function rfc3339(local: string): string | undefined {
  if (!local) return undefined;
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? local : date.toISOString();
}

function detailText(detail: unknown): string {
  if (!detail || typeof detail !== 'object') return '';
  return Object.entries(detail as Record<string, unknown>)
    .map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' · ');
}

/** The organization's audit log, newest first, for admins (App.tsx keeps members out). */
export function AuditPage() {
  const [form, setForm] = useState<Filter>(NONE);
  const [filter, setFilter] = useState<Filter>(NONE);
  const pager = usePager();
  const [list, refetch] = useQueryAnswer({
    query: AuditList,
    variables: {
      first: PAGE_SIZE,
      after: pager.after,
      filter: {
        action: filter.action || undefined,
        actor: filter.actor.trim() || undefined,
        target: filter.target.trim() || undefined,
        since: rfc3339(filter.since),
        until: rfc3339(filter.until),
      },
    },
    requestPolicy: 'cache-and-network',
  });
  const input = (key: keyof Filter) => ({
    value: form[key],
    onChange: (e: { target: { value: string } }) => setForm((f) => ({ ...f, [key]: e.target.value })),
  });
  const filtered = Object.values(filter).some(Boolean);
  return (
    <Page title="Audit">
      <Section title="Events">
        <search aria-label="Filter events">
          <form
            className="filters"
            onSubmit={(e) => {
              e.preventDefault();
              pager.reset();
              setFilter(form);
            }}
          >
            <Field label="Action">
              {(props) => (
                <select {...props} {...input('action')}>
                  <option value="">every action</option>
                  {AUDIT_ACTIONS.map((a) => (
                    <option key={a} value={a}>
                      {a}
                    </option>
                  ))}
                </select>
              )}
            </Field>
            <Field label="Actor">{(props) => <input {...props} {...input('actor')} placeholder="email or id" />}</Field>
            <Field label="Target">{(props) => <input {...props} {...input('target')} placeholder="env_…, tok_…" />}</Field>
            <Field label="Since">{(props) => <input {...props} {...input('since')} type="datetime-local" step={1} />}</Field>
            <Field label="Until">{(props) => <input {...props} {...input('until')} type="datetime-local" step={1} />}</Field>
            <button type="submit">Filter</button>
            {filtered ? (
              <button
                type="button"
                onClick={() => {
                  pager.reset();
                  setForm(NONE);
                  setFilter(NONE);
                }}
              >
                Clear filters
              </button>
            ) : null}
          </form>
        </search>
        <QueryState
          what="audit events"
          result={list}
          retry={() => refetch({ requestPolicy: 'network-only' })}
          isEmpty={(d) => d.auditEvents.nodes.length === 0}
          empty={filtered ? 'No events match these filters.' : 'No events yet.'}
        >
          {(data) => (
            <>
              <Table label="Audit events" head={['Time', 'Action', 'Actor', 'Target', 'Address', 'Outcome', 'Detail']}>
                {data.auditEvents.nodes.map((e) => (
                  <tr key={e.id}>
                    <td>
                      <time dateTime={e.time}>{when(e.time)}</time>
                    </td>
                    <th scope="row">{e.action}</th>
                    <td title={`${e.actor.kind} ${e.actor.id}`}>{e.actor.name}</td>
                    <td>
                      {e.target.kind} <code>{e.target.id}</code>
                    </td>
                    <td>{e.address}</td>
                    <td className={e.outcome === 'denied' ? 'error' : undefined}>{e.outcome}</td>
                    <td>{detailText(e.detail)}</td>
                  </tr>
                ))}
              </Table>
              <Pager pager={pager} hasNext={data.auditEvents.pageInfo.hasNextPage} nextCursor={data.auditEvents.pageInfo.endCursor} />
            </>
          )}
        </QueryState>
      </Section>
    </Page>
  );
}
