// The suites that run `berth agent` as a process, in one file so that they never run at the same
// time: an agent binds its sandbox's service ports on this machine's loopback (10000 + the target
// port: 17000 and 15432 in both), and two at once would take each other's ports.
//
// `berth agent` against Berth, both as real processes on loopback (docs/agents.md): join and the
// stored credential, imports forwarding a real TCP service, in-share sync by the sync rules and a
// later edit, the out share's last pass before `stopped`, resuming after a kill and after the server
// restarts, a tunnel's far end closed when the agent is killed or the client drops it mid-transfer,
// exit on removal.
// Runs on PGlite with one Berth, and on PostgreSQL (TEST_DATABASE_URL) with two Berth instances:
// the lease made on one, the agent connected to the other.
import { randomBytes } from 'node:crypto';
import { readlinkSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { MUX_STREAMS } from '../src/dataplane/relay-mux';
import { containersOf, describeContainers, engine, TEST_ECHO_IMAGE } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import {
  answers,
  argvOf,
  type BerthProc,
  berthExec,
  childProcesses,
  echoedWhole,
  forwarding,
  heldEcho,
  type Proc,
  spawnNode,
  startBerth,
  writeSandboxTree,
} from './helpers/processes';
import { BOOTSTRAP, client } from './helpers/server';
import { reaches } from './helpers/states';

/** How long the agent may take to sync a file or close a port. */
const WAIT = { timeout: 30_000, interval: 100 };

/**
 * Bytes a service on `port` of the environment sent on its connections that have not left the
 * environment yet: not yet read by the tunnel's end inside (netstat's Send-Q at the service's end
 * and Recv-Q at the other).
 */
async function heldInside(url: string, envId: string, port: number): Promise<number> {
  const { code, stdout, stderr } = await berthExec(url, BOOTSTRAP, envId, 'netstat', '-tn');
  // A look that failed says so (a waitFor on it ends with why), instead of reading as nothing held.
  if (code !== 0) throw new Error(`netstat in the environment failed (${code}): ${stderr.trim()}`);
  let bytes = 0;
  for (const line of stdout.split('\n')) {
    const [, received, sent, local, foreign, state] = line.trim().split(/\s+/);
    if (state !== 'ESTABLISHED') continue;
    if (local?.endsWith(`:${port}`)) bytes += Number(sent);
    if (foreign?.endsWith(`:${port}`)) bytes += Number(received);
  }
  return bytes;
}

const backends: ('pglite' | 'postgres')[] = process.env.TEST_DATABASE_URL ? ['pglite', 'postgres'] : ['pglite'];

for (const backend of backends) {
  describeContainers(`berth agent [${backend}]`, () => {
    let base: string;
    let dataDir: string;
    let agentDir: string;
    let leaseSide: BerthProc;
    let agentSide: BerthProc;
    let agent: Proc | undefined;
    let schema: string | undefined;
    const instances: BerthProc[] = [];
    const api = () => client(() => leaseSide.url, BOOTSTRAP);
    let sandboxId: string;
    let joinKey: string;
    let berthEnv: Record<string, string>;

    beforeAll(async () => {
      base = await mkdtemp(join(tmpdir(), 'berth-agent-'));
      dataDir = join(base, 'data');
      agentDir = join(base, 'sandbox');
      // The echo service is the image's own command, on the environment's port 7000; the postgres
      // service names 127.0.0.1:5432, this machine's PostgreSQL were it dialled outside the environment.
      // The single service (port 7100) is started by a test: it takes one connection at a time.
      const services = [
        { service: 'echo', target: '127.0.0.1:7000' },
        { service: 'postgres', target: '127.0.0.1:5432' },
        { service: 'single', target: '127.0.0.1:7100' },
      ];
      const templates = join(base, 'templates.json');
      await writeFile(
        templates,
        JSON.stringify({
          pools: [{ name: 'dev', hotNodes: 2, maxQueued: 10 }],
          templates: [
            {
              name: 'dev',
              pool: 'dev',
              startMs: 50,
              image: TEST_ECHO_IMAGE,
              idle: '30m',
              hard: '1h',
              shares: [
                { name: 'src', direction: 'in', envPath: '/workspace/src' },
                { name: 'out', direction: 'out', envPath: '/workspace/out' },
              ],
              services,
            },
          ],
        }),
      );
      const env: Record<string, string> = {
        DATA_DIR: dataDir,
        BOOTSTRAP_TOKEN: BOOTSTRAP,
        TEMPLATES_FILE: templates,
        DOCKER_HOST: engine(),
      };
      berthEnv = env;
      if (backend === 'postgres') {
        schema = `berth_a_${randomBytes(6).toString('hex')}`;
        Object.assign(env, { DATABASE_URL: process.env.TEST_DATABASE_URL!, DATABASE_SCHEMA: schema });
      }
      leaseSide = await startBerth(env);
      instances.push(leaseSide);
      // On PostgreSQL the agent talks to a second instance on the same database.
      agentSide = backend === 'postgres' ? await startBerth(env) : leaseSide;
      if (agentSide !== leaseSide) instances.push(agentSide);

      await writeSandboxTree(agentDir);

      const reg = await api().post('/v1/sandboxes', { name: 'laptop' });
      expect(reg.status).toBe(201);
      sandboxId = reg.body.sandbox.id;
      joinKey = reg.body.key;
    });

    afterAll(async () => {
      await agent?.kill('SIGKILL');
      for (const b of instances.reverse()) await b.kill();
      if (schema) {
        const c = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await c.end();
      }
      await rm(base, { recursive: true, force: true });
    });

    const startAgent = (...extra: string[]) =>
      spawnNode(['bin/berth.js', 'agent', '--server', agentSide.url, '--dir', agentDir, ...extra], {});

    it('joins with the key, stores the credential for the owner only, and keeps running', async () => {
      agent = startAgent('--join', joinKey);
      await agent.waitFor(/connected to .* as sandbox laptop/);
      const folder = await stat(join(agentDir, '.berth'));
      const file = await stat(join(agentDir, '.berth', 'sandbox.json'));
      expect(folder.mode & 0o777).toBe(0o700);
      expect(file.mode & 0o777).toBe(0o600);
      const stored = JSON.parse(await readFile(join(agentDir, '.berth', 'sandbox.json'), 'utf8'));
      expect(stored.credential).toMatch(/^bsc_/);
      expect(stored.sandbox.id).toBe(sandboxId);
      expect(agent.proc.exitCode).toBeNull();
      // The key is spent.
      const again = await client(() => leaseSide.url).post('/v1/sandboxes/join', { key: joinKey });
      expect(again.status).toBe(409);
    });

    let envId: string;
    let envRoot: string;
    let listen: Record<string, number>;

    it('sends the in share by its sync rules once the environment is ready, then follows edits and deletes', async () => {
      const created = await api().post('/v1/environments', {
        template: 'dev',
        sandbox: 'laptop',
        shares: { src: 'app', out: 'results' },
        include: ['dist'],
        files: { 'src/.env': 'secrets/dev.env' },
      });
      expect([201, 202]).toContain(created.status);
      envId = created.body.environment.id;
      listen = Object.fromEntries(
        created.body.environment.exports.map((e: { service: string; listen: string }) => [e.service, Number(e.listen.split(':')[1])]),
      );
      envRoot = join(dataDir, 'workspaces', envId);
      const src = join(envRoot, 'workspace', 'src');
      await reaches(leaseSide.url, BOOTSTRAP, envId, 'ready');
      await agent!.waitFor(/share src: in sync/);
      expect(await readFile(join(src, 'main.txt'), 'utf8')).toBe('version 1\n');
      expect(await readFile(join(src, '.gitignore'), 'utf8')).toBe('dist/\n*.log\n');
      expect(await readFile(join(src, 'dist', 'bundle.js'), 'utf8')).toContain('included');
      expect(await readFile(join(src, '.env'), 'utf8')).toBe('TOKEN=abc\n');
      await expect(stat(join(src, 'debug.log'))).rejects.toMatchObject({ code: 'ENOENT' });

      await writeFile(join(agentDir, 'app', 'main.txt'), 'version 2\n');
      await writeFile(join(agentDir, 'app', 'new.txt'), 'created later\n');
      await vi.waitFor(async () => expect(await readFile(join(src, 'main.txt'), 'utf8')).toBe('version 2\n'), WAIT);
      await vi.waitFor(async () => expect(await readFile(join(src, 'new.txt'), 'utf8')).toBe('created later\n'), WAIT);
      await rm(join(agentDir, 'app', 'new.txt'));
      await vi.waitFor(() => expect(stat(join(src, 'new.txt'))).rejects.toMatchObject({ code: 'ENOENT' }), WAIT);
    });

    it('forwards the environment services from the sandbox loopback ports, both ways', async () => {
      const payload = randomBytes(4 * 1024 * 1024);
      await forwarding(agent!, envId, 'echo', listen.echo!);
      const back = await echoedWhole(listen.echo!, payload, agent);
      expect(back.equals(payload)).toBe(true);
      // The tunnel dials 5432 inside the environment, where nothing listens: never this machine's PostgreSQL.
      await forwarding(agent!, envId, 'postgres', listen.postgres!);
      const db = new pg.Client({ host: '127.0.0.1', port: listen.postgres, user: 'postgres', database: 'postgres' });
      db.on('error', () => undefined);
      await expect(db.connect()).rejects.toThrow();
    });

    it('a full mux carries further connections on relay sockets of their own', async () => {
      // MUX_STREAMS connections held open fill the agent's mux; the ones after it each take a relay
      // socket (the mux would refuse them), and once the first ones close, the mux takes new ones.
      const held: net.Socket[] = [];
      try {
        for (let i = 0; i < MUX_STREAMS + 4; i++) held.push((await heldEcho(listen.echo!, `connection ${i}`)).socket);
        for (const socket of held.splice(0, 8)) socket.destroy();
        const payload = Buffer.from('after the full mux');
        expect((await echoedWhole(listen.echo!, payload, agent)).toString()).toBe('after the full mux');
      } finally {
        for (const socket of held) socket.destroy();
      }
    });

    it('resumes forwarding after the agent is killed and started again without the join key', async () => {
      await agent!.kill('SIGKILL');
      agent = startAgent();
      await agent.waitFor(/forwarding echo/);
      const payload = Buffer.from('still there');
      const back = await echoedWhole(listen.echo!, payload, agent);
      expect(back.toString()).toBe('still there');
    });

    it("a connection's far end closes when the agent is killed or the client drops it mid-transfer", async () => {
      // One connection at a time: nc serves one and exits, then the loop starts it again; meanwhile a
      // second connection waits unanswered. So a new connection is answered only once the service
      // saw the previous one end. setsid: a session of its own outlives the command that started it.
      const service = 'setsid sh -c "while :; do nc -l -p 7100 -e cat; done </dev/null >/dev/null 2>&1 &"; echo started';
      expect(await berthExec(agentSide.url, BOOTSTRAP, envId, 'sh', '-c', service)).toMatchObject({ code: 0, stdout: 'started\n' });
      await forwarding(agent!, envId, 'single', listen.single!);
      expect((await echoedWhole(listen.single!, Buffer.from('first'), agent)).toString()).toBe('first');

      /**
       * A connection busy both ways: its client sends without end and reads nothing back, until the
       * service's echo is held up inside the environment (every hop back stopped reading what it
       * could not pass on, the relay sockets included).
       */
      const chunk = randomBytes(1024 * 1024);
      const busy = async (text: string) => {
        const held = await heldEcho(listen.single!, text);
        held.socket.pause();
        const pump = () => {
          while (!held.socket.destroyed && held.socket.write(chunk));
        };
        held.socket.on('drain', pump);
        pump();
        await vi.waitFor(async () => expect(await heldInside(agentSide.url, envId, 7100)).toBeGreaterThan(0), WAIT);
        return held;
      };

      // The agent dies (no close frame, no half-close) in the middle of it.
      const held = await busy('held');
      await agent!.kill('SIGKILL');
      held.socket.resume();
      await held.closed;
      agent = startAgent();
      await forwarding(agent, envId, 'single', listen.single!);
      expect((await echoedWhole(listen.single!, Buffer.from('after the kill'), agent)).toString()).toBe('after the kill');

      // The client drops its connection (a reset, no half-close) in the middle of it.
      const dropped = await busy('dropped');
      dropped.socket.resetAndDestroy();
      expect((await echoedWhole(listen.single!, Buffer.from('after the drop'), agent)).toString()).toBe('after the drop');
    });

    it('reconnects when its server restarts and keeps forwarding, wiring nothing twice', async () => {
      const wired = () => agent!.output().split(`(${envId}): wired`).length - 1;
      expect(wired()).toBe(1);
      const before = agent!.output().length;
      // The instance the agent talks to stops and starts again on the same port (and data).
      const port = new URL(agentSide.url).port;
      await agentSide.kill();
      await agent!.waitFor(/reconnecting/);
      const restarted = await startBerth({ ...berthEnv, PORT: port });
      instances.splice(instances.indexOf(agentSide), 1, restarted);
      if (leaseSide === agentSide) leaseSide = restarted;
      agentSide = restarted;
      await agent!.waitFor(/connected to /, before);
      const back = await echoedWhole(listen.echo!, Buffer.from('after the restart'), agent);
      expect(back.toString()).toBe('after the restart');
      // The server sent the configuration again on the new connection: the agent kept what it runs.
      expect(wired()).toBe(1);
    });

    it('brings a file the environment wrote into the out share home by the time it is stopped', async () => {
      const out = join(envRoot, 'workspace', 'out');
      await mkdir(join(out, 'reports'), { recursive: true });
      await writeFile(join(out, 'reports', 'result.txt'), 'built\n');
      const del = await api().del(`/v1/environments/${envId}`);
      expect(del.status).toBe(200);
      await reaches(leaseSide.url, BOOTSTRAP, envId, 'stopped');
      expect(await readFile(join(agentDir, 'results', 'reports', 'result.txt'), 'utf8')).toBe('built\n');
      // The environment left the config: its ports close.
      await vi.waitFor(async () => expect(await answers(listen.echo!)).toBe(false), WAIT);
    });

    it('never follows a link out of its folder and never sends its own .berth', async () => {
      const outside = join(base, 'outside');
      await mkdir(outside);
      await symlink(outside, join(agentDir, 'escape'));
      const created = await api().post('/v1/environments', { template: 'dev', sandbox: 'laptop', shares: { src: '.', out: 'escape' } });
      expect(created.status).toBe(202);
      const id = created.body.environment.id as string;
      const line = (text: string) => new RegExp(`\\(${id}\\): share ${text}`);
      await agent!.waitFor(line('out: escape leads outside the sandbox folder'));
      await agent!.waitFor(line('src: in sync'));
      const src = join(dataDir, 'workspaces', id, 'workspace', 'src');
      expect(await readFile(join(src, 'app', 'main.txt'), 'utf8')).toBe('version 2\n');
      await expect(stat(join(src, '.berth'))).rejects.toMatchObject({ code: 'ENOENT' });
      // What the environment leaves in its out share is not brought home through the link.
      const out = join(dataDir, 'workspaces', id, 'workspace', 'out');
      await mkdir(out, { recursive: true });
      await writeFile(join(out, 'authorized_keys'), 'ssh-ed25519 planted\n');
      expect((await api().del(`/v1/environments/${id}`)).status).toBe(200);
      await agent!.waitFor(line('out: escape leads outside the sandbox folder .*; not brought home'));
      expect(await readdir(outside)).toEqual([]);
    });

    it('exits cleanly when its sandbox is removed', async () => {
      const removed = await api().del(`/v1/sandboxes/${sandboxId}`);
      expect(removed.status).toBe(200);
      expect(await agent!.exited).toBe(0);
    });
  });
}

// Agents end to end: a node agent and a sandbox agent, each a process, on either side of Berth.

/** Files under `dir` (recursively) whose bytes contain `needle`. */
async function filesContaining(dir: string, needle: Buffer): Promise<string[]> {
  const hits: string[] = [];
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = join(entry.parentPath, entry.name);
    if ((await readFile(file)).includes(needle)) hits.push(file);
  }
  return hits;
}
/**
 * The processes `berth node` (pid `node`) started to dial into environments: its standing
 * diallers (berth-envd `dialer`), and their children, a connection each.
 */
