import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, startServer, type TestServer } from './helpers/server';

const run = promisify(execFile);
const root = new URL('..', import.meta.url).pathname;

function berth(env: Record<string, string>, ...args: string[]) {
  return run(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...args], { cwd: root, env: { ...process.env, ...env } });
}

describe('operator command: org create', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer();
  });
  afterAll(() => s?.stop());

  it('creates an organization and its first admin while the server runs on the same data', async () => {
    const { stdout } = await berth({ DATA_DIR: s.dataDir }, 'org', 'create', 'acme', '--admin', 'root@acme.test');
    const token = /admin token \(shown once\): (\S+)/.exec(stdout)?.[1];
    expect(token).toMatch(/^bct_/);
    const me = await client(() => s.url, token).get('/v1/me');
    expect(me.body).toMatchObject({ kind: 'person', name: 'root@acme.test', admin: true, organization: { name: 'acme' } });
  });

  it('refuses a duplicate name and bad arguments with a message and a non-zero exit', async () => {
    await expect(berth({ DATA_DIR: s.dataDir }, 'org', 'create', 'acme', '--admin', 'x@acme.test')).rejects.toMatchObject({
      code: 1,
      stderr: expect.stringContaining('already exists'),
    });
    await expect(berth({ DATA_DIR: s.dataDir }, 'org', 'create', 'Bad Name', '--admin', 'x@y.z')).rejects.toMatchObject({ code: 1 });
    await expect(berth({ DATA_DIR: s.dataDir }, 'org', 'create', 'acme2')).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('usage'),
    });
  });

  it('works with no server running, and the server then accepts the token', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-cli-'));
    try {
      const { stdout } = await berth({ DATA_DIR: dir }, 'org', 'create', 'solo', '--admin', 'me@solo.test');
      const token = /admin token \(shown once\): (\S+)/.exec(stdout)![1];
      const server = await startServer('pglite', { DATA_DIR: dir });
      try {
        expect((await client(() => server.url, token).get('/v1/me')).body.organization.name).toBe('solo');
      } finally {
        await server.stop();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
