// The node's standing dialler of a container (src/node/netns-dial.ts, berth-envd `dialer`), through
// NodeRuntime.dial on a container of the test engine, the runtime in this process (so its diallers
// are this process's children): one dialler per container however many connections, a child of it
// per connection, the dialler's words for a port nothing listens on, the service's connection ended
// by the node's cut however held up, no use of it by another user of this machine or from inside
// the container, and its end with the container. Its end with a killed node: test/agents.test.ts
// ("killing the node agent…").
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync, readlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Engine } from '../src/node/engine';
import { containerName, type EnvironmentSpec, NodeRuntime } from '../src/node/runtime';
import { describeContainers, engine as engineUrl, TEST_ECHO_IMAGE } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { argvOf, childProcesses } from './helpers/processes';
import { poll } from './helpers/wait';

const run = promisify(execFile);
/** The echo image's services (test/helpers/engine-setup.ts): an echo, and a byte count of what it was sent. */
const ECHO = 7000;
const COUNT = 9000;

interface Dialler {
  pid: number;
  /** Its abstract socket's name. */
  name: string;
  /** The container's first process, which it ends with. */
  first: number;
}

/** The live children of `parent`. */
function childrenOf(parent: number): number[] {
  return childProcesses(parent).map((child) => child.pid);
}

/** The diallers this process's runtime started, of the container whose first process is `first`. */
function diallersOf(first: number): Dialler[] {
  return childProcesses(process.pid)
    .map(({ pid, argv: args }) => ({ pid, args }))
    .filter(({ args }) => args[1] === 'dialer' && Number(args[3]) === first)
    .map(({ pid, args }) => ({ pid, name: args[2]!, first }));
}

/** Sends `text`, half-closes, and answers what came back by the service's end. */
async function exchange(socket: Duplex, text: string): Promise<string> {
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  const ended = once(socket, 'end');
  socket.end(text);
  await ended;
  socket.destroy();
  return Buffer.concat(chunks).toString();
}

/**
 * What a process of `uid` on this machine gets from the dialler's socket `name` when it asks, as
 * the node does, for the echo port: the bytes it was sent before the socket closed.
 */
async function askAs(uid: number, name: string): Promise<number> {
  const script = `
    const socket = require('node:net').connect({ path: '\\0' + process.argv[1] });
    let got = 0;
    socket.on('connect', () => socket.write(Buffer.from([${ECHO >> 8}, ${ECHO & 255}])));
    socket.on('data', (chunk) => { got += chunk.length; if (got > 32) socket.destroy(); });
    socket.on('error', () => undefined);
    socket.on('close', () => console.log(got));`;
  const { stdout } = await run(process.execPath, ['-e', script, name], { uid, gid: uid, cwd: '/' });
  return Number(stdout.trim());
}

const namespace = (pid: number, kind: string) => readlinkSync(`/proc/${pid}/ns/${kind}`);
/** Only a node run as root enters containers (else it dials through the engine). */
const asRoot = it.skipIf(process.getuid?.() !== 0);

