// The node API and running commands over GraphQL: what test/nodes.test.ts asserts over REST
// (createNode, nodes, removeNode; the runCommand subscription on the built-in pool).
import { print } from 'graphql';
import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import type { App } from '../src/app/server';
import { createOrganization } from '../src/modules/organizations/service';
import { graphql } from './gql';
import { engine, TEST_IMAGE } from './helpers/containers';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';
import { nextListener } from './helpers/subscriptions';

const CreateNode = graphql(`
  mutation TestCreateNode($input: CreateNodeInput!) {
    createNode(input: $input) { node { id name pool state slots environments createdBy } secret }
  }
`);
const Nodes = graphql(`query TestNodes { nodes { id name pool builtin state slots environments } }`);
/** The organization's own nodes of a `nodes` answer (the built-in node, listed first, is every organization's). */
const own = <T extends { builtin: boolean }>(nodes: T[] | null | undefined) =>
  nodes?.filter((n) => !n.builtin).map(({ builtin: _, ...n }) => n);
const NodesChanged = graphql(`subscription TestNodesChanged { nodesChanged { id name state } }`);
const RemoveNode = graphql(`mutation TestRemoveNode($id: ID!) { removeNode(id: $id) { id name state environments } }`);
const Execs = graphql(`query TestNodeExecs($env: String!) { execs(environment: $env) { id command exitCode actor lease } }`);
const StopEnvironment = graphql(`mutation TestNodeStopEnvironment($id: String!) { stopEnvironment(id: $id) { id state } }`);
const RunCommand = graphql(`
  subscription TestRunCommand($env: String!, $command: [String!]!) {
    runCommand(environment: $env, command: $command) { stream data exitCode exec { id command exitCode actor lease } }
  }
`);

type Events = { data?: Record<string, any> | null; errors?: readonly { message: string; extensions?: Record<string, unknown> }[] }[];

/** Subscribes to runCommand over graphql-ws and collects every payload until the subscription ends. */
async function runCommand(url: string, token: string, env: string, command: string[]): Promise<Events> {
  const ws = createClient({
    url: `${url.replace('http', 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${token}` },
    retryAttempts: 0,
  });
  const events: Events = [];
  try {
    for await (const event of ws.iterate({ query: print(RunCommand), variables: { env, command } })) events.push(event);
  } finally {
    await ws.dispose();
  }
  return events;
}

type NodeEvent = { id: string; name: string; state: string };

/** An organization's node topic on the bus (topics.nodes). */
const NODES = /^org:[^:]+:nodes$/;

/** nodesChanged over graphql-ws: `next()` answers its events in order. */
function watchNodes(url: string, token: string) {
  const ws = createClient({
    url: `${url.replace('http', 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${token}` },
    retryAttempts: 0,
  });
  const events = ws.iterate<{ nodesChanged: NodeEvent }>({ query: print(NodesChanged) });
  return {
    async next(): Promise<NodeEvent> {
      const { value, done } = await events.next();
      if (done || !value.data) throw new Error(`nodesChanged ended: ${JSON.stringify(value?.errors)}`);
      return value.data.nodesChanged;
    },
    close: () => ws.dispose(),
  };
}

const output = (events: Events, stream: string) =>
  events
    .filter((e) => e.data?.runCommand?.stream === stream)
    .map((e) => Buffer.from(e.data!.runCommand.data, 'base64').toString())
    .join('');

