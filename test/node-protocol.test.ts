// The node control channel's messages (src/protocol/node-channel.ts): what each end builds passes
// the other end's schema, and what is out of bounds or unknown is refused, on its own and through
// a real channel, where a bad frame is answered with an `error` frame and nothing else changes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DomainError, ValidationError } from '../src/kernel/errors';
import { EXEC_CHUNK, execOutput, MAX_SLOTS } from '../src/protocol/dataplane';
import { ENV_LOG_PIECE } from '../src/protocol/environment-log';
import { type NodeToServer, parseNodeToServer, parseServerToNode, type ServerToNode } from '../src/protocol/node-channel';
import { nodeChannel } from './helpers/node-channel';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const RUN = '0f8e4a52-3c1b-4d7e-9a6f-2b5c8d1e0a37';
const REPLY = `node-reply:${RUN}`;
const SPEC = {
  name: 'quiet-otter',
  orgId: 'org_1',
  template: 'build',
  shares: [{ name: 'src', envPath: '/workspace/src' }],
  image: 'docker.io/library/alpine:3.20',
  resources: { cpus: 1.5, memory: '2GiB', pids: 256, disk: '1GiB' },
  network: 'egress' as const,
  workdir: '/workspace',
  env: { CI: '1' },
  user: 'builder',
  containerUser: '1000:1000',
  lifecycle: [
    { phase: 'onCreateCommand' as const, argv: ['/bin/sh', '-c', 'make deps'] },
    { phase: 'postStartCommand' as const, name: 'db', argv: ['pg_ctl', 'start'] },
  ],
};
const RULES = { include: ['src/**'], noIgnore: false, files: { 'a.txt': 'b.txt' } };

/** Every message a node agent sends (src/agent/node-agent.ts builds these shapes). */
const fromNode: NodeToServer[] = [
  { type: 'hello', slots: 2, environments: ['env_abc'], capacity: { cpus: 8, memory: 16 * 1024 ** 3 } },
  { type: 'hello', slots: MAX_SLOTS, environments: [], leaving: true },
  { type: 'heartbeat' },
  { type: 'leaving' },
  { type: 'reply', reply: REPLY, runtime: 'container' },
  { type: 'reply', reply: REPLY },
  { type: 'reply', reply: REPLY, error: 'the node is shutting down' },
  { type: 'reply', reply: REPLY, error: 'postCreateCommand (deps) exited 3', fault: 'environment' },
  { type: 'env-log', environment: 'env_abc', step: 'postCreateCommand (deps)', text: 'installing…\n', at: new Date().toISOString() },
  { type: 'env-log', environment: 'env_abc', step: 'berth', text: 'x'.repeat(ENV_LOG_PIECE) },
  { type: 'ended', environment: 'env_abc', reason: 'its main process exited with 1' },
  { type: 'usage', environment: 'env_abc', sample: { cpu: 0.5, memory: 1024, pids: 3, disk: 4096 } },
  { type: 'usage', environment: 'env_abc', sample: { cpu: null, memory: null, pids: null, disk: 0 } },
  ...[...execOutput('stdout', Buffer.alloc(EXEC_CHUNK + 1, 7))].map((e) => ({ ...e, exec: RUN })),
  { type: 'exec-exit', exec: RUN, exitCode: 137 },
  { type: 'exec-input-credit', exec: RUN, bytes: EXEC_CHUNK },
  { type: 'warm-ready', slot: 'nod_1-1', since: new Date().toISOString() },
  { type: 'warm-failed', slot: 'nod_1-1', since: new Date().toISOString(), error: 'pull access denied' },
  { type: 'warm-held', slots: [{ slot: 'nod_1-1', since: new Date().toISOString() }] },
  {
    type: 'hello',
    slots: 1,
    environments: [],
    engine: 'unix:///run/podman/podman.sock',
    engineError: 'the container engine … does not answer',
  },
  { type: 'engine', error: 'the container engine unix:///run/podman/podman.sock does not answer: connect ENOENT' },
  { type: 'engine', error: null },
  { type: 'images-held', images: ['docker.io/library/node:22', 'localhost/berth-test/busybox:1'] },
  { type: 'images-held', images: [] },
];

