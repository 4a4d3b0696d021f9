import { print } from 'graphql';
import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import { graphql } from './gql';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const WatchExecs = graphql(
  `subscription TestWatchExecs($env: String!, $after: Int) { execs(environment: $env, after: $after) { id command lease } }`,
);

const query = print(WatchExecs);

describeBackends('the execs subscription', (backend) => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it('delivers commands as they are recorded, after the ones recorded since `after`', async () => {
    const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
    const record = async (command: string) =>
      (await admin.post(`/v1/environments/${env.name}/execs`, { command, exitCode: 0, durationMs: 1 })).body.exec as { id: number };
    const first = await record('make deps');
    await record('make build');

    const ws = createClient({
      url: `${s.url.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    const caughtUp = ws.iterate({ query, variables: { env: env.name, after: first.id } });
    // The catch-up subscription is live once it delivered what it missed.
    expect((await caughtUp.next()).value).toEqual({ data: { execs: expect.objectContaining({ command: 'make build', lease: env.id }) } });
    await record('make test');
    expect((await caughtUp.next()).value?.data?.execs.command).toBe('make test');
    await caughtUp.return?.();
    await ws.dispose();

    const unknown = createClient({
      url: `${s.url.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    const missing = unknown.iterate({ query, variables: { env: 'no-such-env' } });
    expect((await missing.next()).value?.errors?.[0]?.extensions?.code).toBe('not_found');
    await unknown.dispose();
  });
});
