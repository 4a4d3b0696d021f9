// Lifecycle commands and the environment's log (docs/environments.md, "Lifecycle commands and the
// environment's log"), with a real engine on the built-in node: a template's `user` runs commands
// and sessions; onCreate, updateContent and postCreate run when the container is made (the object
// form's side by side), postStart when it starts or is claimed (a warm container ran the create
// phases before any lease); one that exits non-zero fails the lease naming it. The log reads through
// REST, GraphQL, the subscription and `berth env logs [-f]`; other organizations get 404, anonymous
// callers 401, and a huge output is cut at the bound.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as pause } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { MAX_ENVIRONMENT_LOG } from '../src/protocol/environment-log';
import { describeContainers, engine, removeOwned, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { runBerth, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';
import type { PollOptions } from './helpers/wait';

const HOME = '/home/builder';
const METRICS_TOKEN = 'lifecycle-metrics-0123456789abcdef';
/** `==> step (time)`: a header line of the log. */
const header = (step: string) => new RegExp(`^==> ${step.replace(/[()]/g, '\\$&')} \\(\\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z\\)$`, 'm');

describeContainers('lifecycle commands and the environment log', () => {
  let s: TestServer;
  let dir: string;
  const admin = client(() => s.url, BOOTSTRAP);
  const anonymous = client(() => s.url);
  /** Environment waits: the server's own timers do the work. */
  const onItsOwn: PollOptions = { timeout: 90_000, between: () => pause(50) };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-lifecycle-'));
    const templates = await writeCatalog(
      dir,
      [
        {
          name: 'asbuilder',
          image: TEST_IMAGE,
          user: 'builder',
          workdir: HOME,
          shares: [{ name: 'src', direction: 'in', envPath: '/workspace/src' }],
        },
        { name: 'ascontainer', image: TEST_IMAGE, containerUser: 'builder', workdir: HOME },
        {
          name: 'life',
          image: TEST_IMAGE,
          user: 'builder',
          workdir: HOME,
          env: { GREETING: 'hello from env' },
          lifecycle: [
            { phase: 'onCreateCommand', argv: ['sh', '-c', 'echo "$GREETING"; id -u; pwd; echo made > made'] },
            { phase: 'updateContentCommand', argv: ['sh', '-c', 'echo "update saw $(cat made)"'] },
            // Side by side: run one after the other, `a` would wait for `b` forever.
            {
              phase: 'postCreateCommand',
              name: 'a',
              argv: ['sh', '-c', 'echo a waits; while [ ! -e b-ran ]; do sleep 0.05; done; echo a saw b'],
            },
            { phase: 'postCreateCommand', name: 'b', argv: ['sh', '-c', 'touch b-ran; echo b ran'] },
            { phase: 'postStartCommand', argv: ['sh', '-c', 'echo started >> starts; echo "postStart $(wc -l < starts)"'] },
          ],
        },
        {
          name: 'fails',
          image: TEST_IMAGE,
          lifecycle: [
            { phase: 'postCreateCommand', argv: ['sh', '-c', 'echo about to fail; echo on stderr >&2; exit 3'] },
            { phase: 'postStartCommand', argv: ['sh', '-c', 'echo never runs'] },
          ],
        },
        {
          name: 'failsnamed',
          image: TEST_IMAGE,
          lifecycle: [
            { phase: 'postCreateCommand', name: 'deps', argv: ['sh', '-c', 'exit 3'] },
            { phase: 'postCreateCommand', name: 'fine', argv: ['true'] },
          ],
        },
        {
          name: 'chatty',
          image: TEST_IMAGE,
          lifecycle: [{ phase: 'postCreateCommand', argv: ['sh', '-c', 'head -c 3000000 /dev/zero | tr "\\0" a; echo; echo the end'] }],
        },
        {
          name: 'stuck',
          image: TEST_IMAGE,
          lifecycle: [{ phase: 'postCreateCommand', argv: ['sh', '-c', 'echo waiting forever; while true; do sleep 1; done'] }],
        },
        {
          name: 'warmlife',
          image: TEST_IMAGE,
          pool: 'warmpool',
          warm: 1,
          user: 'builder',
          workdir: HOME,
          lifecycle: [
            { phase: 'onCreateCommand', argv: ['sh', '-c', 'echo made warm; touch created'] },
            { phase: 'postStartCommand', argv: ['sh', '-c', 'touch poststarted; echo poststart ran'] },
          ],
        },
      ],
      [{ name: 'warmpool', hotNodes: 1, maxQueued: 10 }],
    );
    s = await startServer('pglite', { TEMPLATES_FILE: templates, DOCKER_HOST: engine(), METRICS_TOKEN });
  }, 60_000);

  afterAll(async () => {
    const live = await admin.get('/v1/environments?state=live');
    for (const env of live.body.environments ?? []) await admin.del(`/v1/environments/${env.id}`);
    for (let i = 0; i < 30 && (await admin.get('/v1/environments?state=live')).body.environments?.length; i++) {
      await s.app.deps.background.tick();
    }
    await s?.stop();
    await removeOwned(s.app.deps.builtin.owner);
    await rm(dir, { recursive: true, force: true });
  });

  async function lease(template: string, state = 'ready', token = BOOTSTRAP): Promise<Record<string, any>> {
    const made = await client(() => s.url, token).post('/v1/environments', { template });
    expect(made.status, JSON.stringify(made.body)).toBe(202);
    return untilState(s, BOOTSTRAP, made.body.environment.id, state, onItsOwn);
  }

  async function sh(id: string, script: string): Promise<{ stdout: string; exitCode?: number }> {
    const res = await fetch(`${s.url}/v1/environments/${id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command: ['sh', '-c', script] }),
    });
    let stdout = '';
    let exitCode: number | undefined;
    for (const line of (await res.text()).split('\n').filter(Boolean)) {
      const item = JSON.parse(line);
      if (item.stream === 'stdout') stdout += Buffer.from(item.data, 'base64').toString();
      if (item.exitCode !== undefined) exitCode = item.exitCode;
    }
    return { stdout, exitCode };
  }

  async function logOf(id: string, token = BOOTSTRAP): Promise<{ status: number; type: string | null; text: string }> {
    const res = await fetch(`${s.url}/v1/environments/${id}/log`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
    return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
  }

  it("runs commands and sessions as the template's user, who owns the shares", async () => {
    const env = await lease('asbuilder');
    expect(await sh(env.id, 'id -u; id -g; pwd; touch /workspace/src/mine && ls -n /workspace/src/mine')).toMatchObject({
      exitCode: 0,
      stdout: expect.stringMatching(/^1234\n1234\n\/home\/builder\n.* 1234 +1234 .*mine\n$/),
    });
    // A session goes down the same line to berth-envd.
    const session = await runBerth(['exec', '-i', env.id, '--', 'id', '-un'], { BERTH_URL: s.url, BERTH_TOKEN: BOOTSTRAP });
    expect(session).toMatchObject({ code: 0, stdout: 'builder\n' });
    // Nothing ran at its start: its log is empty.
    expect(await logOf(env.id)).toEqual({ status: 200, type: 'text/plain; charset=utf-8', text: '' });
    // `containerUser` is the container's own user: its first process's, and so its commands'.
    const contained = await lease('ascontainer');
    expect(await sh(contained.id, 'id -u; grep ^Uid /proc/1/status')).toMatchObject({
      exitCode: 0,
      stdout: expect.stringMatching(/^1234\nUid:\s+1234\s/),
    });
  });

  it('runs the create phases in order, the object form side by side, then postStart; the log holds their output', async () => {
    const env = await lease('life');
    const { text } = await logOf(env.id);
    for (const step of ['onCreateCommand', 'updateContentCommand', 'postCreateCommand (a)', 'postCreateCommand (b)', 'postStartCommand']) {
      expect(text).toMatch(header(step));
    }
    // As the user, in the workdir, with the environment's variables.
    expect(text).toMatch(/^==> onCreateCommand \(.*\)\nhello from env\n1234\n\/home\/builder\n/m);
    expect(text).toContain('update saw made\n');
    expect(text).toContain('a saw b\n');
    expect(text).toMatch(/==> postStartCommand \(.*\)\npostStart 1\n$/);
    // Phases in order: every create phase's header before postStart's.
    const at = (step: string) => text.search(header(step));
    expect(at('onCreateCommand')).toBeLessThan(at('updateContentCommand'));
    expect(at('updateContentCommand')).toBeLessThan(at('postCreateCommand (a)'));
    expect(Math.max(at('postCreateCommand (a)'), at('postCreateCommand (b)'))).toBeLessThan(at('postStartCommand'));
    // What they made is there for the environment's commands.
    expect(await sh(env.id, 'cat made starts')).toEqual({ stdout: 'made\nstarted\n', exitCode: 0 });
  });

  it('fails the lease when one exits non-zero, naming it; its output stays in the log and postStart never runs', async () => {
    const failed = await lease('fails', 'failed');
    expect(failed.error).toBe('postCreateCommand exited 3');
    const { text } = await logOf(failed.id);
    expect(text).toMatch(
      /^==> postCreateCommand \(.*\)\n(about to fail\non stderr\n|on stderr\nabout to fail\n)==> berth \(.*\)\npostCreateCommand exited 3\n$/,
    );
    expect(text).not.toContain('never runs');
    const named = await lease('failsnamed', 'failed');
    expect(named.error).toBe('postCreateCommand (deps) exited 3');
    expect((await logOf(named.id)).text).toMatch(header('postCreateCommand (fine)'));
  });

  it('lets a long lifecycle command hold up no other lease: others start and end meanwhile, and it can be stopped', async () => {
    const made = await admin.post('/v1/environments', { template: 'stuck' });
    const stuck = made.body.environment.id as string;
    await vi.waitFor(async () => expect((await logOf(stuck)).text).toContain('waiting forever'), { timeout: 60_000, interval: 100 });
    // While its postCreateCommand runs, another lease starts, is used and ends.
    const other = await lease('ascontainer');
    expect((await sh(other.id, 'echo meanwhile')).stdout).toBe('meanwhile\n');
    expect((await admin.del(`/v1/environments/${other.id}`)).status).toBe(200);
    await untilState(s, BOOTSTRAP, other.id, 'stopped', onItsOwn);
    expect((await admin.get(`/v1/environments/${stuck}`)).body.state).toBe('starting');
    // And the stuck one ends when asked, its command with its container.
    expect((await admin.del(`/v1/environments/${stuck}`)).status).toBe(200);
    await untilState(s, BOOTSTRAP, stuck, 'stopped', onItsOwn);
  });

  it('runs postStart at the claim of a warm container, not before; the create phases ran before any lease', async () => {
    await vi.waitFor(
      async () => {
        const metrics = await (await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).text();
        expect(metrics).toMatch(/^berth_warm_containers\{pool="warmpool",template="warmlife",state="ready"\} 1$/m);
      },
      { timeout: 60_000, interval: 200 },
    );
    const [warm] = (
      await podman('ps', '--filter', 'label=berth.template=warmlife', '--filter', 'label=berth.warm', '--format', '{{.Names}}')
    ).split('\n');
    expect(warm).toMatch(/^berth-warm-/);
    expect((await podman('exec', warm!, 'ls', HOME)).split('\n')).toEqual(['created']);
    const env = await lease('warmlife');
    // It is the warm container, now the environment's; its line runs as the user, as made.
    expect(await sh(env.id, 'ls; id -u')).toEqual({ stdout: 'created\npoststarted\n1234\n', exitCode: 0 });
    // The create phases' output, kept since the container was made, then postStart's.
    expect((await logOf(env.id)).text).toMatch(/^==> onCreateCommand \(.*\)\nmade warm\n==> postStartCommand \(.*\)\npoststart ran\n$/);
  });

  it("runs a devcontainer.json's commands, as its remoteUser", async () => {
    const devcontainer = `{
      // JSONC, as in a repository
      "image": "${TEST_IMAGE}",
      "remoteUser": "builder",
      "workspaceFolder": "${HOME}",
      "postCreateCommand": { "one": "echo one as $(id -un)", "two": ["sh", "-c", "echo two"] },
      "postStartCommand": "echo started in $PWD",
    }`;
    const put = await admin.post('/graphql', {
      query: 'mutation($d: String!) { putTemplate(name: "fromdevcontainer", devcontainer: $d) { status } }',
      variables: { d: devcontainer },
    });
    expect(put.body.data?.putTemplate, JSON.stringify(put.body)).toEqual({ status: 'ready' });
    const env = await lease('fromdevcontainer');
    const { text } = await logOf(env.id);
    // Side by side, each under its own header.
    expect(text).toMatch(/^==> postCreateCommand \(one\) \(.*\)\none as builder\n(==>|$)/m);
    expect(text).toMatch(/^==> postCreateCommand \(two\) \(.*\)\ntwo\n(==>|$)/m);
    expect(text).toMatch(/==> postStartCommand \(.*\)\nstarted in \/home\/builder\n$/);
  });

  it('cuts a huge output at the bound, saying so', async () => {
    const env = await lease('chatty');
    const { text } = await logOf(env.id);
    expect(text).toMatch(/\n\[the log is cut here: it keeps at most 1 MiB\]\n$/);
    expect(text).not.toContain('the end');
    expect(Buffer.byteLength(text)).toBeLessThan(MAX_ENVIRONMENT_LOG + 1024);
    expect(Buffer.byteLength(text)).toBeGreaterThan(MAX_ENVIRONMENT_LOG - 1024);
  });

  it('shows the log to the organization only: another one gets 404, an anonymous caller 401', async () => {
    const env = await lease('life');
    const other = await createOrganization(s.app.deps.prisma, 'lifeother', 'boss@life.example');
    expect((await logOf(env.id, other.secret)).status).toBe(404);
    expect((await logOf(env.id, '')).status).toBe(401);
    const asked = await client(() => s.url, other.secret).post('/graphql', { query: `{ environment(id: "${env.id}") { log } }` });
    expect(asked.body.errors?.[0]?.extensions?.code).toBe('not_found');
    expect((await anonymous.post('/graphql', { query: `{ environment(id: "${env.id}") { log } }` })).status).toBe(401);
  });

  it('reads the same log through GraphQL and `berth env logs`', async () => {
    const env = await lease('life');
    const { text } = await logOf(env.id);
    const asked = await admin.post('/graphql', {
      query: 'query($id: String!) { environment(id: $id) { log } }',
      variables: { id: env.id },
    });
    expect(asked.body.data.environment.log).toBe(text);
    const cli = await runBerth(['env', 'logs', env.name], { BERTH_URL: s.url, BERTH_TOKEN: BOOTSTRAP });
    expect(cli).toMatchObject({ code: 0, stdout: text });
  });

  it('follows the log as it grows, through the subscription and `berth env logs -f`, until the environment ends', async () => {
    const made = await admin.post('/v1/environments', { template: 'life' });
    const id = made.body.environment.id;
    const follower = spawnNode(['bin/berth.js', 'env', 'logs', '-f', id], { BERTH_URL: s.url, BERTH_TOKEN: BOOTSTRAP });
    await follower.waitFor(/postStart 1\n/);
    await untilState(s, BOOTSTRAP, id, 'ready', onItsOwn);
    expect(follower.proc.exitCode).toBeNull();
    await admin.del(`/v1/environments/${id}`);
    expect(await follower.exited).toBe(0);
    expect(follower.output()).toBe((await logOf(id)).text);
  });
});
