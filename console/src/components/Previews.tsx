// An environment's preview URLs (docs/environments.md, "Preview URLs"): an Open button per
// service of its template and one for any port, each on a fresh link valid an hour, in a new tab.
import { type FormEvent, useState } from 'react';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { graphql } from '../generated/gql';
import { Failure } from './ui';

const TemplateServices = graphql(`
  query TemplateServices { templates { name services { service target } } }
`);

const CreatePreview = graphql(`
  mutation CreatePreview($id: String!, $port: Int!) {
    createPreview(environment: $id, input: { port: $port, expiresIn: "1h" }) { url port expires }
  }
`);

/** The port of a `host:port` target, if it has one. */
const portOf = (target: string): number | undefined => {
  const port = Number(target.slice(target.lastIndexOf(':') + 1));
  return Number.isInteger(port) && port >= 1 && port <= 65535 ? port : undefined;
};

/** `environment`'s preview buttons: one per service of its `template`, and one for any port. */
export function Previews({ environment, template }: { environment: string; template: string }) {
  const [templates] = useQueryAnswer({ query: TemplateServices });
  const [created, create] = useMutationAnswer(CreatePreview);
  const [port, setPort] = useState('');
  const [problem, setProblem] = useState<string>();
  const open = async (to: number) => {
    setProblem(undefined);
    // Opened at the click (a tab opened later, after the answer, is what popup blockers stop),
    // then sent to the link; it never gets a handle on this page.
    const tab = window.open('', '_blank');
    if (tab) tab.opener = null;
    const answer = await create({ id: environment, port: to });
    const url = answer.data?.createPreview.url;
    if (!url) {
      tab?.close();
      setProblem(answer.error?.graphQLErrors[0]?.message ?? answer.error?.message ?? 'no preview URL came back');
      return;
    }
    if (tab) tab.location.href = url;
    else window.location.assign(url);
  };
  const submit = (event: FormEvent) => {
    event.preventDefault();
    const to = Number(port);
    if (!Number.isInteger(to) || to < 1 || to > 65535) return setProblem('a port is a whole number from 1 to 65535');
    void open(to);
  };
  const exports = templates.data?.templates.find((t) => t.name === template)?.services ?? [];
  const services = exports.flatMap((x) => {
    const to = portOf(x.target);
    return to ? [{ service: x.service, port: to }] : [];
  });
  return (
    <>
      {services.length ? (
        <ul>
          {services.map((s) => (
            <li key={s.service}>
              {s.service} (port {s.port}){' '}
              <button type="button" disabled={created.fetching} onClick={() => void open(s.port)} aria-label={`Open ${s.service}`}>
                Open
              </button>
            </li>
          ))}
        </ul>
      ) : null}
      <form onSubmit={submit} aria-label="Open a port">
        <label>
          Port <input inputMode="numeric" value={port} onChange={(e) => setPort(e.target.value)} size={6} required />
        </label>{' '}
        <button type="submit" disabled={created.fetching}>
          Open
        </button>
      </form>
      {problem ? <Failure error={problem} /> : null}
    </>
  );
}
