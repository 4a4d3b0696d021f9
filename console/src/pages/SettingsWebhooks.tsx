// The Webhooks section of Settings (admins): register and remove endpoints, see the signing
// secret once, which endpoints are failing and their recent deliveries (docs/operations.md#webhooks).
import { type FormEvent, useId, useState } from 'react';
import { WEBHOOK_EVENTS, type WebhookEvent } from '../../../src/kernel/event-names';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { formErrors } from '../api';
import { Copyable, Failure, Field, QueryState, Section, Table, useForm } from '../components/ui';
import { when } from '../format';
import { graphql } from '../generated/gql';

const Webhooks = graphql(`
  query SettingsWebhooks {
    webhooks { id url events createdBy created failing failingSince consecutiveFailures }
    webhookSettings { allowPrivate }
  }
`);

const Deliveries = graphql(`
  query SettingsWebhookDeliveries($id: ID!) {
    webhookDeliveries(id: $id, first: 20) {
      nodes {
        id event attempts lastStatus lastError created lastAttempt nextAttempt delivered gaveUp
        history { attempt at status error }
      }
    }
  }
`);

const CreateWebhook = graphql(`
  mutation CreateWebhook($input: CreateWebhookInput!) {
    createWebhook(input: $input) { secret webhook { id url } }
  }
`);

const DeleteWebhook = graphql(`
  mutation DeleteWebhook($id: ID!) {
    deleteWebhook(id: $id)
  }
`);

export function WebhooksSection() {
  const [hooks, refetch] = useQueryAnswer({ query: Webhooks, requestPolicy: 'cache-and-network' });
  const [removal, remove] = useMutationAnswer(DeleteWebhook);
  const [shown, setShown] = useState<string>();
  const reload = () => refetch({ requestPolicy: 'network-only' });
  return (
    <Section title="Webhooks">
      <p className="muted">Endpoints that receive the organization's events, signed the Standard Webhooks way.</p>
      <NewWebhook onCreated={reload} allowPrivate={hooks.data?.webhookSettings.allowPrivate} />
      {removal.error ? <Failure error={removal.error} /> : null}
      <QueryState what="webhooks" result={hooks} retry={reload} isEmpty={(d) => d.webhooks.length === 0} empty="No webhooks.">
        {(data) => (
          <>
            <Table label="Webhooks" head={['URL', 'Events', 'State', 'Created', 'Deliveries', 'Remove']}>
              {data.webhooks.map((w) => (
                <tr key={w.id}>
                  <th scope="row">
                    <code>{w.url}</code>
                  </th>
                  <td>{w.events.join(', ')}</td>
                  <td>{w.failing ? `Failing since ${when(w.failingSince)} (${w.consecutiveFailures} failed in a row)` : 'OK'}</td>
                  <td>{when(w.created)}</td>
                  <td>
                    <button
                      type="button"
                      aria-expanded={shown === w.id}
                      aria-label={`Deliveries of ${w.url}`}
                      onClick={() => setShown(shown === w.id ? undefined : w.id)}
                    >
                      {shown === w.id ? 'Hide' : 'Show'}
                    </button>
                  </td>
                  <td>
                    <button
                      type="button"
                      className="danger"
                      aria-label={`Remove webhook ${w.url}`}
                      onClick={async () => {
                        if (!(await remove({ id: w.id })).error) reload();
                      }}
                    >
                      Remove
                    </button>
                  </td>
                </tr>
              ))}
            </Table>
            {shown && data.webhooks.some((w) => w.id === shown) ? (
              <RecentDeliveries id={shown} url={data.webhooks.find((w) => w.id === shown)!.url} />
            ) : null}
          </>
        )}
      </QueryState>
    </Section>
  );
}