describeContainers('the standing dialler of a container', () => {
  let dir: string;
  let runtime: NodeRuntime;
  let engine: Engine;
  const id = `env_dialer${randomBytes(4).toString('hex')}`;
  const name = containerName(id);
  const firstPid = async () => (await engine.inspect(name))!.pid;
  /** What `argv` prints inside the environment. */
  const inside = async (argv: string[]) => {
    let stdout = '';
    const command = await runtime.exec(id, argv, '/', (stream, data) => {
      if (stream === 'stdout') stdout += data.toString();
    });
    expect(await command.exited).toBe(0);
    return stdout;
  };
  /** The receive and send queues of both ends of the connections to `port` inside (netstat's Recv-Q and Send-Q). */
  const queues = async (port: number) =>
    (await inside(['netstat', '-tn']))
      .split('\n')
      .map((line) => line.trim().split(/\s+/))
      .filter(([, , , local, foreign, state]) => state === 'ESTABLISHED' && [local, foreign].some((end) => end?.endsWith(`:${port}`)))
      .map(([, received, sent, local]) => ({ service: local!.endsWith(`:${port}`), received: Number(received), sent: Number(sent) }));
  /** A connection to `port`, once something listens there (a service starts just after what starts it says so). */
  const listening = (port: number) =>
    poll(`port ${port} to listen`, async () => {
      try {
        return await runtime.dial(id, port);
      } catch (error) {
        if (/cannot reach port/.test((error as Error).message)) return undefined;
        throw error;
      }
    });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-dialer-'));
    engine = await Engine.open(engineUrl());
    runtime = new NodeRuntime({ engine, dir, owner: `dialer-test-${randomBytes(4).toString('hex')}`, log: () => undefined });
    const spec: EnvironmentSpec = {
      id,
      name: 'dialer',
      orgId: 'org',
      template: 'echo',
      shares: [],
      image: TEST_ECHO_IMAGE,
      resources: {},
      network: 'none',
      workdir: '/',
      env: {},
      lifecycle: [],
    };
    expect(await runtime.prepare(spec, async () => undefined)).toBe('container');
    expect(await exchange(await listening(ECHO), 'up')).toBe('up');
  });

  afterAll(async () => {
    await runtime?.discard(id);
    runtime?.close();
    await rm(dir, { recursive: true, force: true });
  });

  asRoot(
    'carries connections one after another and at once through one dialler, a child of it each, as nobody in the container',
    async () => {
      const first = await firstPid();
      const [dialler, ...others] = diallersOf(first);
      expect(others).toEqual([]);
      expect(dialler).toBeDefined();
      for (let i = 0; i < 20; i++) expect(await exchange(await runtime.dial(id, ECHO), `one ${i}`)).toBe(`one ${i}`);
      // Open at once (dialled one after another: the echo's listen backlog is 2), each a child of
      // the dialler while it is open, ending with it.
      const open: Duplex[] = [];
      for (let i = 0; i < 40; i++) open.push(await runtime.dial(id, ECHO));
      expect(childrenOf(dialler!.pid)).toHaveLength(40);
      const echoed = await Promise.all(open.map((socket, i) => exchange(socket, `many ${i}`)));
      expect(echoed).toEqual(open.map((_, i) => `many ${i}`));
      await poll('the connections to end', async () => (childrenOf(dialler!.pid).length === 0 ? true : undefined));
      // A client's half-close reaches the service as its input's end, and the service's answer comes back.
      expect(await exchange(await runtime.dial(id, COUNT), 'twelve bytes')).toBe('12\n');
      expect(diallersOf(first)).toEqual([dialler]);
      for (const kind of ['net', 'mnt']) expect(namespace(dialler!.pid, kind)).toBe(namespace(first, kind));
      expect(namespace(dialler!.pid, 'net')).not.toBe(namespace(process.pid, 'net'));
      expect(readFileSync(`/proc/${dialler!.pid}/status`, 'utf8')).toMatch(/^Uid:\s+65534\s+65534\s+65534\s+65534$/m);
    },
  );

  asRoot("reports a port nothing listens on in the dialler's words, to dials made at once", async () => {
    const first = await firstPid();
    const dials = await Promise.allSettled(Array.from({ length: 40 }, () => runtime.dial(id, 7999)));
    for (const dial of dials) {
      expect(dial).toMatchObject({
        status: 'rejected',
        reason: { message: 'cannot reach port 7999 in the environment: Connection refused' },
      });
    }
    // The same dialler is there for the next one.
    expect(diallersOf(first)).toHaveLength(1);
    expect(await exchange(await runtime.dial(id, ECHO), 'after')).toBe('after');
  });

  asRoot("a connection the node cuts while both ways are held up ends the service's connection", async () => {
    // One connection: nc ends with it.
    let starting!: () => void;
    const started = new Promise<void>((resolve) => (starting = resolve));
    const served = await runtime.exec(id, ['sh', '-c', 'echo starting; exec nc -l -p 7100 -e cat'], '/', (_stream, data) => {
      if (data.toString().includes('starting')) starting();
    });
    await started;
    const socket = await listening(7100);
    // The node sends without end and reads nothing back.
    socket.pause();
    const chunk = randomBytes(64 * 1024);
    let taken = 0;
    const pump = () => {
      while (!socket.destroyed && socket.write(chunk, () => (taken += chunk.length)));
    };
    socket.on('drain', pump);
    pump();
    // Held up both ways: what the node sends and the service's echo wait inside, and nothing moves
    // over three looks (the dialler's child waits on the service, which waits on its echo).
    let before = '';
    let still = 0;
    await poll('both ways to be held up', async () => {
      const now = await queues(7100);
      const look = JSON.stringify({ now, taken });
      const held = now.some((end) => end.service && end.sent > 0 && end.received > 0);
      still = held && look === before ? still + 1 : 0;
      before = look;
      return still === 3 ? true : undefined;
    });
    socket.destroy();
    expect(await served.exited).not.toBe(137);
  });

  asRoot('serves no other user of this machine, and nothing inside the container sees its socket', async () => {
    const [dialler] = diallersOf(await firstPid());
    // The same request as the node's user (root) is answered; as nobody, closed unanswered.
    expect(await askAs(0, dialler!.name)).toBeGreaterThan(32);
    expect(await askAs(65534, dialler!.name)).toBe(0);
    expect(await askAs(1000, dialler!.name)).toBe(0);
    // Abstract sockets are per network namespace: the container's lists none of the host's.
    expect(readFileSync('/proc/net/unix', 'utf8')).toContain(`@${dialler!.name}`);
    expect(await inside(['cat', '/proc/net/unix'])).not.toContain(dialler!.name);
  });

  asRoot('ends when its container restarts; the next connection gets a dialler in the new namespaces', async () => {
    const before = await firstPid();
    const [dialler] = diallersOf(before);
    expect(dialler).toBeDefined();
    await podman('restart', '--time', '0', name);
    await poll('the dialler of the ended container to end', async () => (argvOf(dialler!.pid).length === 0 ? true : undefined));
    // The container's go, as the runtime gives it at start: the image's services start.
    await podman('kill', '--signal', 'USR1', name);
    expect(await exchange(await listening(ECHO), 'again')).toBe('again');
    const after = await firstPid();
    expect(after).not.toBe(before);
    const [next, ...others] = diallersOf(after);
    expect(others).toEqual([]);
    expect(namespace(next!.pid, 'net')).toBe(namespace(after, 'net'));
  });

  asRoot('ends when the environment stops', async () => {
    const [dialler] = diallersOf(await firstPid());
    expect(dialler).toBeDefined();
    await runtime.stop(id);
    await poll('the dialler to end', async () => (argvOf(dialler!.pid).length === 0 ? true : undefined));
  });
});
