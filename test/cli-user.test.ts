// The user's command line (`berth env …`, `berth artifact …`) run as real processes against a
// Berth started by the test.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';

const root = new URL('..', import.meta.url).pathname;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Starts `node bin/berth.js args…` with BERTH_URL/BERTH_TOKEN (undefined values are removed). */
function start(env: Record<string, string | undefined>, args: string[]): { child: ChildProcess; done: Promise<Run> } {
  const fullEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, ...env })) if (v !== undefined) fullEnv[k] = v;
  const child = spawn(process.execPath, ['bin/berth.js', ...args], { cwd: root, env: fullEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => {
    stdout += d;
  });
  child.stderr!.on('data', (d) => {
    stderr += d;
  });
  const done = new Promise<Run>((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
  return { child, done };
}

/** The same, on a terminal: script(1) runs it on a pseudo-terminal (80 columns: it has no size of its own); stdout is all it printed. */
function inTerminal(env: Record<string, string>, args: string[]): Promise<Run> {
  const command = [process.execPath, 'bin/berth.js', ...args].join(' ');
  const child = spawn('script', ['-qec', command, '/dev/null'], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  child.stdout!.on('data', (d) => {
    stdout += d;
  });
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr: '' })));
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** A free loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * A TCP proxy that, once `limit` bytes went from the server to the client, cuts the connection
 * (`cut`) or forwards nothing more while keeping it open (`hold`).
 */