function RecentDeliveries({ id, url }: { id: string; url: string }) {
  const [deliveries, refetch] = useQueryAnswer({ query: Deliveries, variables: { id }, requestPolicy: 'network-only' });
  const reload = () => refetch({ requestPolicy: 'network-only' });
  return (
    <>
      <h3>Recent deliveries to {url}</h3>
      <button type="button" onClick={reload}>
        Refresh deliveries
      </button>
      <QueryState
        what="deliveries"
        result={deliveries}
        retry={reload}
        isEmpty={(d) => d.webhookDeliveries.nodes.length === 0}
        empty="No deliveries yet."
      >
        {(data) => (
          <Table label={`Deliveries to ${url}`} head={['Event', 'Created', 'Attempts', 'Last status', 'Failed attempts', 'Outcome']}>
            {data.webhookDeliveries.nodes.map((d) => (
              <tr key={d.id}>
                <th scope="row">{d.event}</th>
                <td>{when(d.created)}</td>
                <td>{d.attempts}</td>
                <td>{d.lastStatus ?? '–'}</td>
                <td>
                  {d.history.some((a) => a.error) ? (
                    <ol className="attempts">
                      {d.history
                        .filter((a) => a.error)
                        .map((a) => (
                          <li key={a.attempt} value={a.attempt}>
                            {when(a.at)}: {a.error}
                          </li>
                        ))}
                    </ol>
                  ) : (
                    '–'
                  )}
                </td>
                <td>
                  {d.delivered
                    ? `Delivered ${when(d.delivered)}`
                    : d.gaveUp
                      ? `Gave up ${when(d.gaveUp)}`
                      : `Next attempt ${when(d.nextAttempt)}`}
                </td>
              </tr>
            ))}
          </Table>
        )}
      </QueryState>
    </>
  );
}

/** What the URL field says of addresses: the server's setting (WEBHOOK_ALLOW_PRIVATE), once read. */
function urlHint(allowPrivate: boolean | undefined): string {
  if (allowPrivate === undefined) return 'http(s)';
  return allowPrivate
    ? 'http(s); internal addresses are allowed on this server (WEBHOOK_ALLOW_PRIVATE=1)'
    : 'http(s); internal addresses (loopback, private, link-local) are refused';
}

function NewWebhook({ onCreated, allowPrivate }: { onCreated(): void; allowPrivate: boolean | undefined }) {
  const initial = { url: '', ...Object.fromEntries(WEBHOOK_EVENTS.map((e) => [e, false])) } as { url: string } & Record<
    WebhookEvent,
    boolean
  >;
  const { form, text, check, reset } = useForm(initial);
  const [result, create] = useMutationAnswer(CreateWebhook);
  const [secret, setSecret] = useState<{ value: string; url: string }>();
  const errors = formErrors(result.error, ['url', 'events']);
  const legend = useId();
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSecret(undefined);
    const r = await create({ input: { url: form.url.trim(), events: WEBHOOK_EVENTS.filter((e) => form[e]) } });
    const created = r.data?.createWebhook;
    if (created) {
      setSecret({ value: created.secret, url: created.webhook.url });
      reset();
      onCreated();
    }
  };
  return (
    <>
      {/* Stacked: beside the tall Events list, an inline form pushed the URL field down to its bottom. */}
      <form className="stacked" onSubmit={submit} noValidate>
        <Field label="Webhook URL" error={errors.url} hint={urlHint(allowPrivate)}>
          {(props) => <input {...props} type="url" {...text('url')} placeholder="https://ci.example.com/berth-hooks" />}
        </Field>
        <fieldset aria-labelledby={legend}>
          <legend id={legend}>Events</legend>
          {WEBHOOK_EVENTS.map((e) => (
            <label key={e} className="check">
              <input type="checkbox" {...check(e)} /> {e}
            </label>
          ))}
          {errors.events ? <small className="error">{errors.events}</small> : null}
        </fieldset>
        <div className="actions">
          <button type="submit" className="primary" disabled={result.fetching}>
            Add webhook
          </button>
        </div>
      </form>
      {errors.form ? <Failure error={errors.form} /> : null}
      {secret ? (
        <section className="shown-once" aria-label={`Signing secret of ${secret.url}`}>
          <h3>Signing secret of {secret.url}</h3>
          <p>Shown only now: verify each delivery's signature with it. Copy it somewhere safe.</p>
          <Copyable what="Signing secret" value={secret.value} />
        </section>
      ) : null}
    </>
  );
}