function diallersOf(node: number): number[] {
  const diallersAmong = (parent: number) =>
    childProcesses(parent)
      .filter((child) => child.argv.includes('dialer'))
      .map((child) => child.pid);
  const diallers = diallersAmong(node);
  return [...diallers, ...diallers.flatMap(diallersAmong)];
}

/** Whether `pid` is still a berth-envd dialler or one of its connections (not ended, and not reused by another program). */
const alive = (pid: number) => argvOf(pid).includes('dialer');

/** How long the agents may take to sync a file or clean up an environment (containers end). */
const E2E_WAIT = { timeout: 60_000, interval: 200 };

for (const backend of backends) {
  describeContainers(`agents end to end [${backend}]`, () => {
    let base: string;
    let nodeDir: string;
    let sandboxDir: string;
    let nodeSide: BerthProc;
    let sandboxSide: BerthProc;
    let nodeAgent: Proc | undefined;
    let sandboxAgent: Proc | undefined;
    let schema: string | undefined;
    const instances: BerthProc[] = [];
    const api = () => client(() => nodeSide.url, BOOTSTRAP);
    let nodeToken: string;
    let envId: string;
    let listen: Record<string, number>;

    beforeAll(async () => {
      base = await mkdtemp(join(tmpdir(), 'berth-e2e-'));
      nodeDir = join(base, 'node');
      sandboxDir = join(base, 'sandbox');
      // The echo service is the image's own command, on the environment's port 7000; the postgres
      // service names 127.0.0.1:5432, this machine's PostgreSQL were it dialled outside the environment.
      const services = [
        { service: 'echo', target: '127.0.0.1:7000' },
        { service: 'postgres', target: '127.0.0.1:5432' },
      ];
      const templates = join(base, 'templates.json');
      await writeFile(
        templates,
        JSON.stringify({
          pools: [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
          templates: [
            {
              name: 'dev',
              pool: 'remote',
              startMs: 50,
              image: TEST_ECHO_IMAGE,
              idle: '30m',
              hard: '1h',
              shares: [
                { name: 'src', direction: 'in', envPath: '/workspace/src' },
                { name: 'out', direction: 'out', envPath: '/workspace/out' },
              ],
              services,
            },
          ],
        }),
      );
      // A short liveness bound, so the lost node is noticed soon.
      const env: Record<string, string> = {
        DATA_DIR: join(base, 'data'),
        BOOTSTRAP_TOKEN: BOOTSTRAP,
        TEMPLATES_FILE: templates,
        NODE_LOST_MS: '3000',
        NODE_HEARTBEAT_MS: '500',
      };
      if (backend === 'postgres') {
        schema = `berth_e_${randomBytes(6).toString('hex')}`;
        Object.assign(env, { DATABASE_URL: process.env.TEST_DATABASE_URL!, DATABASE_SCHEMA: schema });
      }
      nodeSide = await startBerth(env);
      instances.push(nodeSide);
      // Instances of one deployment share the database, the blob store (here DATA_DIR) and the master key.
      sandboxSide = backend === 'postgres' ? await startBerth(env) : nodeSide;
      if (sandboxSide !== nodeSide) instances.push(sandboxSide);

      await writeSandboxTree(sandboxDir);

      const node = await api().post('/v1/nodes', { pool: 'remote', name: 'builder' });
      expect(node.status).toBe(201);
      nodeToken = node.body.secret;
      nodeAgent = spawnNode(
        ['bin/berth.js', 'node', '--server', nodeSide.url, '--token', nodeToken, '--dir', nodeDir, '--engine', engine()],
        {},
      );
      await nodeAgent.waitFor(/online as builder/);
      const reg = await api().post('/v1/sandboxes', { name: 'laptop' });
      sandboxAgent = spawnNode(['bin/berth.js', 'agent', '--server', sandboxSide.url, '--join', reg.body.key, '--dir', sandboxDir], {});
      await sandboxAgent.waitFor(/connected to .* as sandbox laptop/);
    });

    afterAll(async () => {
      await sandboxAgent?.kill('SIGKILL');
      await nodeAgent?.kill('SIGKILL');
      for (const b of instances.reverse()) await b.kill();
      if (schema) {
        const c = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await c.end();
      }
      await rm(base, { recursive: true, force: true });
    });

    it('a lease on a hotNodes: 0 pool becomes ready on the node agent and gets the sandbox folder by its sync rules', async () => {
      const created = await api().post('/v1/environments', {
        template: 'dev',
        sandbox: 'laptop',
        snapshot: `e2e-${backend}`,
        shares: { src: 'app', out: 'results' },
        include: ['dist'],
        files: { 'src/.env': 'secrets/dev.env' },
      });
      expect(created.status).toBe(202);
      envId = created.body.environment.id;
      listen = Object.fromEntries(
        created.body.environment.exports.map((e: { service: string; listen: string }) => [e.service, Number(e.listen.split(':')[1])]),
      );
      const ready = await reaches(nodeSide.url, BOOTSTRAP, envId, 'ready');
      expect(ready.node).toBe('builder');
      const src = join(nodeDir, envId, 'workspace', 'src');
      await sandboxAgent!.waitFor(/share src: in sync/);
      expect(await readFile(join(src, 'main.txt'), 'utf8')).toBe('version 1\n');
      expect(await readFile(join(src, 'dist', 'bundle.js'), 'utf8')).toContain('included');
      expect(await readFile(join(src, '.env'), 'utf8')).toBe('TOKEN=abc\n');
      await expect(stat(join(src, 'debug.log'))).rejects.toMatchObject({ code: 'ENOENT' });

      await writeFile(join(sandboxDir, 'app', 'main.txt'), 'version 2\n');
      await vi.waitFor(async () => expect(await readFile(join(src, 'main.txt'), 'utf8')).toBe('version 2\n'), E2E_WAIT);
    });

    it("a TCP service on the node side answers through the sandbox's port", async () => {
      const payload = randomBytes(2 * 1024 * 1024);
      await forwarding(sandboxAgent!, envId, 'echo', listen.echo!);
      const back = await echoedWhole(listen.echo!, payload, sandboxAgent);
      expect(back.equals(payload)).toBe(true);
      // The tunnel dials 5432 inside the environment, where nothing listens: never this machine's PostgreSQL.
      await forwarding(sandboxAgent!, envId, 'postgres', listen.postgres!);
      const db = new pg.Client({ host: '127.0.0.1', port: listen.postgres, user: 'postgres', database: 'postgres' });
      db.on('error', () => undefined);
      await expect(db.connect()).rejects.toThrow();
    });

    it('berth exec prints a workspace file with its exit code, and the exec is in the log', async () => {
      const ran = await berthExec(sandboxSide.url, BOOTSTRAP, envId, 'cat', '/workspace/src/main.txt');
      expect(ran).toMatchObject({ code: 0, stdout: 'version 2\n' });
      const execs = (await api().get(`/v1/environments/${envId}/execs`)).body.execs;
      expect(execs.map((e: { command: string; exitCode: number }) => [e.command, e.exitCode])).toEqual([
        ['cat /workspace/src/main.txt', 0],
      ]);
    });

    it('killing and restarting the sandbox agent resumes forwarding without a join key', async () => {
      await sandboxAgent!.kill('SIGKILL');
      sandboxAgent = spawnNode(['bin/berth.js', 'agent', '--server', sandboxSide.url, '--dir', sandboxDir], {});
      await sandboxAgent.waitFor(/forwarding echo/);
      const back = await echoedWhole(listen.echo!, Buffer.from('again'), sandboxAgent);
      expect(back.toString()).toBe('again');
    });

    it('an out-share file is in the sandbox folder by the time the environment is stopped; the snapshot restores next time; the server keeps no plain byte', async () => {
      const out = join(nodeDir, envId, 'workspace', 'out');
      await writeFile(join(out, 'result.txt'), 'built on the node\n');
      const marker = `plain-${randomBytes(12).toString('hex')}`;
      await writeFile(join(out, 'marker.txt'), marker);
      expect((await api().del(`/v1/environments/${envId}`)).status).toBe(200);
      await reaches(nodeSide.url, BOOTSTRAP, envId, 'stopped');
      expect(await readFile(join(sandboxDir, 'results', 'result.txt'), 'utf8')).toBe('built on the node\n');

      const next = await api().post('/v1/environments', { template: 'dev', sandbox: 'laptop', snapshot: `e2e-${backend}` });
      const restored = await reaches(nodeSide.url, BOOTSTRAP, next.body.environment.id, 'ready');
      expect(restored.restored).toMatchObject({ key: `e2e-${backend}` });
      expect(await readFile(join(nodeDir, restored.id, 'workspace', 'out', 'result.txt'), 'utf8')).toBe('built on the node\n');
      expect(await readFile(join(nodeDir, restored.id, 'workspace', 'src', 'main.txt'), 'utf8')).toBe('version 2\n');
      expect(await readFile(join(nodeDir, restored.id, 'workspace', 'out', 'marker.txt'), 'utf8')).toBe(marker);
      // The bytes went through the server (relayed to the sandbox, saved and restored as a snapshot)
      // and none of them is stored there in the clear: not in its blobs, not in its database files.
      expect(await filesContaining(join(base, 'data'), Buffer.from(marker))).toEqual([]);
      envId = restored.id;
      listen = Object.fromEntries(
        next.body.environment.exports.map((e: { service: string; listen: string }) => [e.service, Number(e.listen.split(':')[1])]),
      );
    });

    it('killing the node agent fails its environments with the reason; the restarted agent removes their containers', {
      timeout: 120_000,
    }, async () => {
      expect(await containersOf(envId)).toHaveLength(1);
      // A service that keeps its connection after its input ended and never sends: only the
      // dialler itself can notice that the node is gone.
      const mute = 'setsid sh -c "nc -l -p 5432 -e sh -c \'cat >/dev/null; exec sleep 600\' </dev/null >/dev/null 2>&1 &"; echo started';
      expect(await berthExec(sandboxSide.url, BOOTSTRAP, envId, 'sh', '-c', mute)).toMatchObject({ code: 0, stdout: 'started\n' });
      await forwarding(sandboxAgent!, envId, 'postgres', listen.postgres!);
      const held = net.connect({ port: listen.postgres!, host: '127.0.0.1' });
      held.on('error', () => undefined);
      const closed = new Promise<void>((ended) => held.once('close', () => ended()));
      const node = nodeAgent!.proc.pid!;
      // The node dials a container's port itself (as root, on this machine's engine: the container's
      // dialler and its child for this connection) or through the engine.
      const dialling =
        process.getuid?.() === 0
          ? await vi.waitFor(() => {
              const found = diallersOf(node);
              expect(found.length).toBeGreaterThanOrEqual(2);
              return found;
            }, WAIT)
          : [];
      // The dialler is in the container's network and mount namespaces (it sees the container's
      // files, not the host's), though a process of the node.
      const [container] = await containersOf(envId);
      const first = (await podman('inspect', '--format', '{{.State.Pid}}', container!)).trim();
      const namespace = (pid: number | string, kind: string) => readlinkSync(`/proc/${pid}/ns/${kind}`);
      for (const pid of dialling) {
        for (const kind of ['net', 'mnt']) expect(namespace(pid, kind)).toBe(namespace(first, kind));
        expect(namespace(pid, 'mnt')).not.toBe(namespace(process.pid, 'mnt'));
      }
      await nodeAgent!.kill('SIGKILL');
      // Both ends of the tunnel end with the node: the client's connection, and the node's dialler
      // and its connection (which hold the environment's network namespace) instead of outliving it.
      await closed;
      await vi.waitFor(() => expect(dialling.filter(alive)).toEqual([]), WAIT);
      const failed = await reaches(nodeSide.url, BOOTSTRAP, envId, 'failed');
      expect(failed.error).toMatch(/^node builder was lost/);
      // The container outlived the killed agent; the restarted one finds it ended on the server.
      expect(await containersOf(envId)).toHaveLength(1);
      nodeAgent = spawnNode(
        ['bin/berth.js', 'node', '--server', nodeSide.url, '--token', nodeToken, '--dir', nodeDir, '--engine', engine()],
        {},
      );
      await nodeAgent.waitFor(/online as builder/);
      // Its container goes first, then its folder.
      await vi.waitFor(async () => expect(await containersOf(envId)).toEqual([]), E2E_WAIT);
      await vi.waitFor(() => expect(stat(join(nodeDir, envId))).rejects.toMatchObject({ code: 'ENOENT' }), E2E_WAIT);
    });
  });
}