/** Every message the server sends a node (the channel's own answers, sendToNode's and askNode's). */
const toNode: ServerToNode[] = [
  {
    type: 'welcome',
    node: { id: 'nod_1', name: 'builder', pool: 'remote' },
    heartbeatMs: 5000,
    usageSampleMs: 5000,
    environments: ['env_abc'],
    images: ['docker.io/library/alpine:3.20'],
  },
  { type: 'images', images: ['docker.io/library/alpine:3.20'] },
  { type: 'hello-again' },
  { type: 'drained' },
  { type: 'error', error: 'slots: must be an integer from 1 to 64', code: 'invalid' },
  { type: 'prepare', reply: REPLY, environment: { id: 'env_abc', ...SPEC } },
  {
    type: 'prepare',
    reply: REPLY,
    environment: { id: 'env_abc', ...SPEC, image: null, warm: { slot: 'nod_1-1', hash: 'h', claim: true } },
  },
  {
    type: 'release',
    reply: REPLY,
    environment: { id: 'env_abc', snapshot: true, saved: ['src'], shares: [{ name: 'src', envPath: '/workspace/src', rules: RULES }] },
  },
  { type: 'discard', environment: { id: 'env_abc' } },
  { type: 'exec', exec: RUN, environment: { id: 'env_abc' }, argv: ['sh', '-c', 'pwd'], workdir: '/workspace' },
  { type: 'exec', exec: RUN, environment: { id: 'env_abc' }, argv: ['sh'], workdir: '/', session: { tty: { rows: 24, cols: 80 } } },
  { type: 'exec-kill', exec: RUN },
  { type: 'exec-credit', exec: RUN, bytes: 256 * 1024 },
  { type: 'exec-input', exec: RUN, data: Buffer.from('ls\n').toString('base64') },
  { type: 'exec-input-end', exec: RUN },
  { type: 'exec-resize', exec: RUN, rows: 50, cols: 200 },
  {
    type: 'relay',
    relay: RUN,
    url: `ws://berth/v1/relay/node?relay=${RUN}`,
    job: { kind: 'import', environment: 'env_abc', service: 'db', port: 5432 },
  },
  {
    type: 'relay',
    relay: RUN,
    url: `ws://berth/v1/relay/node?relay=${RUN}`,
    job: { kind: 'share', environment: 'env_abc', share: 'out', direction: 'out', envPath: '/workspace/out', sync: RULES, final: true },
  },
  {
    type: 'warm',
    // A template's spec, as warmEnvironmentSpec makes it, and its slot.
    warm: {
      ...SPEC,
      slot: 'nod_1-1',
      pool: 'remote',
      hash: 'h',
      since: new Date().toISOString(),
    },
  },
  { type: 'warm-drop', slot: 'nod_1-1' },
];

/** What a refused frame is: its code and the start of its message. */
function refusal(parse: (value: unknown) => unknown, value: unknown): { code: string; message: string } {
  try {
    parse(value);
  } catch (error) {
    if (error instanceof DomainError) return { code: error.code, message: error.message };
    throw error;
  }
  throw new Error(`accepted ${JSON.stringify(value)}`);
}

