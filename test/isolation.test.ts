import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

// A statement that fails must never hurt requests running beside it: on the embedded PGlite
// every request shares one database session.
describeBackends('no request hurts another', (backend) => {
  let s: TestServer;
  let other: string;

  beforeAll(async () => {
    s = await startServer(backend);
    other = (await createOrganization(s.app.deps.prisma, 'other', 'root@other.test')).secret;
  });
  afterAll(() => s?.stop());

  it('keeps every good request of every organization whole while statements fail beside them', async () => {
    const mine = client(() => s.url, BOOTSTRAP);
    const theirs = client(() => s.url, other);
    const failures: string[] = [];
    let good = 0;
    const goodOne = async (c: typeof mine, path: string) => {
      const res = await c.get(path);
      if (res.status === 200) good++;
      else failures.push(`${path}: ${res.status} ${JSON.stringify(res.body)}`);
    };
    // Statements that fail in the database (division by zero, an undefined table), as a bug or a
    // constraint would make them, through the same client and pool the requests use.
    const badOne = (i: number) =>
      s.app.deps.prisma.$queryRawUnsafe(i % 2 ? 'SELECT 1/0' : 'SELECT * FROM "NoSuchTable"').then(
        () => 'succeeded',
        () => 'failed',
      );
    for (let round = 0; round < 5; round++) {
      const tasks: Promise<unknown>[] = [];
      for (let i = 0; i < 40; i++) {
        tasks.push(badOne(i));
        tasks.push(goodOne(i % 2 ? mine : theirs, i % 3 ? '/v1/me' : '/v1/environments?limit=5'));
      }
      expect((await Promise.all(tasks)).filter((r) => r === 'succeeded')).toEqual([]);
    }
    expect(failures).toEqual([]);
    expect(good).toBe(200);
  });
});
