import { type FormEvent, useState } from 'react';
import { Link } from 'wouter';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { formErrors } from '../api';
import { Failure, Field, LiveNotice, Page, QueryState, Section, Table, useForm } from '../components/ui';
import { graphql } from '../generated/gql';
import { useOnEnvironmentChange } from '../live';

const QuotaList = graphql(`
  query QuotaList {
    quotas { template maxLeases running idle hard warnings }
    templates { name idle hard }
  }
`);

const SetQuota = graphql(`
  mutation SetQuota($template: String!, $input: QuotaInput!) {
    setQuota(template: $template, input: $input) { template maxLeases running idle hard warnings }
  }
`);

const quotaHref = (template: string) => `/quotas/${encodeURIComponent(template)}`;

/** The quotas with their live running counts; `template` opens one in the form. */
export function QuotasPage({ template }: { template?: string }) {
  const [list, refetch] = useQueryAnswer({ query: QuotaList, requestPolicy: 'cache-and-network' });
  // Running counts change whenever an environment starts or ends.
  const liveError = useOnEnvironmentChange(() => refetch({ requestPolicy: 'network-only' }));
  return (
    <Page title={template ? `Quota of ${template}` : 'Quotas'}>
      <p className="muted">
        How many environments of a template may be live at once (<code>*</code>: across every template), and the default and longest idle
        and hard time-outs. Creating an environment over a quota is refused.
      </p>
      <LiveNotice error={liveError} />
      <QueryState what="quotas" result={list} retry={() => refetch({ requestPolicy: 'network-only' })}>
        {(data) => (
          <>
            {data.quotas.length ? (
              <Table label="Quotas" head={['Template', 'Running', 'Max leases', 'Idle', 'Hard']}>
                {data.quotas.map((q) => (
                  <tr key={q.template}>
                    <th scope="row">
                      <Link href={quotaHref(q.template)} aria-current={q.template === template ? 'page' : undefined}>
                        {q.template}
                      </Link>
                    </th>
                    <td>{q.running}</td>
                    <td>{q.maxLeases}</td>
                    <td>{q.idle}</td>
                    <td>{q.hard}</td>
                  </tr>
                ))}
              </Table>
            ) : (
              <p className="empty">No quotas: every template may be leased as much as its pool allows.</p>
            )}
            <Warnings warnings={data.quotas.flatMap((q) => q.warnings.map((w) => `${q.template}: ${w}`))} />
            <QuotaForm
              key={template ?? ''}
              onSaved={() => refetch({ requestPolicy: 'network-only' })}
              templates={data.templates.map((t) => t.name)}
              current={data.quotas.find((q) => q.template === template)}
              template={template}
            />
          </>
        )}
      </QueryState>
    </Page>
  );
}

function QuotaForm({
  templates,
  current,
  template,
  onSaved,
}: {
  onSaved(): void;
  templates: string[];
  current?: { template: string; maxLeases: number; idle: string; hard: string };
  template?: string;
}) {
  const { form, text } = useForm({
    template: template ?? templates[0] ?? '*',
    maxLeases: current ? String(current.maxLeases) : '',
    idle: current?.idle ?? '',
    hard: current?.hard ?? '',
  });
  const [result, save] = useMutationAnswer(SetQuota);
  const [saved, setSaved] = useState<string>();
  const [warnings, setWarnings] = useState<string[]>([]);
  const [local, setLocal] = useState<string>();
  const errors = formErrors(result.error, ['template', 'maxLeases', 'idle', 'hard']);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const maxLeases = Number(form.maxLeases);
    if (form.maxLeases.trim() === '' || !Number.isInteger(maxLeases)) {
      setLocal('A whole number: how many may be live at once.');
      return;
    }
    setLocal(undefined);
    const r = await save({
      template: form.template,
      input: {
        maxLeases,
        ...(form.idle.trim() ? { idle: form.idle.trim() } : {}),
        ...(form.hard.trim() ? { hard: form.hard.trim() } : {}),
      },
    });
    const quota = r.data?.setQuota;
    if (quota) {
      setSaved(`Saved: ${quota.template} allows ${quota.maxLeases} live environments (${quota.running} running now).`);
      setWarnings(quota.warnings);
      // A first quota appears in a list that had none: the cache cannot know it belongs there.
      onSaved();
    }
  };

  return (
    <Section title={current ? `Change the quota of ${current.template}` : 'Set a quota'}>
      <form className="stacked" onSubmit={submit} noValidate>
        <Field label="Template" error={errors.template} hint="* sets the limit across every template">
          {(props) => (
            <select {...props} {...text('template')}>
              <option value="*">* (every template)</option>
              {templates.map((t) => (
                <option key={t} value={t}>
                  {t}
                </option>
              ))}
            </select>
          )}
        </Field>
        <div className="row">
          <Field label="Max leases" error={local ?? errors.maxLeases}>
            {(props) => <input {...props} type="number" min={0} step={1} inputMode="numeric" {...text('maxLeases')} />}
          </Field>
          <Field label="Idle" error={errors.idle} hint="Default and longest idle time-out">
            {(props) => <input {...props} {...text('idle')} placeholder="30m" />}
          </Field>
          <Field label="Hard" error={errors.hard} hint="Default and longest hard time-out, at most 24h">
            {(props) => <input {...props} {...text('hard')} placeholder="6h" />}
          </Field>
        </div>
        {errors.form ? <Failure error={errors.form} /> : null}
        <div className="actions">
          <button type="submit" className="primary" disabled={result.fetching}>
            Save
          </button>
        </div>
        <p role="status">{saved}</p>
        <Warnings warnings={warnings} />
      </form>
    </Section>
  );
}

/** What the server warns of a quota: above what its pool can run at once (leases past it only queue). */
function Warnings({ warnings }: { warnings: string[] }) {
  if (!warnings.length) return null;
  return (
    <div className="notice" role="note" aria-label="Warnings">
      {warnings.map((w) => (
        <div key={w}>{w}</div>
      ))}
    </div>
  );
}