describe('node channel schemas', () => {
  it('accept every message either end builds, as it is', () => {
    for (const message of fromNode) expect(parseNodeToServer(JSON.parse(JSON.stringify(message)))).toEqual(message);
    for (const message of toNode) expect(parseServerToNode(JSON.parse(JSON.stringify(message)))).toEqual(message);
  });

  it('refuse a type the direction has not, as a bad request', () => {
    for (const value of [{ type: 'bogus' }, {}, { type: 7 }, { type: 'welcome' }]) {
      expect(refusal(parseNodeToServer, value)).toMatchObject({
        code: 'bad_request',
        message: expect.stringMatching(/^unknown message type /),
      });
    }
    expect(refusal(parseServerToNode, { type: 'hello', slots: 1, environments: [] })).toMatchObject({ code: 'bad_request' });
  });

  it('refuse a field out of bounds, naming it', () => {
    const hello = { type: 'hello', slots: 1, environments: [] };
    const bad: [unknown, string][] = [
      [{ ...hello, slots: 0 }, 'slots'],
      [{ ...hello, slots: MAX_SLOTS + 1 }, 'slots'],
      [{ ...hello, slots: 1.5 }, 'slots'],
      [{ ...hello, environments: 'env_abc' }, 'environments'],
      [{ ...hello, environments: Array.from({ length: 1001 }, (_, i) => `env_${i}`) }, 'environments'],
      [{ ...hello, environments: [42] }, 'environments.0'],
      [{ ...hello, leaving: 'yes' }, 'leaving'],
      [{ ...hello, capacity: { cpus: 0, memory: 1 } }, 'capacity.cpus'],
      [{ ...hello, capacity: { cpus: 1, memory: 2 ** 60 } }, 'capacity.memory'],
      [{ ...hello, capacity: { cpus: 1, memory: 1, warm: 1 } }, 'capacity'],
      [{ type: 'reply', reply: 'org:1:nodes' }, 'reply'],
      [{ type: 'reply', reply: REPLY, error: 'x'.repeat(10_001) }, 'error'],
      [{ type: 'ended', environment: 'env_abc', reason: '' }, 'reason'],
      [{ type: 'ended', environment: 'env_abc', reason: 'x'.repeat(501) }, 'reason'],
      [{ type: 'usage', environment: 'x'.repeat(101), sample: { cpu: 0, memory: 0, pids: 0, disk: 0 } }, 'environment'],
      [{ type: 'usage', environment: 'env_abc', sample: { cpu: -1, memory: 0, pids: 0, disk: 0 } }, 'sample.cpu'],
      [{ type: 'usage', environment: 'env_abc', sample: { cpu: 0, memory: 0, pids: 0, disk: 0, extra: 1 } }, 'sample'],
      [{ type: 'exec-output', exec: 'another-node-s-run', stream: 'stdout', data: '' }, 'exec'],
      [{ type: 'exec-output', exec: RUN, stream: 'stdin', data: '' }, 'stream'],
      [{ type: 'exec-output', exec: RUN, stream: 'stdout', data: 'A'.repeat(8000) }, 'data'],
      [{ type: 'exec-exit', exec: RUN, exitCode: 2 ** 31 }, 'exitCode'],
      [{ type: 'exec-input-credit', exec: RUN, bytes: EXEC_CHUNK + 1 }, 'bytes'],
      [{ type: 'warm-ready', slot: 'nod_1-1', since: 'yesterday' }, 'since'],
      [{ type: 'warm-ready', slot: 'x'.repeat(201), since: new Date().toISOString() }, 'slot'],
      [{ type: 'warm-held', slots: Array.from({ length: 10_001 }, () => ({ slot: 's', since: 't' })) }, 'slots'],
      [{ ...hello, engineError: 'x'.repeat(10_001) }, 'engineError'],
      [{ type: 'engine', error: 'x'.repeat(10_001) }, 'error'],
      [{ type: 'engine' }, 'error'],
      [{ type: 'images-held', images: Array.from({ length: 21 }, (_, i) => `img${i}`) }, 'images'],
      [{ type: 'images-held', images: ['x'.repeat(256)] }, 'images.0'],
      [{ type: 'env-log', environment: 'env_abc', step: 'berth', text: 'x'.repeat(ENV_LOG_PIECE + 1) }, 'text'],
      [{ type: 'env-log', environment: 'env_abc', step: 'x'.repeat(201), text: '' }, 'step'],
      [{ type: 'env-log', environment: 'env_abc', step: 'berth', text: '', at: 'soon' }, 'at'],
      [{ type: 'reply', reply: REPLY, error: 'x', fault: 'node' }, 'fault'],
    ];
    for (const [value, field] of bad) {
      const refused = refusal(parseNodeToServer, value);
      expect(refused.code, JSON.stringify(value).slice(0, 200)).toBe('invalid');
      expect(refused.message).toMatch(new RegExp(`^${field.replace('.', '\\.')}: `));
    }
    expect(() => parseNodeToServer({ ...hello, slots: 0 })).toThrow(ValidationError);
    // The agent refuses what no server sends.
    expect(refusal(parseServerToNode, { type: 'exec-resize', exec: RUN, rows: 0, cols: 80 }).code).toBe('invalid');
    expect(refusal(parseServerToNode, { type: 'exec', exec: RUN, environment: { id: 'env_abc' }, argv: [], workdir: '/' }).code).toBe(
      'invalid',
    );
    // Lifecycle commands of the phases a node runs only, each naming a program.
    for (const lifecycle of [[{ phase: 'preBuild', argv: ['make'] }], [{ phase: 'postStartCommand', argv: [] }]]) {
      const prepare = { type: 'prepare', reply: REPLY, environment: { id: 'env_abc', ...SPEC, lifecycle } };
      expect(refusal(parseServerToNode, prepare)).toMatchObject({
        code: 'invalid',
        message: expect.stringMatching(/^environment\.lifecycle\.0\./),
      });
    }
    // Sync rules carry validated include patterns only (the sandbox configuration's share the schema).
    const relay = toNode.find((m) => m.type === 'relay' && m.job.kind === 'share')!;
    const share = { ...relay, job: { ...(relay as { job: object }).job, sync: { ...RULES, include: ['src/**', ''] } } };
    const empty = refusal(parseServerToNode, share);
    expect(empty.code).toBe('invalid');
    expect(empty.message).toMatch(/^job\.sync\.include\.1: /);
  });
});

