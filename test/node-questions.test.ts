// A question to a node that is in flight when the server stops (docs/agents.md, "Control channel"):
// the stop does not wait for the node's answer, the environment is not failed for it, and the next
// start asks again at once, so a restart loses nothing. The node is a stand-in on the control
// channel that answers only when the test says.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { nodeChannel } from './helpers/node-channel';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';
import { reaches } from './helpers/states';
import { poll } from './helpers/wait';

const CATALOG = {
  pools: [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
  templates: [{ name: 'remote', pool: 'remote', startMs: 0, idle: '30m', hard: '1h', shares: [], services: [] }],
};

let s: TestServer;
let dir: string;
const admin = client(() => s.url, BOOTSTRAP);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-questions-'));
  const templates = join(dir, 'templates.json');
  await writeFile(templates, JSON.stringify(CATALOG));
  // A node not heard from stays online for a minute: only the stop can end the question early.
  s = await startServer('pglite', { TEMPLATES_FILE: templates, DOCKER_HOST: 'none', NODE_LOST_MS: '60000' });
}, 60_000);
afterAll(async () => {
  await s?.stop();
  await rm(dir, { recursive: true, force: true });
});

/** A stand-in node, said hello and heartbeating; its messages from the server, in order. */
async function standIn(secret: string, environments: string[] = []) {
  const stand = await nodeChannel(s.url, secret);
  stand.send({ type: 'hello', slots: 1, environments });
  expect(await stand.next()).toMatchObject({ type: 'welcome' });
  const heartbeat = setInterval(() => stand.send({ type: 'heartbeat' }), 500);
  stand.ws.once('close', () => clearInterval(heartbeat));
  /** The next message of `type`, skipping others. */
  const nextOf = async (type: string) => {
    for (;;) {
      const message = await stand.next();
      if (message.type === type) return message;
    }
  };
  return { ...stand, nextOf };
}

it('a restart leaves an unanswered prepare to the next start, which asks again: nothing fails', async () => {
  const { secret } = (await admin.post('/v1/nodes', { pool: 'remote', name: 'slow' })).body;
  const first = await standIn(secret);
  const id = (await admin.post('/v1/environments', { template: 'remote' })).body.environment.id as string;
  // Asked, and not answered.
  expect(await first.nextOf('prepare')).toMatchObject({ environment: { id } });

  await s.restart();
  expect((await admin.get(`/v1/environments/${id}`)).body.state).toBe('starting');
  // The stopped instance closed the node's channel; the node connects again, holding what it was
  // asked to prepare (as berth node does), and is asked again.
  const second = await standIn(secret, [id]);
  const asked = await second.nextOf('prepare');
  expect(asked).toMatchObject({ environment: { id } });
  second.send({ type: 'reply', reply: asked.reply, runtime: 'files' });
  const ready = await reaches(s.url, BOOTSTRAP, id, 'ready');
  expect(ready).toMatchObject({ node: 'slow' });
  expect(ready.error).toBeUndefined();
  await poll('the first channel to be closed by the stop', async () => (first.ws.readyState === first.ws.CLOSED ? true : undefined));
  second.ws.close();
});