describeBackends('nodes and runCommand over GraphQL', (backend) => {
  let s: TestServer;
  let peer: App | undefined;
  let memberKey: string;
  let theirs: string;
  const admin = client(() => s.url, BOOTSTRAP);
  let member: ReturnType<typeof client>;
  let them: ReturnType<typeof client>;
  let node: { id: string; name: string };
  let secret: string;

  beforeAll(async () => {
    s = await startServer(backend, { DOCKER_HOST: engine() || 'none' });
    if (backend === 'postgres') peer = await s.startPeer();
    memberKey = (await admin.post('/v1/keys', { name: 'member-key' })).body.secret;
    theirs = (await createOrganization(s.app.deps.prisma, `gqlnodeother${backend}`, 'boss@other.example')).secret;
    member = client(() => s.url, memberKey);
    them = client(() => s.url, theirs);
  }, 60_000);
  afterAll(() => s?.stop());

  it('createNode: admins only; the same checks and codes as POST /v1/nodes', async () => {
    const created = await admin.gql(CreateNode, { input: { pool: 'large', name: 'Builder-1' } });
    expect(created.body.errors).toBeUndefined();
    const result = created.body.data!.createNode!;
    expect(result.secret).toMatch(/^bnd_[A-Za-z0-9]{43}$/);
    expect(result.node).toMatchObject({
      name: 'builder-1',
      pool: 'large',
      state: 'lost',
      slots: 0,
      environments: [],
      createdBy: 'admin@berth.local',
    });
    ({ node, secret } = result);

    const refused = await member.gql(CreateNode, { input: { pool: 'large', name: 'b4' } });
    expect(refused.body.data?.createNode).toBeNull();
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('forbidden');

    // Each bad input is refused with the code REST gives it (and GraphQL names the field).
    const cases = [
      { input: { pool: 'large', name: 'builder-1' }, extensions: { code: 'name_taken' } },
      { input: { pool: 'nope', name: 'b2' }, extensions: { code: 'invalid', field: 'pool' } },
      { input: { pool: 'large', name: 'not a label' }, extensions: { code: 'invalid', field: 'name' } },
    ];
    for (const { input, extensions } of cases) {
      const gql = await admin.gql(CreateNode, { input });
      expect(gql.body.data?.createNode ?? null, JSON.stringify(input)).toBeNull();
      expect(gql.body.errors?.[0]?.extensions, JSON.stringify(input)).toEqual(extensions);
      expect((await admin.post('/v1/nodes', input)).body.code, JSON.stringify(input)).toBe(extensions.code);
    }
    // Inputs the schema refuses (a missing name, an unknown field) are `invalid` too, as REST's 422.
    for (const input of [{ pool: 'large' }, { pool: 'large', name: 'b3', extra: 1 }]) {
      const gql = await admin.call('POST', '/graphql', { query: print(CreateNode), variables: { input } });
      expect(gql.body.errors?.[0]?.extensions?.code, JSON.stringify(input)).toBe('invalid');
    }
    expect((await admin.gql(Nodes)).body.data?.nodes?.map((n) => n.name)).toEqual(['builtin', 'builder-1']);
  });

  it('nodes: members see the node with its pool, state, slots and environments; another organization sees none', async () => {
    const expected = [{ id: node.id, name: 'builder-1', pool: 'large', state: 'lost', slots: 0, environments: [] }];
    expect(own((await admin.gql(Nodes)).body.data?.nodes)).toEqual(expected);
    expect(own((await member.gql(Nodes)).body.data?.nodes)).toEqual(expected);
    // Another organization sees the built-in node only, with none of this organization's environments on it.
    const theirs = (await them.gql(Nodes)).body.data?.nodes;
    expect(theirs?.map((n) => [n.name, n.builtin, n.environments])).toEqual([['builtin', true, []]]);
    // The node credential is not a member's.
    expect((await client(() => s.url, secret).gql(Nodes)).body.errors?.[0]?.extensions?.code).toBe('forbidden');
  });

  it('removeNode: admins only, unknown to other organizations; drains the node and revokes its credential', async () => {
    expect((await member.gql(RemoveNode, { id: node.id })).body.errors?.[0]?.extensions?.code).toBe('forbidden');
    const foreign = await them.gql(RemoveNode, { id: node.id });
    const unknown = await them.gql(RemoveNode, { id: 'nod_doesnotexist' });
    expect(foreign.body.errors?.[0]).toMatchObject({ message: `node ${node.id} not found`, extensions: { code: 'not_found' } });
    expect(unknown.body.errors?.[0]).toMatchObject({ message: 'node nod_doesnotexist not found', extensions: { code: 'not_found' } });
    expect(own((await admin.gql(Nodes)).body.data?.nodes)?.[0]?.state).toBe('lost');

    const removed = await admin.gql(RemoveNode, { id: node.id });
    expect(removed.body).toEqual({ data: { removeNode: { id: node.id, name: 'builder-1', state: 'draining', environments: [] } } });
    // No live environments on it: revoked at once, gone from the list, its secret no longer accepted.
    expect(own((await admin.gql(Nodes)).body.data?.nodes)).toEqual([]);
    const asNode = await client(() => s.url, secret).gql(Nodes);
    expect(asNode.status).toBe(401);
    expect(asNode.body.errors?.[0]?.extensions?.code).toBe('unauthorized');
    expect((await admin.gql(RemoveNode, { id: node.id })).body.errors?.[0]?.extensions?.code).toBe('not_found');
  });

  it('nodesChanged: members hear each node registered, draining and removed; another organization hears none of them', async () => {
    // Each watch starts once its server's subscription reads the bus: nothing made after is missed.
    let listening = nextListener(s.app.deps, NODES);
    const mine = watchNodes(s.url, memberKey);
    await listening;
    listening = nextListener((peer ?? s.app).deps, NODES);
    const foreign = watchNodes(peer?.url ?? s.url, theirs);
    await listening;
    try {
      const created = (await admin.gql(CreateNode, { input: { pool: 'large', name: 'watched' } })).body.data!.createNode!.node;
      expect(await mine.next()).toEqual({ id: created.id, name: 'watched', state: 'lost' });
      expect((await admin.gql(RemoveNode, { id: created.id })).body.data?.removeNode?.state).toBe('draining');
      // Draining, then removed at once (no live environment on it); the node job may revoke it
      // before removeNode announced it draining.
      const after = [await mine.next(), await mine.next()];
      expect(after.map((e) => e.state).sort()).toEqual(['draining', 'removed']);
      expect(after.every((e) => e.id === created.id && e.name === 'watched')).toBe(true);
      expect(own((await admin.gql(Nodes)).body.data?.nodes)).toEqual([]);

      // Their next event is their own: nothing of this organization reached them in between.
      const marker = (await them.post('/v1/nodes', { pool: 'large', name: 'marker' })).body.node;
      expect(await foreign.next()).toEqual({ id: marker.id, name: 'marker', state: 'lost' });
    } finally {
      await mine.close();
      await foreign.close();
    }
  });

  it('runCommand on the built-in pool streams output and the exit, records the Exec; other organizations are refused', async (ctx) => {
    if (!engine()) ctx.skip();
    const pool = (await admin.get('/v1/templates')).body.templates.find((t: { name: string }) => t.name === 'default').pool;
    const box = { pool, idle: '30m', hard: '1h', image: TEST_IMAGE, workdir: '/tmp' };
    expect((await admin.put('/v1/templates/box', box)).status).toBe(201);
    const env = (await admin.post('/v1/environments', { template: 'box' })).body.environment;
    await untilState(s, BOOTSTRAP, env.id, 'ready');
    // On PostgreSQL through the other instance (both reach the same engine in the test).
    const url = peer?.url ?? s.url;
    const events = await runCommand(url, memberKey, env.id, ['sh', '-c', 'pwd; echo to-stderr >&2; exit 7']);
    expect(events.filter((e) => e.errors)).toEqual([]);
    expect(output(events, 'stdout')).toBe('/tmp\n');
    expect(output(events, 'stderr')).toBe('to-stderr\n');
    const end = events.at(-1)!.data!.runCommand;
    const command = "sh -c 'pwd; echo to-stderr >&2; exit 7'";
    expect(end).toMatchObject({
      stream: null,
      data: null,
      exitCode: 7,
      exec: { command, exitCode: 7, actor: 'member-key', lease: env.id },
    });
    expect(events.slice(0, -1).every((e) => e.data?.runCommand.exitCode === null)).toBe(true);

    const log = (await admin.gql(Execs, { env: env.id })).body.data?.execs;
    expect(log).toEqual([{ id: end.exec.id, command, exitCode: 7, actor: 'member-key', lease: env.id }]);

    // Another organization's member is told what it would be told of an environment that does not exist.
    const foreign = await runCommand(s.url, theirs, env.id, ['true']);
    const missing = await runCommand(s.url, theirs, 'env_doesnotexist', ['true']);
    expect(foreign).toEqual([{ errors: [expect.objectContaining({ message: `environment ${env.id} not found` })] }]);
    expect(foreign[0]!.errors![0]!.extensions).toEqual(missing[0]!.errors![0]!.extensions);
    expect(missing[0]!.errors![0]!).toMatchObject({ message: 'environment env_doesnotexist not found', extensions: { code: 'not_found' } });
    expect((await runCommand(s.url, memberKey, env.id, []))[0]!.errors?.[0]?.extensions?.code).toBe('invalid');
    expect((await admin.gql(Execs, { env: env.id })).body.data?.execs).toHaveLength(1);

    await admin.gql(StopEnvironment, { id: env.id });
    await untilState(s, BOOTSTRAP, env.id, 'stopped');
    expect((await runCommand(s.url, memberKey, env.id, ['true']))[0]!.errors?.[0]?.extensions?.code).toBe('invalid_transition');
  });
  it("reads a list's warm containers in one query, not one per node", async () => {
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await admin.post('/v1/nodes', { pool: 'large', name: `warm-list-${i}` })).body.node.id);
    const findMany = vi.spyOn(s.app.deps.prisma.node, 'findMany');
    try {
      const listed = await admin.post('/graphql', { query: 'query { nodes { id warm { slot template state } } }' });
      expect(listed.body.errors).toBeUndefined();
      const nodes = listed.body.data.nodes as { id: string; warm: unknown[] }[];
      for (const id of made) expect(nodes.find((n) => n.id === id)?.warm).toEqual([]);
      const warmQueries = findMany.mock.calls.filter(([args]) => JSON.stringify(args?.where ?? {}).includes('warmState'));
      expect(warmQueries).toHaveLength(1);
    } finally {
      findMany.mockRestore();
    }
    for (const id of made) await admin.del(`/v1/nodes/${id}`);
  });
});
