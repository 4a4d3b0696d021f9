import { type FormEvent, useMemo, useState } from 'react';
import { Link, useSearchParams } from 'wouter';
import { STATES } from '../../../src/kernel/environment-states';
import { useQueryAnswer } from '../answers';
import { SandboxLink } from '../components/SandboxLink';
import { Failure, Field, Labels, LiveNotice, Page, Pager, QueryState, StateBadge, Table, usePager } from '../components/ui';
import { millis, parsePairs, when } from '../format';
import { graphql } from '../generated/gql';
import type { EnvironmentFilter, EnvironmentRowFragment } from '../generated/gql/graphql';
import { matchesFilter, useEvents } from '../live';

graphql(`
  fragment EnvironmentRow on Environment {
    id name template state waiting node sandbox labels created readyMs
  }
`);

const EnvironmentList = graphql(`
  query EnvironmentList($first: Int!, $after: String, $filter: EnvironmentFilter) {
    environments(first: $first, after: $after, filter: $filter) {
      nodes { ...EnvironmentRow }
      pageInfo { hasNextPage endCursor }
    }
  }
`);

const TemplateNames = graphql(`
  query TemplateNames {
    templates { name }
  }
`);

const EnvironmentRows = graphql(`
  subscription EnvironmentRows {
    environments { ...EnvironmentRow }
  }
`);

const PAGE_SIZE = 25;
const CHOICES = ['live', 'ended', ...STATES];

export function EnvironmentsPage() {
  const [search, setSearch] = useSearchParams();
  const filter: EnvironmentFilter = useMemo(
    () => ({
      state: search.get('state') || undefined,
      template: search.get('template') || undefined,
      label: search.getAll('label').length ? search.getAll('label') : undefined,
    }),
    [search],
  );
  const pager = usePager();
  const [list, refetch] = useQueryAnswer({
    query: EnvironmentList,
    variables: { first: PAGE_SIZE, after: pager.after, filter },
    requestPolicy: 'cache-and-network',
  });
  const [templates, refetchTemplates] = useQueryAnswer({ query: TemplateNames });

  // Every change of every environment: rows on this page change in place; new ones that match
  // the filter appear on top of the first page.
  const [live, setLive] = useState<Map<string, EnvironmentRowFragment>>(new Map());
  const liveError = useEvents(EnvironmentRows, {}, (data) => setLive((m) => new Map(m).set(data.environments.id, data.environments)), {
    resync: () => {
      setLive(new Map());
      refetch({ requestPolicy: 'network-only' });
    },
  });

  const apply = (next: { state?: string; template?: string; label?: string[] }) => {
    const params = new URLSearchParams();
    const merged = { state: filter.state, template: filter.template, label: filter.label, ...next };
    if (merged.state) params.set('state', merged.state);
    if (merged.template) params.set('template', merged.template);
    for (const pair of merged.label ?? []) params.append('label', pair);
    pager.reset();
    setSearch(params);
  };

  return (
    <Page
      title="Environments"
      actions={
        <Link href="/environments/new" className="button primary">
          New environment
        </Link>
      }
    >
      <Filters filter={filter} templates={templates.data?.templates.map((t) => t.name) ?? []} onApply={apply} />
      {templates.error ? (
        <Failure
          what="the templates to filter by"
          error={templates.error}
          retry={() => refetchTemplates({ requestPolicy: 'network-only' })}
        />
      ) : null}
      <LiveNotice error={liveError} />
      <QueryState
        what="environments"
        result={list}
        retry={() => refetch({ requestPolicy: 'network-only' })}
        isEmpty={(d) => d.environments.nodes.length === 0 && ![...live.values()].some((e) => matchesFilter(filter, e))}
        empty={
          filter.state || filter.template || filter.label ? (
            'No environment matches these filters.'
          ) : (
            <>
              No environments yet. <Link href="/environments/new">Lease one</Link>.
            </>
          )
        }
      >
        {(data) => {
          const rows = data.environments.nodes.map((e) => live.get(e.id) ?? e);
          const shown = new Set(rows.map((e) => e.id));
          // The list's order is (created, id), newest first: only what sorts before the first row is new.
          const first = rows[0];
          const newer = (e: { created: string; id: string }) =>
            !first || e.created > first.created || (e.created === first.created && e.id > first.id);
          const added =
            pager.page === 1
              ? [...live.values()]
                  .filter((e) => !shown.has(e.id) && newer(e) && matchesFilter(filter, e))
                  .sort((a, b) => b.created.localeCompare(a.created) || b.id.localeCompare(a.id))
              : [];
          return (
            <>
              <Table label="Environments" head={['Name', 'Template', 'State', 'Node', 'Sandbox', 'Labels', 'Created', 'Ready in']}>
                {[...added, ...rows].map((env) => (
                  <tr key={env.id}>
                    <th scope="row">
                      <Link href={`/environments/${env.name}`}>{env.name}</Link>
                    </th>
                    <td>{env.template}</td>
                    <td>
                      <StateBadge state={env.state} />
                      {env.state === 'pending' && env.waiting ? <div className="muted small">{env.waiting}</div> : null}
                    </td>
                    <td>{env.node ?? '–'}</td>
                    <td>{env.sandbox ? <SandboxLink id={env.sandbox} /> : '–'}</td>
                    <td>
                      <Labels labels={env.labels} />
                    </td>
                    <td>{when(env.created)}</td>
                    <td>{millis(env.readyMs)}</td>
                  </tr>
                ))}
              </Table>
              <Pager pager={pager} hasNext={data.environments.pageInfo.hasNextPage} nextCursor={data.environments.pageInfo.endCursor} />
            </>
          );
        }}
      </QueryState>
    </Page>
  );
}

function Filters({
  filter,
  templates,
  onApply,
}: {
  filter: EnvironmentFilter;
  templates: string[];
  onApply(next: { state?: string; template?: string; label?: string[] }): void;
}) {
  const [labels, setLabels] = useState((filter.label ?? []).join(', '));
  const [error, setError] = useState<string>();
  const submit = (event: FormEvent) => {
    event.preventDefault();
    const { pairs, bad } = parsePairs(labels);
    setError(bad ? `"${bad}" is not key=value` : undefined);
    if (!bad) onApply({ label: pairs });
  };
  return (
    <search aria-label="Filter environments">
      <form className="filters" onSubmit={submit}>
        <Field label="State">
          {(props) => (
            <select {...props} value={filter.state ?? ''} onChange={(e) => onApply({ state: e.target.value })}>
              <option value="">Any state</option>
              {CHOICES.map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          )}
        </Field>
        <Field label="Template">
          {(props) => (
            <select {...props} value={filter.template ?? ''} onChange={(e) => onApply({ template: e.target.value })}>
              <option value="">Any template</option>
              {[...new Set([...templates, ...(filter.template ? [filter.template] : [])])].map((t) => (
                <option key={t} value={t}>
                  {t}
                </option>
              ))}
            </select>
          )}
        </Field>
        <Field label="Label" error={error} hint="key=value; several separated by commas">
          {(props) => <input {...props} value={labels} onChange={(e) => setLabels(e.target.value)} placeholder="team=infra" />}
        </Field>
        <button type="submit">Filter</button>
      </form>
    </search>
  );
}
