import { lazy, Suspense, useCallback, useRef, useState } from 'react';
import { Link } from 'wouter';
import { isStoppable } from '../../../src/kernel/environment-states';
import { useMutationAnswer, useQueryAnswer } from '../answers';
import { EnvironmentLog } from '../components/EnvironmentLog';
import { Previews } from '../components/Previews';
import { SandboxLink } from '../components/SandboxLink';
import { Empty, Failure, Fields, Labels, LiveNotice, Page, QueryState, Section, StateBadge, Table } from '../components/ui';
import { millis, when } from '../format';
import { graphql } from '../generated/gql';
import type { EnvironmentPageFieldsFragment, ExecRowFragment } from '../generated/gql/graphql';
import { useEvents } from '../live';
import { useSession } from '../session';

// xterm.js loads with the first terminal opened, not with the console.
const Terminal = lazy(() => import('../components/Terminal'));
// The usage charts load with the environment page's Usage section, not with the first page.
const Usage = lazy(() => import('../components/Usage'));

graphql(`
  fragment EnvironmentPageFields on Environment {
    id name template state waiting node sandbox pool labels project readyMs error createdBy
    created ready stopped stoppedBy expires idleUntil idle hard snapshot
    exports { service listen target }
    shares { name direction envPath localPath files }
    restored { key root files created }
    image network workdir runtime resources { cpus memory pids disk }
  }
`);

graphql(`
  fragment ExecRow on Exec { id time actor command exitCode durationMs }
`);

const EnvironmentDetail = graphql(`
  query EnvironmentDetail($id: String!) {
    environment(id: $id) { ...EnvironmentPageFields }
    execs(environment: $id) { ...ExecRow }
  }
`);

const EnvironmentUpdates = graphql(`
  subscription EnvironmentUpdates($id: String!) {
    environment(id: $id) { ...EnvironmentPageFields }
  }
`);

const ExecUpdates = graphql(`
  subscription ExecUpdates($id: String!, $after: Int) {
    execs(environment: $id, after: $after) { ...ExecRow }
  }
`);

const StopEnvironment = graphql(`
  mutation StopEnvironment($id: String!) {
    stopEnvironment(id: $id) { ...EnvironmentPageFields }
  }
`);

const KeepAlive = graphql(`
  mutation KeepEnvironmentAlive($id: String!) {
    keepEnvironmentAlive(id: $id) { ...EnvironmentPageFields }
  }
`);

export function EnvironmentPage({ id }: { id: string }) {
  return <EnvironmentView key={id} id={id} />;
}

