import { Link } from 'wouter';
import { useQueryAnswer } from '../answers';
import { Empty, Failure, Fields, Page, QueryState, Section, Table } from '../components/ui';
import { millis, warmState } from '../format';
import { graphql } from '../generated/gql';

const TemplateDetail = graphql(`
  query TemplateDetail {
    templates {
      name description pool image network workdir shell env idle hard startMs warm warmReady
      version source status error warnings user containerUser lifecycle { phase name argv }
      resources { cpus memory disk pids }
      shares { name direction envPath }
      services { service target }
    }
  }
`);

const TemplateBuildLog = graphql(`
  query TemplateBuildLog($name: String!) {
    template(name: $name) { name log }
  }
`);

/** The build log of an organization's own template (a catalog template builds nothing). */
function BuildLog({ name }: { name: string }) {
  const [answer] = useQueryAnswer({ query: TemplateBuildLog, variables: { name }, requestPolicy: 'cache-and-network' });
  const log = answer.data?.template.log;
  if (!log) return null;
  return (
    <Section title="Build log">
      <pre>{log}</pre>
    </Section>
  );
}

/** One template: what an environment leased from it runs with. */
export function TemplatePage({ name }: { name: string }) {
  // The API lists templates whole (there are few): the page picks its own from the list.
  const [detail, refetch] = useQueryAnswer({ query: TemplateDetail, requestPolicy: 'cache-and-network' });
  return (
    <Page title={`Template ${name}`}>
      <p>
        <Link href="/templates">Back to the templates</Link>
      </p>
      <QueryState what={`template ${name}`} result={detail} retry={() => refetch({ requestPolicy: 'network-only' })}>
        {(data) => {
          const t = data.templates.find((x) => x.name === name);
          if (!t) return <Failure error={`This organization has no template named ${name}.`} />;
          const env = Object.entries(t.env);
          return (
            <>
              <Fields
                items={[
                  ['Description', t.description],
                  ['Version', `${t.version} (${t.source === 'api' ? "the organization's own" : 'the catalog'})`],
                  ['Status', t.error ? `${t.status}: ${t.error}` : t.status],
                  ['Pool', t.pool],
                  ['Image', t.image ? <code key="image">{t.image}</code> : 'none: environments hold files only'],
                  ['Network', t.network],
                  ['Working directory', t.workdir],
                  ['Shell', t.shell],
                  ['User', t.user ?? "the image's"],
                  ['CPUs', t.resources.cpus],
                  ['Memory', t.resources.memory],
                  ['Disk', t.resources.disk],
                  ['Processes', t.resources.pids],
                  ['Idle time-out', t.idle],
                  ['Hard time-out', t.hard],
                  ['Start time', millis(t.startMs)],
                  ['Warm containers', warmState(t)],
                ]}
              />
              {t.warnings.length ? (
                <Section title="Warnings">
                  <ul aria-label="Warnings">
                    {t.warnings.map((w) => (
                      <li key={w}>{w}</li>
                    ))}
                  </ul>
                </Section>
              ) : null}
              {t.lifecycle.length ? (
                <Section title="Lifecycle commands">
                  <Table label="Lifecycle commands" head={['When', 'Command']}>
                    {t.lifecycle.map((c) => (
                      <tr key={`${c.phase} ${c.name ?? ''}`}>
                        <th scope="row">{c.name ? `${c.phase} (${c.name})` : c.phase}</th>
                        <td>
                          <code>{c.argv.join(' ')}</code>
                        </td>
                      </tr>
                    ))}
                  </Table>
                </Section>
              ) : null}
              <Section title="Shares">
                {t.shares.length ? (
                  <Table label="Shares" head={['Name', 'Direction', 'Path in the environment']}>
                    {t.shares.map((s) => (
                      <tr key={s.name}>
                        <th scope="row">{s.name}</th>
                        <td>{s.direction}</td>
                        <td>{s.envPath}</td>
                      </tr>
                    ))}
                  </Table>
                ) : (
                  <Empty>No shares.</Empty>
                )}
              </Section>
              <Section title="Services">
                {t.services.length ? (
                  <Table label="Services" head={['Service', 'Target in the environment']}>
                    {t.services.map((s) => (
                      <tr key={s.service}>
                        <th scope="row">{s.service}</th>
                        <td>{s.target}</td>
                      </tr>
                    ))}
                  </Table>
                ) : (
                  <Empty>No services.</Empty>
                )}
              </Section>
              <Section title="Variables">
                {env.length ? (
                  <Table label="Variables" head={['Name', 'Value']}>
                    {env.map(([key, value]) => (
                      <tr key={key}>
                        <th scope="row">{key}</th>
                        <td>
                          <code>{String(value)}</code>
                        </td>
                      </tr>
                    ))}
                  </Table>
                ) : (
                  <Empty>No variables.</Empty>
                )}
              </Section>
              {t.source === 'api' ? <BuildLog name={t.name} /> : null}
            </>
          );
        }}
      </QueryState>
    </Page>
  );
}
