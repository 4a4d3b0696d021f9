import { type FormEvent, useState } from 'react';
import { Link, useLocation } from 'wouter';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { formErrors } from '../api';
import { Field, Page, QueryState, useForm } from '../components/ui';
import { pairsToObject, parsePairs, splitList } from '../format';
import { graphql } from '../generated/gql';
import type { CreateEnvironmentInput } from '../generated/gql/graphql';

const Catalog = graphql(`
  query NewEnvironmentCatalog {
    templates { name description pool idle hard shares { name direction envPath } services { service target } }
    sandboxes { sandbox { id name } }
  }
`);

const CreateEnvironment = graphql(`
  mutation CreateEnvironment($input: CreateEnvironmentInput!) {
    createEnvironment(input: $input) { environment { id name } }
  }
`);

const FIELDS = ['template', 'sandbox', 'shares', 'labels', 'idle', 'hard', 'project', 'snapshot', 'restore'] as const;

export function NewEnvironmentPage() {
  const [catalog, reload] = useQueryAnswer({ query: Catalog });
  const [created, create] = useMutationAnswer(CreateEnvironment);
  const [, navigate] = useLocation();
  const { form, text } = useForm({ template: '', sandbox: '', labels: '', idle: '', hard: '', project: '', snapshot: '', restore: '' });
  const [shares, setShares] = useState<Record<string, string>>({});
  const [local, setLocal] = useState<Record<string, string>>({});

  const templates = catalog.data?.templates ?? [];
  const template = templates.find((t) => t.name === (form.template || templates[0]?.name));
  const errors = { ...formErrors(created.error, FIELDS), ...local };

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (!template) return;
    const labels = parsePairs(form.labels);
    if (labels.bad) {
      setLocal({ labels: `"${labels.bad}" is not key=value` });
      return;
    }
    setLocal({});
    const chosen = Object.fromEntries(
      Object.entries(shares).filter(([name, folder]) => folder && template.shares.some((s) => s.name === name)),
    );
    const restore = splitList(form.restore);
    const input: CreateEnvironmentInput = {
      template: template.name,
      ...(form.sandbox ? { sandbox: form.sandbox } : {}),
      ...(Object.keys(chosen).length ? { shares: chosen } : {}),
      ...(labels.pairs.length ? { labels: pairsToObject(labels.pairs) } : {}),
      ...(form.idle.trim() ? { idle: form.idle.trim() } : {}),
      ...(form.hard.trim() ? { hard: form.hard.trim() } : {}),
      ...(form.project.trim() ? { project: form.project.trim() } : {}),
      ...(form.snapshot.trim() ? { snapshot: form.snapshot.trim() } : {}),
      ...(restore.length ? { restore } : {}),
    };
    const result = await create({ input });
    const env = result.data?.createEnvironment.environment;
    if (env) navigate(`/environments/${env.name}`);
  };

  return (
    <Page title="New environment">
      <p>
        <Link href="/environments">Back to the environments</Link>
      </p>
      <QueryState
        what="the template catalog"
        result={catalog}
        retry={() => reload({ requestPolicy: 'network-only' })}
        isEmpty={(data) => data.templates.length === 0}
        empty="This organization has no templates to lease from."
      >
        {(data) => (
          <form className="stacked" onSubmit={submit} noValidate>
            <Field label="Template" error={errors.template} hint={template?.description ?? undefined}>
              {(props) => (
                <select {...props} {...text('template')} value={template?.name ?? ''}>
                  {templates.map((t) => (
                    <option key={t.name} value={t.name}>
                      {t.name} (pool {t.pool})
                    </option>
                  ))}
                </select>
              )}
            </Field>
            <Field
              label="Sandbox"
              error={errors.sandbox}
              hint="The machine to wire it to; needed for shares and for its services on localhost"
            >
              {(props) => (
                <select {...props} {...text('sandbox')}>
                  <option value="">None</option>
                  {data.sandboxes.map(({ sandbox }) => (
                    <option key={sandbox.id} value={sandbox.id}>
                      {sandbox.name}
                    </option>
                  ))}
                </select>
              )}
            </Field>
            <fieldset aria-describedby={errors.shares ? 'shares-error' : undefined}>
              <legend>Shares</legend>
              {template?.shares.length ? (
                template.shares.map((share) => (
                  <Field
                    key={share.name}
                    label={`Share ${share.name}`}
                    hint={`${share.direction === 'in' ? 'Sent to' : 'Brought back from'} ${share.envPath}; a folder on the sandbox, relative to its folder`}
                  >
                    {(props) => (
                      <input
                        {...props}
                        value={shares[share.name] ?? ''}
                        onChange={(e) => setShares((s) => ({ ...s, [share.name]: e.target.value }))}
                        placeholder="."
                      />
                    )}
                  </Field>
                ))
              ) : (
                <p className="muted">This template has no shares.</p>
              )}
              {errors.shares ? (
                <small id="shares-error" className="error">
                  {errors.shares}
                </small>
              ) : null}
            </fieldset>
            <Field label="Labels" error={errors.labels} hint="key=value, one per line or separated by commas">
              {(props) => <textarea {...props} rows={2} {...text('labels')} placeholder="team=infra" />}
            </Field>
            <div className="row">
              <Field label="Idle" error={errors.idle} hint={`Idle time-out; default ${template?.idle ?? '–'}`}>
                {(props) => <input {...props} {...text('idle')} placeholder="30m" />}
              </Field>
              <Field label="Hard" error={errors.hard} hint={`Hard time-out, at most 24h; default ${template?.hard ?? '–'}`}>
                {(props) => <input {...props} {...text('hard')} placeholder="6h" />}
              </Field>
            </div>
            <Field label="Project" error={errors.project} hint="Whose key seals its files; default: default">
              {(props) => <input {...props} {...text('project')} placeholder="default" />}
            </Field>
            <div className="row">
              <Field label="Snapshot" error={errors.snapshot} hint="Key its synced files are saved under when it ends">
                {(props) => <input {...props} {...text('snapshot')} />}
              </Field>
              <Field
                label="Restore"
                error={errors.restore}
                hint="Snapshot keys to start from, in order, separated by commas; default: the snapshot key"
              >
                {(props) => <input {...props} {...text('restore')} />}
              </Field>
            </div>
            <p className="failure" role="alert" hidden={!Object.keys(errors).length}>
              {errors.form ?? 'Berth refused the form: see the fields marked above.'}
            </p>
            <div className="actions">
              <button type="submit" className="primary" disabled={created.fetching}>
                Create
              </button>
            </div>
          </form>
        )}
      </QueryState>
    </Page>
  );
}