function EnvironmentView({ id }: { id: string }) {
  const [detail, refetch] = useQueryAnswer({ query: EnvironmentDetail, variables: { id }, requestPolicy: 'cache-and-network' });
  const [latest, setLatest] = useState<EnvironmentPageFieldsFragment>();
  const [newExecs, setNewExecs] = useState<ExecRowFragment[]>([]);
  const [stopped, stop] = useMutationAnswer(StopEnvironment);
  const [kept, keepAlive] = useMutationAnswer(KeepAlive);
  const [notice, setNotice] = useState<string>();
  const resync = () => {
    setLatest(undefined);
    refetch({ requestPolicy: 'network-only' });
  };
  const envError = useEvents(EnvironmentUpdates, { id }, (data) => setLatest(data.environment), { resync });
  // From the newest command the list has: none falls between the list and the subscription.
  const after = detail.data ? Math.max(0, ...detail.data.execs.map((x) => x.id)) : undefined;
  const execError = useEvents(
    ExecUpdates,
    { id, after },
    (data) => setNewExecs((list) => (list.some((x) => x.id === data.execs.id) ? list : [data.execs, ...list])),
    { pause: after === undefined },
  );

  const onStop = async () => {
    const result = await stop({ id });
    if (result.data) setLatest(result.data.stopEnvironment);
    setNotice(result.error ? undefined : 'Asked to stop: it ends once its node has released it.');
  };
  const onKeepAlive = async () => {
    const result = await keepAlive({ id });
    if (result.data) {
      setLatest(result.data.keepEnvironmentAlive);
      setNotice(`Kept alive: the idle time-out is now ${when(result.data.keepEnvironmentAlive.idleUntil)}.`);
    }
  };

  const env = latest ?? detail.data?.environment;
  const live = env ? isStoppable(env.state) : false;
  const actionError = stopped.error ?? kept.error;
  return (
    <Page
      title={env ? `Environment ${env.name}` : 'Environment'}
      actions={
        env ? (
          <>
            <button type="button" onClick={onKeepAlive} disabled={!live || kept.fetching}>
              Keep alive
            </button>
            <button type="button" className="danger" onClick={onStop} disabled={!live || stopped.fetching}>
              Stop
            </button>
          </>
        ) : null
      }
    >
      <p>
        <Link href="/environments">Back to the environments</Link>
      </p>
      <QueryState what={`environment ${id}`} result={detail} retry={() => refetch({ requestPolicy: 'network-only' })}>
        {(data) => {
          const e = env ?? data.environment;
          const seen = new Set(newExecs.map((x) => x.id));
          const execs = [...newExecs, ...data.execs.filter((x) => !seen.has(x.id))];
          return (
            <>
              {actionError ? <Failure error={actionError} /> : null}
              <p role="status" className="muted">
                {notice}
              </p>
              <LiveNotice error={envError ?? execError} />
              {e.error ? (
                <div className="failure" role="note" aria-label="Error">
                  <strong>Error:</strong> {e.error}
                </div>
              ) : null}
              {e.state === 'pending' && e.waiting ? (
                <p className="notice" role="status" aria-label="Why it waits">
                  <strong>Waiting:</strong> {e.waiting}
                </p>
              ) : null}
              <Fields
                items={[
                  ['State', <StateBadge key="s" state={e.state} />],
                  ['Id', <code key="i">{e.id}</code>],
                  ['Name', e.name],
                  ['Template', e.template],
                  ['Pool', e.pool],
                  ['Image', e.image ? <code key="im">{e.image}</code> : null],
                  ['Runtime', e.runtime],
                  ['Network', e.network],
                  ['Resources', resourcesText(e.resources)],
                  ['Working directory', <code key="wd">{e.workdir}</code>],
                  ['Node', e.node],
                  ['Sandbox', e.sandbox ? <SandboxLink key="sb" id={e.sandbox} /> : null],
                  ['Project', e.project],
                  ['Labels', <Labels key="l" labels={e.labels} />],
                  ['Created by', e.createdBy],
                  ['Created', when(e.created)],
                  ['Ready', when(e.ready)],
                  ['Ready in', millis(e.readyMs)],
                  ['Stopped', when(e.stopped)],
                  ['Stopped by', e.stoppedBy],
                  ['Idle', e.idle],
                  ['Idle until', when(e.idleUntil)],
                  ['Hard', e.hard],
                  ['Expires', when(e.expires)],
                  ['Snapshot', e.snapshot],
                  [
                    'Restored',
                    e.restored
                      ? `${e.restored.key} (${e.restored.files} files, saved ${when(e.restored.created)}, root ${e.restored.root})`
                      : null,
                  ],
                ]}
              />
              <Section title="Log">
                <EnvironmentLog environment={e.id} live={live} />
              </Section>
              <Section title="Usage">
                <Suspense fallback={<p className="muted">Loading the usage…</p>}>
                  <Usage environment={e.id} live={live} resources={e.resources} />
                </Suspense>
              </Section>
              <Section title="Exports">
                {e.exports.length ? (
                  <Table label="Exports" head={['Service', 'On the sandbox', 'In the environment']}>
                    {e.exports.map((x) => (
                      <tr key={x.service}>
                        <th scope="row">{x.service}</th>
                        <td>
                          <code>{x.listen}</code>
                        </td>
                        <td>
                          <code>{x.target}</code>
                        </td>
                      </tr>
                    ))}
                  </Table>
                ) : (
                  <Empty>No services exported{e.sandbox ? '' : ': it is not wired to a sandbox'}.</Empty>
                )}
              </Section>
              {e.state === 'ready' && e.runtime === 'container' ? (
                <Section title="Preview">
                  <Previews environment={e.id} template={e.template} />
                </Section>
              ) : null}
              <Section title="Shares">
                {e.shares.length ? (
                  <Table label="Shares" head={['Name', 'Direction', 'In the environment', 'On the sandbox', 'Extra files']}>
                    {e.shares.map((s) => (
                      <tr key={s.name}>
                        <th scope="row">{s.name}</th>
                        <td>{s.direction}</td>
                        <td>
                          <code>{s.envPath}</code>
                        </td>
                        <td>
                          <code>{s.localPath}</code>
                        </td>
                        <td>{s.files.length ? s.files.join(', ') : '–'}</td>
                      </tr>
                    ))}
                  </Table>
                ) : (
                  <Empty>No shares.</Empty>
                )}
              </Section>
              {e.state === 'ready' && e.runtime === 'container' ? <TerminalSection environment={e.id} /> : null}
              <Section title="Commands">
                {execs.length ? (
                  <Table label="Commands" head={['Time', 'Command', 'Exit code', 'Duration', 'By']}>
                    {execs.map((x) => (
                      <tr key={x.id}>
                        <td>{when(x.time)}</td>
                        <td>
                          <code>{x.command}</code>
                        </td>
                        <td>{x.exitCode}</td>
                        <td>{millis(x.durationMs)}</td>
                        <td>{x.actor}</td>
                      </tr>
                    ))}
                  </Table>
                ) : (
                  <Empty>No commands recorded yet; they appear here as they run.</Empty>
                )}
              </Section>
            </>
          );
        }}
      </QueryState>
    </Page>
  );
}

