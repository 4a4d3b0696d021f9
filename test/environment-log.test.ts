// The environment's log as the server keeps it (docs/environments.md, "Lifecycle commands and the
// environment's log"), fed by a stand-in node on the control channel, so each piece arrives exactly
// when the test says: pieces are stored as they come and reach followers (server-sent events and
// graphql-ws) at once; a node writes only the logs of the environments on it; the server keeps at
// most MAX_ENVIRONMENT_LOG whatever a node sends; a failed lifecycle command is the lease's error as
// the node said it; a log goes a week after its environment ended.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Client, createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import { eventPruneJob } from '../src/modules/environments';
import { createOrganization } from '../src/modules/organizations/service';
import { ENV_LOG_PIECE, MAX_ENVIRONMENT_LOG } from '../src/protocol/environment-log';
import { nodeChannel } from './helpers/node-channel';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';
import { poll } from './helpers/wait';

const CATALOG = {
  pools: [
    { name: 'remote', hotNodes: 0, maxQueued: 10 },
    { name: 'elsewhere', hotNodes: 0, maxQueued: 10 },
  ],
  templates: [{ name: 'remote', pool: 'remote', startMs: 0, idle: '30m', hard: '1h', shares: [], services: [] }],
};
const LOG = 'query($id: String!) { environment(id: $id) { log } }';
const FOLLOW = 'subscription($id: String!, $after: String) { environmentLog(id: $id, after: $after) { text cursor } }';

