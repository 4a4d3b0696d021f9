import { afterAll, beforeAll, expect, it } from 'vitest';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

// One paging rule (1-500, default 50), one cursor codec and one policy for unknown query
// parameters, for every list, REST and GraphQL.
describeBackends('paging and query parameters', (backend) => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);
  const LISTS = ['/v1/environments', '/v1/artifacts', '/v1/snapshots', '/v1/audit'];

  beforeAll(async () => {
    s = await startServer(backend);
    for (let i = 0; i < 3; i++) {
      expect((await admin.post('/v1/environments', { template: 'default', labels: { n: String(i) } })).status).toBe(202);
      const stored = await fetch(`${s.url}/v1/artifacts?name=a${i}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream' },
        body: `artifact ${i}`,
      });
      expect(stored.status).toBe(201);
    }
  });
  afterAll(() => s?.stop());

  it('refuses a page size outside 1-500 and a bad cursor on every list with 422 naming the parameter', async () => {
    for (const list of LISTS) {
      for (const limit of ['-1', '0', '501', '5000', 'abc', '1.5']) {
        const res = await admin.get(`${list}?limit=${limit}`);
        expect(res.status, `${list}?limit=${limit}`).toBe(422);
        expect(res.body).toMatchObject({ code: 'invalid', error: expect.stringMatching(/^limit: /) });
      }
      for (const cursor of ['bad', 'e30', Buffer.from('["x","y"]').toString('base64url')]) {
        const res = await admin.get(`${list}?cursor=${cursor}`);
        expect(res.status, `${list}?cursor=${cursor}`).toBe(422);
        expect(res.body).toMatchObject({ code: 'invalid', error: expect.stringMatching(/^cursor: /) });
      }
      expect((await admin.get(`${list}?limit=500`)).status).toBe(200);
    }
  });

  it('pages every list the same way: default 50, next until the end', async () => {
    const all: string[] = [];
    let next: string | undefined;
    do {
      const res = await admin.get(`/v1/environments?limit=2${next ? `&cursor=${next}` : ''}`);
      expect(res.status).toBe(200);
      all.push(...res.body.environments.map((e: { id: string }) => e.id));
      next = res.body.next;
    } while (next);
    expect(all).toHaveLength(3);
    expect(new Set(all).size).toBe(3);
    const artifacts = await admin.get('/v1/artifacts?limit=2');
    expect(artifacts.body.artifacts).toHaveLength(2);
    const rest = await admin.get(`/v1/artifacts?limit=2&cursor=${artifacts.body.next}`);
    expect(rest.body.artifacts).toHaveLength(1);
    expect(rest.body.next).toBeUndefined();
    // A cursor of one list is not a cursor of another.
    const foreign = await admin.get(`/v1/environments?cursor=${artifacts.body.next}`);
    expect(foreign).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await admin.get(`/v1/audit?cursor=${artifacts.body.next}`)).toMatchObject({ status: 422, body: { code: 'invalid' } });
  });

  it('refuses the same in GraphQL, as field errors beside the other fields', async () => {
    for (const args of ['first: -1', 'first: 0', 'first: 501', 'after: "bad"', 'last: 2']) {
      for (const field of ['environments', 'artifacts', 'auditEvents']) {
        const res = await admin.post('/graphql', { query: `{ viewer { name } ${field}(${args}) { nodes { id } } }` });
        expect(res.status, `${field}(${args})`).toBe(200);
        expect(res.body.data).toMatchObject({ viewer: { name: 'admin@berth.local' } });
        expect(res.body.errors[0]).toMatchObject({ path: [field], extensions: { code: 'invalid' } });
      }
    }
    const snapshots = await admin.post('/graphql', { query: '{ snapshots(first: 0) { next } }' });
    expect(snapshots.body.errors[0]).toMatchObject({ extensions: { code: 'invalid' }, message: expect.stringMatching(/^first: /) });
  });

  it('refuses unknown and repeated query parameters on every route, naming them', async () => {
    for (const path of ['/v1/environments', '/v1/artifacts', '/v1/snapshots', '/v1/tokens', '/v1/me', '/v1/sandboxes']) {
      const res = await admin.get(`${path}?name=x&nmae=y`);
      if (path === '/v1/artifacts') {
        expect(res.body.error).toMatch(/nmae/);
      } else {
        expect(res.status, path).toBe(422);
        expect(res.body).toMatchObject({ code: 'invalid', error: expect.stringContaining('unknown query parameter') });
      }
    }
    const repeated = await admin.get('/v1/environments?template=a&template=b');
    expect(repeated).toMatchObject({ status: 422, body: { error: expect.stringContaining('template') } });
  });
});
