import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, startServer, type TestServer } from './helpers/server';

const run = promisify(execFile);
const root = new URL('..', import.meta.url).pathname;

function berth(env: Record<string, string>, ...args: string[]) {
  return run(process.execPath, ['bin/berth.js', ...args], { cwd: root, env: { ...process.env, ...env } });
}

describe('berth --version', () => {
  it('prints the version of the package', async () => {
    const { version } = JSON.parse(await readFile(join(root, 'package.json'), 'utf8'));
    for (const flag of ['--version', '-V']) expect((await berth({}, flag)).stdout).toBe(`${version}\n`);
  });

  it('runs from its bundle and loads no heavy module: no agent, database, container engine or compiler', async () => {
    await berth({}, '--version'); // builds the bundle first, were src/ edited since the global setup built it
    const traced = await run(process.execPath, ['--import', './test/fixtures/loaded-modules.mjs', 'bin/berth.js', '--version'], {
      cwd: root,
    });
    const loaded: string[] = JSON.parse(/^loaded: (.*)$/m.exec(traced.stderr)![1]!);
    expect(loaded).toContain(pathToFileURL(join(root, 'dist/cli/berth.js')).href);
    const heavy =
      /dockerode|@prisma|@electric-sql|\/pg\/|graphql|esbuild|\/tsx\/|node-agent|sandbox-agent|chokidar|tar-stream|cli-progress|\/ws\//;
    expect(loaded.filter((url) => heavy.test(url))).toEqual([]);
  });

  it('berth node without a credential says where to put it', async () => {
    const failed = await berth({ BERTH_NODE_TOKEN: '' }, 'node', '--server', 'http://127.0.0.1:9', '--dir', tmpdir()).catch((e) => e);
    expect(failed).toMatchObject({ code: 1, stderr: 'berth: the node credential is missing: set BERTH_NODE_TOKEN (or pass --token)\n' });
  });
});

describe('berth, used from a shell', () => {
  it('ends quietly when its reader goes away (berth --help | head)', async () => {
    const child = spawn(process.execPath, ['bin/berth.js', '--help'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    // The reader is gone before berth writes a line.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const [code] = await once(child, 'exit');
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  });

  it('refuses an operator command without DATA_DIR where there is no database, and makes none', async () => {
    const cwd = await mkdtemp(join(tmpdir(), 'berth-nowhere-'));
    try {
      const { DATA_DIR: _unset, ...env } = process.env;
      const failed = await run(process.execPath, [join(root, 'bin/berth.js'), 'token', 'create', '--org', 'default', '--admin'], {
        cwd,
        env,
      }).catch((e) => e);
      expect(failed).toMatchObject({ code: 1, stderr: expect.stringContaining('no Berth database in') });
      expect(failed.stderr).toContain('set DATA_DIR');
      expect(await readdir(cwd)).toEqual([]);
    } finally {
      await rm(cwd, { recursive: true, force: true });
    }
  });
});

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
    // A usage error: what was wrong and the one help command to run, not the whole help.
    const usage = await berth({ DATA_DIR: s.dataDir }, 'org', 'create', 'acme2').catch((e) => e);
    expect(usage).toMatchObject({ code: 2, stderr: expect.stringContaining("required option '--admin <email>' not specified") });
    expect(usage.stderr).toContain('Run "berth org create --help" for its usage.');
    expect(usage.stderr).not.toContain('Options:');
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

describe('operator command: token create', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer();
  });
  afterAll(() => s?.stop());

  const tokenOf = (stdout: string) => /token \(shown once\): (\S+)/.exec(stdout)?.[1];

  it("issues a token for an organization's admin while the server runs on the same data", async () => {
    const { stdout } = await berth({ DATA_DIR: s.dataDir }, 'token', 'create', '--org', 'default', '--admin');
    const token = tokenOf(stdout);
    expect(token).toMatch(/^bct_/);
    const me = await client(() => s.url, token).get('/v1/me');
    expect(me.body).toMatchObject({ kind: 'person', name: 'admin@berth.local', admin: true, organization: { name: 'default' } });
    const listed = await client(() => s.url, token).get('/v1/tokens');
    expect(listed.body.tokens.find((t: { prefix: string }) => token!.startsWith(t.prefix))).toMatchObject({
      createdBy: 'berth token create',
    });
  });

  it('issues one for a named admin, refuses members and unknown organizations', async () => {
    await berth({ DATA_DIR: s.dataDir }, 'org', 'create', 'beta', '--admin', 'lead@beta.test');
    const { stdout } = await berth({ DATA_DIR: s.dataDir }, 'token', 'create', '--org', 'beta', '--admin', '--email', 'lead@beta.test');
    expect((await client(() => s.url, tokenOf(stdout)).get('/v1/me')).body.name).toBe('lead@beta.test');
    await expect(berth({ DATA_DIR: s.dataDir }, 'token', 'create', '--org', 'nope', '--admin')).rejects.toMatchObject({
      code: 1,
      stderr: expect.stringContaining('nope'),
    });
    await expect(
      berth({ DATA_DIR: s.dataDir }, 'token', 'create', '--org', 'beta', '--admin', '--email', 'who@beta.test'),
    ).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('who@beta.test') });
    await expect(berth({ DATA_DIR: s.dataDir }, 'token', 'create', '--org', 'beta')).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('Run "berth token create --help" for its usage.'),
    });
  });

  it('works with no server running', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-cli-'));
    try {
      await berth({ DATA_DIR: dir }, 'org', 'create', 'solo', '--admin', 'me@solo.test');
      const { stdout } = await berth({ DATA_DIR: dir }, 'token', 'create', '--org', 'solo', '--admin');
      const server = await startServer('pglite', { DATA_DIR: dir });
      try {
        expect((await client(() => server.url, tokenOf(stdout)).get('/v1/me')).body.name).toBe('me@solo.test');
      } finally {
        await server.stop();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