describeBackends("an environment's log", (backend) => {
  let s: TestServer;
  let dir: string;
  let ws: Client;
  /** The remote pool's one node: every lease of the suite is placed on it. */
  let node: Awaited<ReturnType<typeof standIn>>;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-envlog-'));
    const templates = join(dir, 'templates.json');
    await writeFile(templates, JSON.stringify(CATALOG));
    s = await startServer(backend, { TEMPLATES_FILE: templates, DOCKER_HOST: 'none', NODE_LOST_MS: '60000' });
    ws = createClient({
      url: `${s.url.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${BOOTSTRAP}` },
      retryAttempts: 0,
    });
    node = await standIn('shared');
  }, 60_000);
  afterAll(async () => {
    node?.ws.close();
    await ws?.dispose();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** A stand-in node of `pool`, said hello and heartbeating. */
  async function standIn(name: string, pool = 'remote') {
    const { secret } = (await admin.post('/v1/nodes', { pool, name: `${name}-${backend}` })).body;
    const stand = await nodeChannel(s.url, secret);
    stand.send({ type: 'hello', slots: 16, environments: [], capacity: { cpus: 64, memory: 2 ** 40 } });
    expect(await stand.next()).toMatchObject({ type: 'welcome' });
    const heartbeat = setInterval(() => stand.send({ type: 'heartbeat' }), 500);
    stand.ws.once('close', () => clearInterval(heartbeat));
    /** The next message of `type` (about environment `id`), skipping others (prepares asked again of the others). */
    const nextOf = async (type: string, id?: string) => {
      for (;;) {
        const message = (await stand.next()) as Record<string, any>;
        if (message.type === type && (id === undefined || message.environment?.id === id)) return message;
      }
    };
    return { ...stand, nextOf };
  }

  /**
   * A lease placed on `node`, asked to prepare there and not answered yet (each test answers: the
   * environment job asks the next prepare once the ones under way are answered).
   */
  async function placed() {
    const id = (await admin.post('/v1/environments', { template: 'remote' })).body.environment.id as string;
    const asked = await node.nextOf('prepare', id);
    expect(asked.environment).toMatchObject({ id, lifecycle: [] });
    return { id, reply: asked.reply as string };
  }

  const logText = async (id: string, token = BOOTSTRAP) => {
    const res = await fetch(`${s.url}/v1/environments/${id}/log`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
    return { status: res.status, text: await res.text() };
  };

  /** Follows the log over server-sent events: the response comes once the subscription listens. */
  async function follow(id: string, token = BOOTSTRAP, after?: string) {
    const res = await fetch(`${s.url}/graphql`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: FOLLOW, variables: { id, after } }),
    });
    const parts: { text: string; cursor: string }[] = [];
    const errors: { message: string; extensions?: { code?: string } }[] = [];
    let wake: () => void = () => undefined;
    const ended = (async () => {
      const decoder = new TextDecoder();
      let buffer = '';
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          const data = buffer
            .slice(0, end)
            .split('\n')
            .find((line) => line.startsWith('data:'));
          buffer = buffer.slice(end + 2);
          const payload = data && data.length > 5 ? JSON.parse(data.slice(5)) : undefined;
          if (payload?.data?.environmentLog) parts.push(payload.data.environmentLog);
          if (payload?.errors) errors.push(...payload.errors);
          wake();
        }
      }
      wake();
    })();
    return {
      status: res.status,
      parts,
      errors,
      ended,
      text: () => parts.map((p) => p.text).join(''),
      async until(test: (text: string) => boolean) {
        while (!test(parts.map((p) => p.text).join(''))) await new Promise<void>((resolve) => (wake = resolve));
      },
    };
  }

  it('keeps what the node sends as it comes, under a header per command, and followers see it at once', async () => {
    const { id, reply } = await placed();
    expect(await logText(id)).toEqual({ status: 200, text: '' });
    const sse = await follow(id);
    expect(sse.status).toBe(200);
    // A first part, empty: the follower knows it follows.
    await sse.until(() => sse.parts.length > 0);
    expect(sse.parts).toEqual([{ text: '', cursor: '0' }]);
    const overWs: string[] = [];
    const wsDone = new Promise<void>((resolve, reject) =>
      ws.subscribe<{ environmentLog: { text: string } }>(
        { query: FOLLOW, variables: { id } },
        { next: ({ data }) => void overWs.push(data!.environmentLog.text), error: reject, complete: resolve },
      ),
    );
    const at = new Date(Date.now() - 5000).toISOString();
    node.send({ type: 'env-log', environment: id, step: 'onCreateCommand', text: '', at });
    node.send({ type: 'env-log', environment: id, step: 'onCreateCommand', text: 'step one\n', at });
    await sse.until((text) => text.includes('step one\n'));
    expect(sse.text()).toBe(`==> onCreateCommand (${at})\nstep one\n`);
    const cursor = sse.parts.at(-1)!.cursor;
    // A line cut short gets its end before the next header; the same step goes on without one.
    node.send({ type: 'env-log', environment: id, step: 'postCreateCommand (a)', text: 'no newline' });
    node.send({ type: 'env-log', environment: id, step: 'postCreateCommand (b)', text: 'b\n' });
    node.send({ type: 'env-log', environment: id, step: 'postCreateCommand (b)', text: 'b again\n' });
    await sse.until((text) => text.includes('b again'));
    const whole = (await logText(id)).text;
    expect(whole).toMatch(
      /^==> onCreateCommand \(.+\)\nstep one\n==> postCreateCommand \(a\) \(.+\)\nno newline\n==> postCreateCommand \(b\) \(.+\)\nb\nb again\n$/,
    );
    expect(sse.text()).toBe(whole);
    expect((await admin.post('/graphql', { query: LOG, variables: { id } })).body.data.environment.log).toBe(whole);
    // A node's clock ahead of the server's is not believed.
    node.send({ type: 'env-log', environment: id, step: 'postStartCommand', text: 'late\n', at: '2999-01-01T00:00:00.000Z' });
    await sse.until((text) => text.includes('late'));
    expect(sse.text()).not.toContain('2999');
    // A follower from a cursor gets only what came after it.
    const later = await follow(id, BOOTSTRAP, cursor);
    await later.until((text) => text.includes('late'));
    const now = (await logText(id)).text;
    expect(later.text()).toBe(now.slice(now.indexOf('==> postCreateCommand (a)')));
    // The environment ends: the followers complete with the whole log.
    node.send({ type: 'reply', reply, runtime: 'files' });
    await reaches(s.url, BOOTSTRAP, id, 'ready');
    await admin.del(`/v1/environments/${id}`);
    await node.nextOf('release', id).then((m) => node.send({ type: 'reply', reply: m.reply }));
    await Promise.all([sse.ended, later.ended, wsDone]);
    expect(overWs.join('')).toBe((await logText(id)).text);
    // Nothing is stored once it ended.
    node.send({ type: 'env-log', environment: id, step: 'berth', text: 'too late\n' });
    node.send({ type: 'heartbeat' });
    expect((await logText(id)).text).not.toContain('too late');
    // A follower of an ended environment gets the log and completes.
    const after = await follow(id);
    await after.ended;
    expect(after.text()).toBe((await logText(id)).text);
  });

  it("refuses a node's piece of an environment not on it; nothing is stored", async () => {
    // Of another pool: no lease of the suite goes to it.
    const other = await standIn('intruder', 'elsewhere');
    const { id, reply } = await placed();
    other.send({ type: 'env-log', environment: id, step: 'onCreateCommand', text: 'forged\n' });
    expect(await other.nextOf('error')).toMatchObject({
      code: 'forbidden',
      error: expect.stringContaining('only the logs of the environments'),
    });
    other.send({ type: 'env-log', environment: 'env_nosuchone', step: 'onCreateCommand', text: 'forged\n' });
    expect(await other.nextOf('error')).toMatchObject({ code: 'forbidden' });
    expect(await logText(id)).toEqual({ status: 200, text: '' });
    other.ws.close();
    node.send({ type: 'reply', reply, runtime: 'files' });
  });

  it('keeps at most MAX_ENVIRONMENT_LOG of text whatever the node sends, saying where it was cut', async () => {
    const { id, reply } = await placed();
    const piece = `${'x'.repeat(ENV_LOG_PIECE - 1)}\n`;
    const pieces = Math.ceil((MAX_ENVIRONMENT_LOG * 1.5) / piece.length);
    for (let i = 0; i < pieces; i++) node.send({ type: 'env-log', environment: id, step: 'postCreateCommand', text: piece });
    node.send({ type: 'env-log', environment: id, step: 'postStartCommand', text: 'after the cut\n' });
    // The channel takes a node's messages in order: once this one is answered, all before it were stored.
    node.send({ type: 'bogus' });
    await node.nextOf('error');
    const { text } = await logText(id);
    expect(text).toMatch(/\n\[the log is cut here: it keeps at most 1 MiB\]\n$/);
    expect(text).not.toContain('after the cut');
    expect(Buffer.byteLength(text)).toBeLessThan(MAX_ENVIRONMENT_LOG + 200);
    node.send({ type: 'reply', reply, runtime: 'files' });
  });

  it("fails the lease with the error a failed lifecycle command gave, as it is; a node fault stays the node's", async () => {
    const own = await placed();
    node.send({ type: 'reply', reply: own.reply, error: 'postCreateCommand (deps) exited 3', fault: 'environment' });
    expect(await reaches(s.url, BOOTSTRAP, own.id, 'failed')).toMatchObject({ error: 'postCreateCommand (deps) exited 3' });
    const broken = await placed();
    node.send({ type: 'reply', reply: broken.reply, error: 'cannot pull image x' });
    expect(await reaches(s.url, BOOTSTRAP, broken.id, 'failed')).toMatchObject({
      error: `node shared-${backend} could not prepare the environment: cannot pull image x`,
    });
  });

  it('shows it to the organization only, and not to anonymous callers', async () => {
    const { id, reply } = await placed();
    node.send({ type: 'env-log', environment: id, step: 'onCreateCommand', text: 'secret\n' });
    await poll('the piece to be stored', async () => ((await logText(id)).text.includes('secret') ? true : undefined));
    const other = await createOrganization(s.app.deps.prisma, `logother${backend}`, `boss@logother-${backend}.example`);
    expect(await logText(id, other.secret)).toMatchObject({ status: 404 });
    expect(await logText(id, '')).toMatchObject({ status: 401 });
    const theirs = await client(() => s.url, other.secret).post('/graphql', { query: LOG, variables: { id } });
    expect(theirs.body.errors[0].extensions.code).toBe('not_found');
    const followed = await follow(id, other.secret);
    await followed.ended;
    expect(followed.parts).toEqual([]);
    expect(followed.errors[0]?.extensions?.code).toBe('not_found');
    expect(
      (
        await fetch(`${s.url}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ query: FOLLOW, variables: { id } }),
        })
      ).status,
    ).toBe(401);
    const bad = await follow(id, BOOTSTRAP, 'nope');
    await bad.ended;
    expect(bad.errors[0]).toMatchObject({ message: expect.stringContaining('after:'), extensions: { code: 'invalid' } });
    node.send({ type: 'reply', reply, runtime: 'files' });
  });

  it('deletes a log a week after its environment ended', async () => {
    const { id, reply } = await placed();
    node.send({ type: 'env-log', environment: id, step: 'onCreateCommand', text: 'kept a while\n' });
    node.send({ type: 'reply', reply, runtime: 'files' });
    await reaches(s.url, BOOTSTRAP, id, 'ready');
    await admin.del(`/v1/environments/${id}`);
    await node.nextOf('release', id).then((m) => node.send({ type: 'reply', reply: m.reply }));
    await reaches(s.url, BOOTSTRAP, id, 'stopped');
    // The pruning job alone (a whole tick a week on would end the other leases, asking the stand-in to release them).
    await eventPruneJob.run(s.app.deps);
    expect((await logText(id)).text).toContain('kept a while');
    s.clock.advance(8 * 24 * 60 * 60 * 1000);
    await eventPruneJob.run(s.app.deps);
    expect(await logText(id)).toEqual({ status: 200, text: '' });
  });
});