describeBackends('node channel abuse', (backend) => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend);
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
  });

  /** A stand-in node on the control channel, registered under `name`. */
  async function channel(name: string) {
    const { secret } = (await admin.post('/v1/nodes', { pool: 'default', name })).body;
    return nodeChannel(s.url, secret);
  }

  it('answers a frame that is not the protocol with an error frame; the node and the others go on', async () => {
    const bad = await channel(`abuser-${backend}`);
    const good = await channel(`bystander-${backend}`);
    try {
      bad.send({ type: 'hello', slots: 1, environments: [] });
      expect(await bad.next()).toMatchObject({ type: 'welcome' });
      const frames: [unknown, Record<string, unknown>][] = [
        [{ type: 'bogus' }, { code: 'bad_request', error: 'unknown message type "bogus"' }],
        [{ slots: 1 }, { code: 'bad_request', error: 'unknown message type undefined' }],
        ['[1, 2]', { code: 'bad_request', error: 'every frame must be one JSON object with a type' }],
        ['not json', { code: 'bad_request' }],
        [
          { type: 'hello', slots: 0, environments: [] },
          { code: 'invalid', error: expect.stringMatching(/^slots: /) },
        ],
        [
          { type: 'reply', reply: `node:${RUN}` },
          { code: 'invalid', error: expect.stringMatching(/^reply: /) },
        ],
        [
          { type: 'exec-exit', exec: 'someone-else', exitCode: 0 },
          { code: 'invalid', error: expect.stringMatching(/^exec: /) },
        ],
        [
          { type: 'ended', environment: 'env_abc', reason: 7 },
          { code: 'invalid', error: expect.stringMatching(/^reason: /) },
        ],
        [
          { type: 'warm-failed', slot: 'x', since: 'never' },
          { code: 'invalid', error: expect.stringMatching(/^since: /) },
        ],
      ];
      for (const [frame, answer] of frames) {
        bad.send(frame);
        expect(await bad.next()).toMatchObject({ type: 'error', ...answer });
      }
      // The refused hello changed nothing: the node still has the one slot it said it had.
      const nodes = (await admin.get('/v1/nodes')).body.nodes as { name: string; state: string; slots: number }[];
      expect(nodes.find((n) => n.name === `abuser-${backend}`)).toMatchObject({ state: 'online', slots: 1 });
      // The same channel still serves, and another node's never heard of any of it.
      bad.send({ type: 'hello', slots: 2, environments: [] });
      expect(await bad.next()).toMatchObject({ type: 'welcome' });
      good.send({ type: 'hello', slots: 1, environments: [] });
      expect(await good.next()).toMatchObject({ type: 'welcome', node: { name: `bystander-${backend}` } });
    } finally {
      bad.ws.close();
      good.ws.close();
    }
  });
});
