import { serverAudits } from 'graphql-http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BOOTSTRAP, describeBackends, startServer, type TestServer } from './helpers/server';

// graphql-http's audits of the GraphQL over HTTP spec, run against /graphql. They send no
// credentials of their own: every request gets a valid token, or each would only meet the 401.
describeBackends('GraphQL over HTTP audits', (backend) => {
  let s: TestServer;

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it('passes every server audit of graphql-http', async () => {
    const audits = serverAudits({
      url: () => `${s.url}/graphql`,
      fetchFn: (input: RequestInfo | URL, init: RequestInit = {}) => {
        const headers = new Headers(init.headers);
        headers.set('authorization', `Bearer ${BOOTSTRAP}`);
        return fetch(input, { ...init, headers });
      },
    });
    const results = await Promise.all(audits.map((audit) => audit.fn()));
    const failed = results.flatMap((result) => (result.status === 'ok' ? [] : [`${result.id} ${result.name}: ${result.reason}`]));
    expect(failed).toEqual([]);
  });
});