/** The limits the environment was leased with, e.g. `2 CPUs · 4GiB memory · 4096 processes`. */
function resourcesText(r: EnvironmentPageFieldsFragment['resources']): string | null {
  const parts = [
    r.cpus != null ? `${r.cpus} ${r.cpus === 1 ? 'CPU' : 'CPUs'}` : null,
    r.memory != null ? `${r.memory} memory` : null,
    r.disk != null ? `${r.disk} disk` : null,
    r.pids != null ? `${r.pids} processes` : null,
  ].filter((p) => p !== null);
  return parts.length ? parts.join(' · ') : null;
}

const EnvironmentSessions = graphql(`
  query EnvironmentSessions($id: String!) {
    environment(id: $id) { id sessions { id command tty created attached lastActivity } }
  }
`);

/**
 * The environment's shell, opened on demand: a new one, or one of its sessions still running (a
 * dropped connection leaves the shell running for a while; the terminal attaches to it again by
 * itself). Ending the shell kills it; leaving it running only closes this terminal.
 */
function TerminalSection({ environment }: { environment: string }) {
  const { api } = useSession();
  const [open, setOpen] = useState<{ session?: string }>();
  const [ended, setEnded] = useState<string>();
  const leave = useRef(false);
  const onEnd = useCallback((why: string) => setEnded(why), []);
  const [sessions, refetch] = useQueryAnswer({ query: EnvironmentSessions, variables: { id: environment }, requestPolicy: 'network-only' });
  const close = (leaveRunning: boolean) => {
    leave.current = leaveRunning;
    setOpen(undefined);
    refetch({ requestPolicy: 'network-only' });
  };
  const running = sessions.data?.environment.sessions ?? [];
  return (
    <Section title="Terminal">
      {open ? (
        <>
          <Suspense fallback={<p className="muted">Loading the terminal…</p>}>
            <Terminal environment={environment} token={api.token} session={open.session} onEnd={onEnd} leave={leave} />
          </Suspense>
          {ended ? (
            <button type="button" onClick={() => close(false)}>
              Close the terminal
            </button>
          ) : (
            <>
              <button type="button" onClick={() => close(false)}>
                End the shell
              </button>{' '}
              <button type="button" onClick={() => close(true)}>
                Leave it running
              </button>
            </>
          )}
        </>
      ) : (
        <>
          <button
            type="button"
            onClick={() => {
              setEnded(undefined);
              setOpen({});
            }}
          >
            Open a terminal
          </button>
          {running.length ? (
            <Table label="Running sessions" head={['Session', 'Command', 'Attached', 'Started', '']}>
              {running.map((r) => (
                <tr key={r.id}>
                  <td>
                    <code>{r.id}</code>
                  </td>
                  <td>
                    <code>{r.command}</code>
                  </td>
                  <td>{r.attached}</td>
                  <td>{when(r.created)}</td>
                  <td>
                    <button
                      type="button"
                      aria-label={`Attach to ${r.id}`}
                      onClick={() => {
                        setEnded(undefined);
                        setOpen({ session: r.id });
                      }}
                    >
                      Attach
                    </button>
                  </td>
                </tr>
              ))}
            </Table>
          ) : null}
        </>
      )}
    </Section>
  );
}