async function cuttingProxy(target: string, limit: number, mode: 'cut' | 'hold' = 'cut'): Promise<{ url: string; close(): Promise<void> }> {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  const server: Server = createServer((downstream) => {
    const upstream = connect(Number(port), hostname);
    sockets.add(downstream).add(upstream);
    let sent = 0;
    downstream.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      const room = limit - sent;
      downstream.write(chunk.subarray(0, Math.max(0, room)));
      sent += chunk.length;
      if (sent >= limit && mode === 'cut') {
        upstream.destroy();
        downstream.destroy();
      } else if (sent >= limit) {
        upstream.pause();
      }
    });
    for (const s of [downstream, upstream]) s.on('error', () => undefined).on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const TEMPLATES = {
  pools: [
    { name: 'default', hotNodes: 6, maxQueued: 10 },
    { name: 'remote', hotNodes: 0, maxQueued: 10 },
  ],
  templates: [
    {
      name: 'default',
      pool: 'default',
      startMs: 100,
      idle: '30m',
      hard: '6h',
      shares: [
        { name: 'src', direction: 'in', envPath: '/workspace/src' },
        { name: 'out', direction: 'out', envPath: '/workspace/out' },
      ],
      services: [{ service: 'postgres', target: '127.0.0.1:5432' }],
    },
    { name: 'nodeless', pool: 'remote', startMs: 100, idle: '30m', hard: '6h', shares: [], services: [] },
  ],
};

describe('berth env and berth artifact', () => {
  let s: TestServer;
  let dir: string;
  let env: Record<string, string>;
  const berth = (...args: string[]) => start(env, args).done;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-cli-user-'));
    await writeFile(join(dir, 'templates.json'), JSON.stringify(TEMPLATES));
    // Small chunks and segments: a few MiB make many sealed chunks over several segments.
    s = await startServer('pglite', {
      TEMPLATES_FILE: join(dir, 'templates.json'),
      ARTIFACT_CHUNK_SIZE: String(256 * 1024),
      ARTIFACT_SEGMENT_SIZE: String(1024 * 1024),
    });
    env = { BERTH_URL: s.url, BERTH_TOKEN: BOOTSTRAP };
  });
  afterAll(async () => {
    await s?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('creates, lists, shows and removes an environment', async () => {
    const created = await berth('env', 'create', '--template', 'default', '--label', 'team=infra', '--label', 'ci=yes');
    expect(created).toMatchObject({ code: 0, stderr: '' });
    const [id, name, state] = created.stdout.trim().split(' ');
    expect(id).toMatch(/^env_/);
    expect(state).toBe('pending');

    const listed = await berth('env', 'ls');
    expect(listed.code).toBe(0);
    const lines = listed.stdout.trim().split('\n');
    expect(lines[0].split(/\s+/)).toEqual(['ID', 'NAME', 'TEMPLATE', 'STATE', 'NODE', 'SANDBOX', 'AGE', 'LABELS']);
    const row = lines.find((l) => l.startsWith(id));
    expect(row).toContain(name);
    expect(row).toMatch(/ (ci=yes,team=infra|team=infra,ci=yes)$/);

    const json = JSON.parse((await berth('env', 'ls', '--json', '--label', 'team=infra')).stdout);
    expect(json.environments.map((e: { id: string }) => e.id)).toEqual([id]);
    expect(JSON.parse((await berth('env', 'ls', '--json', '--label', 'team=other')).stdout).environments).toEqual([]);

    const byName = await berth('env', 'get', name, '--json');
    expect(JSON.parse(byName.stdout)).toMatchObject({ id, name, template: 'default', labels: { team: 'infra', ci: 'yes' } });
    const readable = await berth('env', 'get', id);
    expect(readable.code).toBe(0);
    expect(readable.stdout).toMatch(new RegExp(`^id: +${id}$`, 'm'));
    expect(readable.stdout).toMatch(new RegExp(`^name: +${name}$`, 'm'));
    expect(readable.stdout).toMatch(/^labels: +(ci=yes, team=infra|team=infra, ci=yes)$/m);
    // What the console shows of how it runs, as the API answers it.
    const full = JSON.parse(byName.stdout);
    expect(full.runtime).toBeTruthy();
    for (const field of ['runtime', 'image', 'network', 'workdir'] as const) {
      if (full[field])
        expect(readable.stdout).toMatch(new RegExp(`^${field}: +${full[field].replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`, 'm'));
    }
    if (full.resources?.memory) expect(readable.stdout).toMatch(new RegExp(`^resources: +.*${full.resources.memory} memory`, 'm'));

    const removed = await berth('env', 'rm', name);
    expect(removed.code).toBe(0);
    expect(removed.stdout.trim()).toMatch(new RegExp(`^${id} ${name} (stopping|stopped)$`));
    const after = await client(() => s.url, BOOTSTRAP).get(`/v1/environments/${id}`);
    expect(after.body.state).toMatch(/^(stopping|stopped)$/);
    expect(after.body.stoppedBy).toBeTruthy();
  });

  it('keeps several environments alive and ends them at once; a refused one fails the command, not the others', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) ids.push((await berth('env', 'create', '--template', 'default')).stdout.split(' ')[0]!);
    const kept = await berth('env', 'keepalive', ...ids);
    expect(kept).toMatchObject({ code: 0, stderr: '' });
    expect(
      kept.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(' ')[0]),
    ).toEqual(ids);
    expect(kept.stdout).toMatch(/ idle until \d{4}-\d\d-\d\dT/);
    const removed = await berth('env', 'rm', ids[0]!, 'env_nosuchenvironment0', ids[1]!);
    expect(removed.code).toBe(1);
    expect(
      removed.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(' ')[0]),
    ).toEqual(ids);
    expect(removed.stderr).toContain('berth: env_nosuchenvironment0: environment env_nosuchenvironment0 not found');
    expect(removed.stderr).toContain('1 of 3 failed: env_nosuchenvironment0');
  });

  it('lists templates, sandboxes, snapshots, artifacts and nodes as the console does', async () => {
    const admin = client(() => s.url, BOOTSTRAP);
    // A template that keeps warm containers, with limits: no engine here, so none is ready.
    const warmish = {
      pool: 'remote',
      startMs: 10,
      idle: '30m',
      hard: '1h',
      image: 'localhost/berth-test/none:1',
      warm: 2,
      resources: { cpus: 1, memory: '512MiB' },
    };
    const put = await admin.put('/v1/templates/warmish', warmish);
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    const templates = await berth('template', 'ls');
    expect(templates.code).toBe(0);
    expect(templates.stdout.split('\n')[0]!.split(/\s+/)).toEqual([
      'NAME',
      'POOL',
      'IMAGE',
      'VERSION',
      'WARM',
      'LIMITS',
      'IDLE',
      'HARD',
      'SHARES',
      'SERVICES',
    ]);
    expect(templates.stdout).toMatch(/^default +default +\(files only\) +v1 +- +/m);
    expect(templates.stdout).toMatch(/^warmish +remote +localhost\/berth-test\/none:1 +v1 +0\/2 +1cpu,512MiB/m);
    await admin.post('/v1/sandboxes', { name: 'listed-laptop' });
    const sandboxes = await berth('sandbox', 'ls');
    expect(sandboxes.stdout).toMatch(/^sb_\S+ +listed-laptop +0 +- +active +admin@berth.local$/m);
    const stored = await fetch(`${s.url}/v1/artifacts?name=listed.txt&project=lists`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'text/plain' },
      body: 'listed',
    }).then((r) => r.json());
    const artifacts = await berth('artifact', 'ls', '--project', 'lists');
    expect(artifacts.stdout).toMatch(new RegExp(`^${stored.artifact.id} +listed.txt +lists +6 B +`, 'm'));
    const json = JSON.parse((await berth('artifact', 'ls', '--project', 'lists', '--json')).stdout);
    expect(json.artifacts.map((a: { id: string }) => a.id)).toEqual([stored.artifact.id]);
    const snapshots = await berth('snapshot', 'ls', '--project', 'lists');
    expect(snapshots).toMatchObject({ code: 0, stdout: '', stderr: 'no snapshots in project lists\n' });

    // `berth node ls` beside `berth node`, the command that serves a pool: a node never connected is lost.
    // The built-in node is listed first: it serves the pools with hot nodes for every organization.
    // ALLOCATED: CPU and memory allocated of what the node offers.
    expect((await berth('node', 'ls')).stdout).toMatch(
      /^nod_builtin_\w+ +builtin \(built-in\) +hot pools +online +0\/\d+ +0\/\d+ CPU, 0 B\/[\d.]+ [KMGT]iB +\S+ +-$/m,
    );
    const created = await admin.post('/v1/nodes', { pool: 'default', name: 'listed-builder' });
    const nodes = await berth('node', 'ls');
    expect(nodes.stdout.split('\n')[0]!.split(/\s{2,}/)).toEqual([
      'ID',
      'NAME',
      'POOL',
      'STATE',
      'SLOTS',
      'ALLOCATED',
      'LAST SEEN',
      'ENVIRONMENTS',
    ]);
    expect(nodes.stdout).toMatch(
      new RegExp(`^${created.body.node.id} +listed-builder +default +lost +0/0 +0/\\? CPU, 0 B/\\? +- +-$`, 'm'),
    );
    const listed = JSON.parse((await berth('node', 'ls', '--json')).stdout);
    expect(listed.nodes.map((n: { builtin: boolean }) => n.builtin)).toEqual([true, false]);
    expect(listed.nodes[1]).toEqual(created.body.node);
    expect(await berth('node', 'ls', '--server', `http://127.0.0.1:${await closedPort()}`)).toMatchObject({
      code: 1,
      stderr: expect.stringContaining('cannot reach'),
    });
    const usage = await berth('node', '--dir', '/tmp');
    expect(usage).toMatchObject({ code: 2, stderr: expect.stringContaining("required option '--server <url>' not specified") });
  });

  it('wires an environment to a sandbox with --sandbox and --share name=path', async () => {
    const api = client(() => s.url, BOOTSTRAP);
    const registered = await api.post('/v1/sandboxes', { name: 'laptop' });
    expect(registered.status).toBe(201);
    const run = await berth(
      'env',
      'create',
      '--template',
      'default',
      '--sandbox',
      'laptop',
      '--share',
      'src=app',
      '--share',
      'out=build/out',
      '--json',
    );
    expect(run.code).toBe(0);
    const answer = JSON.parse(run.stdout);
    expect(answer.environment.sandbox).toBeTruthy();
    const shares = Object.fromEntries(answer.environment.shares.map((sh: { name: string; localPath: string }) => [sh.name, sh.localPath]));
    expect(shares).toEqual({ src: 'app', out: 'build/out' });
    expect(answer.sandboxConfig.environments.map((e: { id: string }) => e.id)).toContain(answer.environment.id);
    // The list names the sandbox as the console does, not by its id.
    const wired = (await berth('env', 'ls', '--sandbox', 'laptop')).stdout.split('\n').find((l) => l.startsWith(answer.environment.id));
    expect(wired?.split(/\s+/)[5]).toBe('laptop');

    // The server's refusal of a bad share path is printed as it is.
    const bad = await berth('env', 'create', '--template', 'default', '--sandbox', 'laptop', '--share', 'src=../up');
    const direct = await api.post('/v1/environments', { template: 'default', sandbox: 'laptop', shares: { src: '../up' } });
    expect(direct.status).toBe(422);
    expect(bad).toMatchObject({ code: 1, stdout: '', stderr: `berth: ${direct.body.error}\n` });
  });

  it('--wait returns once the environment is ready', async () => {
    const run = await berth('env', 'create', '--template', 'default', '--wait');
    expect(run.code).toBe(0);
    const [id, name, state] = run.stdout.trim().split(' ');
    expect(state).toBe('ready');
    expect(run.stderr).toContain(`${name}: ready`);
    const now = await client(() => s.url, BOOTSTRAP).get(`/v1/environments/${id}`);
    expect(now.body).toMatchObject({ state: 'ready', name });
    expect(run.stdout.trim()).toBe(`${id} ${name} ready on ${now.body.node}`);

    const json = await berth('env', 'create', '--template', 'default', '--wait', '--json');
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ state: 'ready', node: expect.stringMatching(/^default-/) });
  });

  it('--wait exits 1 with the reason when the environment ends before it is ready', async () => {
    const api = client(() => s.url, BOOTSTRAP);
    const waiting = start(env, ['env', 'create', '--template', 'nodeless', '--wait']);
    // No node serves the pool: the lease stays pending until someone ends it.
    const pending = await vi.waitFor(
      async () => {
        const found: { id: string; name: string } | undefined = (await api.get('/v1/environments?template=nodeless&state=pending')).body
          .environments[0];
        if (!found) throw new Error('no pending environment yet');
        return found;
      },
      { timeout: 20_000, interval: 50 },
    );
    expect((await api.del(`/v1/environments/${pending.id}`)).status).toBe(200);
    const run = await waiting.done;
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(new RegExp(`^berth: environment ${pending.name} \\(${pending.id}\\) is (stopping|stopped)$`, 'm'));

    // --timeout gives up waiting and says so, with why it waits (shown while it waited: piped, one
    // line per reason); the lease stays.
    const timedOut = await berth('env', 'create', '--template', 'nodeless', '--timeout', '1s');
    expect(timedOut.code).toBe(1);
    const why = 'no node serves pool remote: it has no built-in nodes and your organization has registered none for it';
    const [, name, id] =
      /^berth: environment (\S+) \((env_\w+)\) is still pending after 1s \((.+)\); it keeps its lease/m.exec(timedOut.stderr) ?? [];
    expect(id).toBeTruthy();
    expect(timedOut.stderr).toContain(`berth: environment ${name} (${id}) is still pending after 1s (${why}`);
    expect(timedOut.stderr.split('\n').filter((line) => line.startsWith(`${name}: waiting: ${why}`))).toHaveLength(1);
    expect((await api.get(`/v1/environments/${id}`)).body).toMatchObject({ name, state: 'pending' });
    expect((await berth('env', 'rm', id)).code).toBe(0);
    expect((await berth('env', 'create', '--template', 'nodeless', '--timeout', 'soon')).code).toBe(2);

    // On a terminal (script(1) gives it one) the reason is one line, rewritten in place, cut to the
    // terminal's width, and ended before the next message.
    const tty = await inTerminal(env, ['env', 'create', '--template', 'nodeless', '--timeout', '1s']);
    expect(tty.code).toBe(1);
    // Clear to the end of the line (ESC [ K) after a carriage return, then the reason.
    const rewritten = tty.stdout.split('\r\u001b[K')[1] ?? '';
    const [, shownName, shown] = /^(\S+): waiting: (.*?)\r?\n/.exec(rewritten) ?? [];
    expect(`${why}; an admin adds one`.startsWith(shown!.replace(/…$/, ''))).toBe(true);
    expect(`${shownName}: waiting: ${shown}`.length).toBeLessThan(80);
    expect(tty.stdout).toMatch(new RegExp(`\\r?\\nberth: environment ${shownName} \\(env_\\w+\\) is still pending after 1s`));
    expect((await berth('env', 'rm', shownName!)).code).toBe(0);
  });

  it("prints the server's error and exits 1: unknown id, bad token; says what is missing or unreachable", async () => {
    const api = client(() => s.url, BOOTSTRAP);
    const unknown = await berth('env', 'get', 'env_doesnotexist');
    const direct = await api.get('/v1/environments/env_doesnotexist');
    expect(direct.status).toBe(404);
    expect(unknown).toMatchObject({ code: 1, stdout: '', stderr: `berth: ${direct.body.error}\n` });

    const badToken = await start({ ...env, BERTH_TOKEN: 'bct_not-a-real-token' }, ['env', 'ls']).done;
    const refused = await client(() => s.url, 'bct_not-a-real-token').get('/v1/environments');
    expect(refused.status).toBe(401);
    expect(badToken).toMatchObject({ code: 1, stdout: '', stderr: `berth: ${refused.body.error}\n` });
    // --token wins over BERTH_TOKEN.
    expect((await start({ ...env, BERTH_TOKEN: 'bct_not-a-real-token' }, ['env', 'ls', '--token', BOOTSTRAP]).done).code).toBe(0);

    const noToken = await start({ BERTH_URL: s.url, BERTH_TOKEN: undefined }, ['env', 'ls']).done;
    expect(noToken.code).toBe(1);
    expect(noToken.stderr).toMatch(
      /^berth: no credential for http:\/\/127\.0\.0\.1:\d+: run `berth login`, or set BERTH_TOKEN \(or pass --token\)/,
    );

    const port = await closedPort();
    const down = await start({ ...env, BERTH_URL: `http://127.0.0.1:${port}` }, ['env', 'ls']).done;
    expect(down).toMatchObject({ code: 1, stderr: `berth: cannot reach Berth at http://127.0.0.1:${port}: ECONNREFUSED\n` });

    const usage = await berth('env', 'create');
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("required option '--template <name>'");
    expect((await berth('env', 'create', '--template', 'default', '--label', 'novalue')).code).toBe(2);
  });

  it('pushes a multi-MiB file and pulls back the same bytes; --link gives a link that downloads them', async () => {
    const data = randomBytes(5 * 1024 * 1024 + 12345);
    const file = join(dir, 'build.tar');
    await writeFile(file, data);
    const pushed = await berth('artifact', 'push', file, '--project', 'web', '--retention', '2d', '--link', '1h');
    expect(pushed.code).toBe(0);
    expect(pushed.stderr).toBe(''); // no progress bar when stderr is not a terminal
    const [id, url, ...rest] = pushed.stdout.trim().split('\n');
    expect(id).toMatch(/^art_/);
    expect(rest).toEqual([]);

    const stored = await client(() => s.url, BOOTSTRAP).get(`/v1/artifacts/${id}`);
    expect(stored.body).toMatchObject({ name: 'build.tar', project: 'web', size: data.length, sha256: sha256(data) });
    expect(stored.body.chunks).toBeGreaterThan(10);

    const out = join(dir, 'pulled.tar');
    const pulled = await berth('artifact', 'pull', id, '-o', out);
    expect(pulled).toMatchObject({ code: 0, stdout: '', stderr: '' });
    expect(sha256(await readFile(out))).toBe(sha256(data));

    expect(url).toMatch(new RegExp(`^${s.url}/v1/links/`));
    const viaLink = await fetch(url); // no credential
    expect(viaLink.status).toBe(200);
    expect(sha256(Buffer.from(await viaLink.arrayBuffer()))).toBe(sha256(data));

    // Into a folder: the artifact's name; to stdout with -o -.
    const folder = await mkdtemp(join(dir, 'into-'));
    expect((await berth('artifact', 'pull', id, '-o', folder)).code).toBe(0);
    expect(await readdir(folder)).toEqual(['build.tar']);
    const json = JSON.parse((await berth('artifact', 'push', file, '--name', 'again.tar', '--json')).stdout);
    expect(json.artifact).toMatchObject({ name: 'again.tar', sha256: sha256(data) });
    expect(json.link).toBeUndefined();
  });

  it('a failed download leaves no file: an unknown id, a connection cut mid-way, Ctrl-C', async () => {
    const folder = await mkdtemp(join(dir, 'failed-'));
    const target = join(folder, 'x.bin');
    const unknown = await berth('artifact', 'pull', 'art_doesnotexist', '-o', target);
    const direct = await client(() => s.url, BOOTSTRAP).get('/v1/artifacts/art_doesnotexist');
    expect(direct.status).toBe(404);
    expect(unknown).toMatchObject({ code: 1, stderr: `berth: ${direct.body.error}\n` });
    expect(await readdir(folder)).toEqual([]);

    const data = randomBytes(4 * 1024 * 1024);
    const file = join(dir, 'cut.bin');
    await writeFile(file, data);
    const id = (await berth('artifact', 'push', file)).stdout.trim();
    const proxy = await cuttingProxy(s.url, 1024 * 1024);
    try {
      const cut = await start({ ...env, BERTH_URL: proxy.url }, ['artifact', 'pull', id, '-o', target]).done;
      expect(cut.code).toBe(1);
      expect(cut.stderr).toMatch(
        new RegExp(`^berth: the download of ${id} broke off after \\d+ of ${data.length} bytes .*; nothing was saved\\n$`),
      );
    } finally {
      await proxy.close();
    }
    expect(await readdir(folder)).toEqual([]);

    // Interrupted (Ctrl-C) while the bytes are coming: the partial file is removed.
    const stalled = await cuttingProxy(s.url, 1024 * 1024, 'hold');
    try {
      const pulling = start({ ...env, BERTH_URL: stalled.url }, ['artifact', 'pull', id, '-o', target]);
      await vi.waitFor(async () => expect((await readdir(folder)).some((f) => f.endsWith('.part'))).toBe(true), {
        timeout: 20_000,
        interval: 20,
      });
      pulling.child.kill('SIGINT');
      const interrupted = await pulling.done;
      expect(interrupted).toMatchObject({ code: 1, stderr: 'berth: interrupted: nothing was saved\n' });
    } finally {
      await stalled.close();
    }
    expect(await readdir(folder)).toEqual([]);

    // A push of a missing file never reaches the server.
    const missing = await berth('artifact', 'push', join(dir, 'nope.bin'));
    expect(missing).toMatchObject({ code: 1, stderr: `berth: cannot read ${join(dir, 'nope.bin')}: ENOENT\n` });
  });
});
