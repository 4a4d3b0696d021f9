// Environments as containers, through the public interfaces, on both kinds of node: the built-in
// pool (in the server) and `berth node` (a real process), with a real engine (Podman's Docker API).
import { createHash, randomInt } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { type IncomingMessage, request } from 'node:http';
import { type AddressInfo, createServer } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { openRelay } from '../src/agent/sandbox-agent';
import { ENVD_BINARY } from '../src/node/runtime';
import {
  containersOf,
  countingListener,
  describeContainers,
  engine,
  ownAddress,
  TEST_HOG_IMAGE,
  TEST_IMAGE,
  TEST_LINKED_IMAGE,
  TEST_USER_IMAGE,
  writeCatalog,
} from './helpers/containers';
import { type Proc, spawnNode, TEST_CAPACITY } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';
import { recorded } from './helpers/states';

const MISSING_IMAGE = 'localhost/berth-test/no-such-image:1';
/**
 * A port of this machine's loopback with a listener that answers: were a tunnel ever dialled from
 * the node's own network namespace (src/node/netns-dial.ts), it would reach this.
 */
const hostListener = createServer((socket) => socket.end('this-machine\n')).listen(0, '127.0.0.1');
await once(hostListener, 'listening');
const HOST_PORT = (hostListener.address() as AddressInfo).port;
afterAll(() => void hostListener.close());

/** How long vi.waitFor waits on something a loaded machine may take its time over. */
const WAIT = { timeout: 30_000, interval: 50 };

const TEMPLATES = [
  {
    name: 'box',
    image: TEST_IMAGE,
    workdir: '/workspace',
    env: { GREETING: 'hello from the template' },
    resources: { memory: '128MiB', pids: 64, cpus: 1 },
    shares: [
      { name: 'src', direction: 'in', envPath: '/workspace/src' },
      { name: 'out', direction: 'out', envPath: '/workspace/out' },
    ],
    services: [
      { service: 'web', target: '127.0.0.1:8080' },
      { service: 'host', target: `127.0.0.1:${HOST_PORT}` },
    ],
  },
  { name: 'user', image: TEST_USER_IMAGE, shares: [{ name: 'src', direction: 'in', envPath: '/workspace/src' }] },
  { name: 'egress', image: TEST_IMAGE, network: 'egress' },
  { name: 'hog', image: TEST_HOG_IMAGE, resources: { memory: '64MiB' } },
  { name: 'missing', image: MISSING_IMAGE },
  { name: 'linked', image: TEST_LINKED_IMAGE },
  {
    name: 'files',
    shares: [{ name: 'src', direction: 'in', envPath: '/workspace/src' }],
    services: [{ service: 'web', target: '127.0.0.1:8080' }],
  },
];

interface Ran {
  status: number;
  stdout: string;
  stderr: string;
  exitCode?: number;
  error?: { error: string; code: string };
}

/** The addresses of this machine that are not loopback: what no environment may reach. */
function hostAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((a) => a && !a.internal && a.family === 'IPv4')
    .map((a) => a!.address);
}

for (const kind of ['built-in pool', 'berth node'] as const) {
  describeContainers(`environments as containers on the ${kind}`, () => {
    let s: TestServer;
    let dir: string;
    let node: Proc | undefined;
    const admin = client(() => s.url, BOOTSTRAP);

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'berth-containers-'));
      // The remote pool has no hot nodes: only the berth node serves it.
      const templates = await writeCatalog(
        dir,
        TEMPLATES.map((t) => ({ ...t, pool: kind === 'berth node' ? 'remote' : 'default' })),
        [{ name: 'remote', hotNodes: 0, maxQueued: 100 }],
      );
      s = await startServer('pglite', {
        TEMPLATES_FILE: templates,
        DOCKER_HOST: kind === 'built-in pool' ? engine() : 'none',
        NODE_HEARTBEAT_MS: '250',
      });
      if (kind === 'berth node') {
        const created = await admin.post('/v1/nodes', { name: 'builder', pool: 'remote' });
        node = spawnNode(
          [
            'bin/berth.js',
            'node',
            '--server',
            s.url,
            '--token',
            created.body.secret,
            '--dir',
            join(dir, 'node'),
            '--slots',
            '24',
            // Room for whatever this suite leases at once, whatever this machine has.
            '--capacity',
            TEST_CAPACITY,
            '--engine',
            engine(),
          ],
          {},
        );
        await node.waitFor(/online as builder/);
      }
    }, 120_000);
    afterAll(async () => {
      const live = await admin.get('/v1/environments?state=live');
      for (const env of live.body.environments ?? []) await admin.del(`/v1/environments/${env.id}`);
      for (let i = 0; i < 30 && (await admin.get('/v1/environments?state=live')).body.environments?.length; i++) {
        await s.app.deps.background.tick();
      }
      await node?.kill();
      await s?.stop();
      await rm(dir, { recursive: true, force: true });
    });

    async function lease(template: string): Promise<Record<string, any>> {
      const made = await admin.post('/v1/environments', { template });
      expect(made.status, JSON.stringify(made.body)).toBe(202);
      return untilState(s, BOOTSTRAP, made.body.environment.id, 'ready');
    }

    /** POST /v1/environments/{id}/exec, read to its end (or until `signal` aborts it). */
    async function run(id: string, command: string[], signal?: AbortSignal, onOutput?: (text: string) => void): Promise<Ran> {
      try {
        return await runOnce(id, command, signal, onOutput);
      } catch (error) {
        // A request the test aborted, or one the server ended as it stopped after the test.
        return { status: 0, stdout: '', stderr: '', error: { error: (error as Error).message, code: 'aborted' } };
      }
    }

    async function runOnce(id: string, command: string[], signal?: AbortSignal, onOutput?: (text: string) => void): Promise<Ran> {
      const res = await fetch(`${s.url}/v1/environments/${id}/exec`, {
        method: 'POST',
        headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
        body: JSON.stringify({ command }),
        signal,
      });
      const ran: Ran = { status: res.status, stdout: '', stderr: '' };
      if (res.status !== 200) {
        ran.error = await res.json();
        return ran;
      }
      let rest = '';
      try {
        for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>) {
          rest += Buffer.from(piece).toString();
          let nl = rest.indexOf('\n');
          while (nl >= 0) {
            const line = JSON.parse(rest.slice(0, nl));
            rest = rest.slice(nl + 1);
            nl = rest.indexOf('\n');
            if (line.stream) {
              const text = Buffer.from(line.data, 'base64').toString();
              ran[line.stream as 'stdout' | 'stderr'] += text;
              onOutput?.(text);
            } else if (line.exitCode !== undefined) ran.exitCode = line.exitCode;
            else if (line.error) ran.error = line;
          }
        }
      } catch (error) {
        if (!signal?.aborted) throw error;
      }
      return ran;
    }

    const sh = (id: string, script: string) => run(id, ['sh', '-c', script]);

    it("a command sees the image's files, variables and processes, never the host's", async () => {
      const env = await lease('box');
      expect(env).toMatchObject({ image: TEST_IMAGE, runtime: 'container', network: 'none', workdir: '/workspace' });
      expect(env.resources).toEqual({ memory: '128MiB', pids: 64, cpus: 1 });
      const seen = await sh(env.id, 'cat /etc/berth-image; hostname; pwd; echo "$GREETING"; env | sort; ps -o pid,args');
      expect(seen.exitCode).toBe(0);
      const [image, hostname, pwd, greeting] = seen.stdout.split('\n');
      expect([image, hostname, pwd, greeting]).toEqual(['the berth test image', env.name, '/workspace', 'hello from the template']);
      // Nothing of the server's environment or data folder.
      expect(seen.stdout).not.toMatch(/DATA_DIR|BOOTSTRAP|berth-test-|DOCKER_HOST/);
      const processes = seen.stdout.split('\n').filter((l) => /^\s*\d+ /.test(l));
      expect(processes[0]).toMatch(/^\s*1 \/\.berth\/envd init/);
      expect(processes.every((p) => /envd|ps -o|sh -c|sort|env$/.test(p))).toBe(true);
      const host = await sh(env.id, `ls ${s.dataDir} || echo no-data-dir; cat ${join(s.dataDir, 'master.key')} || echo no-key`);
      expect(host.stdout).toContain('no-data-dir');
      expect(host.stdout).toContain('no-key');
      // Dangerous capabilities are off and no privilege can be gained.
      const status = await sh(env.id, 'grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status');
      const caps = BigInt(`0x${/CapBnd:\s+([0-9a-f]+)/.exec(status.stdout)![1]}`);
      for (const [name, bit] of Object.entries({
        NET_ADMIN: 12,
        NET_RAW: 13,
        SYS_MODULE: 16,
        SYS_RAWIO: 17,
        SYS_PTRACE: 19,
        SYS_ADMIN: 21,
        MKNOD: 27,
      })) {
        expect((caps >> BigInt(bit)) & 1n, name).toBe(0n);
      }
      expect(status.stdout).toMatch(/NoNewPrivs:\s+1/);
      const exec = (await admin.get(`/v1/environments/${env.id}/execs`)).body.execs[0];
      expect(exec).toMatchObject({ exitCode: 0, actor: 'admin@berth.local' });
    });

    it("commands run as the image's user, in its shares, and exit codes come back", async () => {
      const env = await lease('user');
      const ran = await sh(env.id, 'id -u; pwd; touch /workspace/src/made-here && echo wrote; exit 3');
      expect(ran).toMatchObject({ exitCode: 3, stdout: '1234\n/\nwrote\n' });
      expect((await run(env.id, ['no-such-program'])).exitCode).toBe(127);
    });

    it('a memory hog exits 137 and the environment lives on; a fork storm stops at pids while another environment answers', async () => {
      const env = await lease('box');
      const other = await lease('egress');
      const hog = await sh(env.id, 'head -c 300000000 /dev/zero | tail');
      expect(hog.exitCode).toBe(137);
      expect((await admin.get(`/v1/environments/${env.id}`)).body.state).toBe('ready');
      const storm = new AbortController();
      let _forked = false;
      let stormed: Promise<Ran> | undefined;
      const refused = new Promise<void>((resolve) => {
        stormed = run(
          env.id,
          ['sh', '-c', 'i=0; while [ $i -lt 500 ]; do sleep 60 & i=$((i+1)); done; echo forked; wait'],
          storm.signal,
          (text) => {
            _forked ||= text.includes('forked');
            if (/can't fork|Resource temporarily unavailable|fork/i.test(text)) resolve();
          },
        );
      });
      await refused;
      expect((await sh(other.id, 'echo alive')).stdout).toBe('alive\n');
      storm.abort();
      await stormed;
      expect((await sh(env.id, 'echo after')).stdout).toBe('after\n');
    });

    it('a caller that goes away kills the whole session of its command, recorded as 137', async () => {
      const env = await lease('box');
      const gone = new AbortController();
      const started = new Promise<void>((resolve) => {
        void run(env.id, ['sh', '-c', 'sleep 300 & echo started; sleep 301'], gone.signal, (text) => text.includes('started') && resolve());
      });
      await started;
      gone.abort();
      expect((await recorded(s.url, BOOTSTRAP, env.id, 'sleep 301')).exitCode).toBe(137);
      const ps = await sh(env.id, 'ps -o args');
      expect(ps.stdout).not.toMatch(/sleep 30[01]/);
    });

    it("a command can end only its own environment's commands by killing berth-envd, never read its line or change it", async () => {
      const env = await lease('box');
      const other = await lease('egress');
      const serving = "ps -o pid,args | awk '/envd serve/ && !/awk/ {print $1}'";
      // Its descriptors (every command's frames) are closed even to root in the environment.
      const peek = await sh(env.id, `p=$(${serving}); cat /proc/$p/fd/0 || echo no-read; echo x >> /proc/$p/fd/1 || echo no-write`);
      expect(peek.stdout, JSON.stringify(peek)).toBe('no-read\nno-write\n');
      const change = await sh(env.id, 'echo x > /.berth/envd || cp /bin/busybox /.berth/envd || echo unchanged');
      expect(change.stdout).toBe('unchanged\n');
      expect(change.stderr).toMatch(/Read-only file system/);
      const stop = new AbortController();
      let ticks = 0;
      const ticking = run(other.id, ['sh', '-c', 'while :; do echo tick; sleep 0.1; done'], stop.signal, () => ticks++);
      const started = new Promise<void>((resolve) => {
        void run(env.id, ['sh', '-c', 'echo started; exec sleep 305'], undefined, (text) => text.includes('started') && resolve());
      });
      await started;
      await vi.waitFor(() => expect(ticks).toBeGreaterThan(0), WAIT);
      await sh(env.id, `kill -9 $(${serving})`);
      const recorded = await vi.waitFor(async () => {
        const execs = (await admin.get(`/v1/environments/${env.id}/execs`)).body.execs as { command: string; exitCode?: number | null }[];
        const found = execs.find((e) => e.command.includes('sleep 305') && typeof e.exitCode === 'number');
        expect(found).toBeDefined();
        return found!;
      }, WAIT);
      expect(recorded.exitCode).toBe(137);
      const after = await sh(env.id, 'echo after; ps -o args');
      // The whole answer on failure: its stderr says why a command did not start.
      expect(after, JSON.stringify(after)).toMatchObject({ exitCode: 0, stdout: expect.stringMatching(/^after\n/) });
      expect(after.stdout).not.toMatch(/sleep 305/);
      // The other environment's command ran on throughout.
      const seen = ticks;
      await vi.waitFor(() => expect(ticks).toBeGreaterThan(seen), WAIT);
      stop.abort();
      await ticking;
    });

    it('root in the environment can neither move, replace nor cover berth-envd: a killed serve comes back as the real one', async () => {
      const env = await lease('box');
      const real = createHash('sha256')
        .update(await readFile(ENVD_BINARY))
        .digest('hex');
      const steps = {
        rename: 'mv /.berth /x',
        move: 'mv /.berth/envd /tmp/envd',
        write: 'echo x > /.berth/envd',
        remove: 'rm -rf /.berth',
        cover: 'mkdir -p /tmp/fake && cp /bin/busybox /tmp/fake/envd && mount --bind /tmp/fake /.berth',
        mount: 'mount -t tmpfs none /.berth',
        unmount: 'umount -l /.berth',
        remount: 'mount -o remount,rw /.berth',
      };
      const tried = await sh(
        env.id,
        `${Object.entries(steps)
          .map(([name, step]) => `${step}; echo "${name} $?"`)
          .join('; ')}; sha256sum /.berth/envd`,
      );
      expect(tried.stdout, JSON.stringify(tried)).toContain(`\n${real}  /.berth/envd\n`);
      for (const name of Object.keys(steps)) expect(tried.stdout, JSON.stringify(tried)).toMatch(new RegExp(`^${name} [1-9]`, 'm'));
      // Its line ended: the node opens another, to /.berth/envd, which is still the real one.
      await sh(env.id, `kill -9 $(ps -o pid,args | awk '/envd serve/ && !/awk/ {print $1}')`);
      const ran = await sh(env.id, 'echo "the real command"; exit 7');
      expect(ran, JSON.stringify(ran)).toMatchObject({ exitCode: 7, stdout: 'the real command\n' });
      expect(await recorded(s.url, BOOTSTRAP, env.id, 'the real command')).toMatchObject({ exitCode: 7 });
      const after = await sh(env.id, "ps -o args | grep -c '^/.berth/envd serve'; sha256sum /.berth/envd");
      expect(after.stdout).toBe(`1\n${real}  /.berth/envd\n`);
    });

    it('an image whose /.berth is a link cannot be leased: it would move berth-envd to where the environment may replace it', async () => {
      const made = await admin.post('/v1/environments', { template: 'linked' });
      const failed = await untilState(s, BOOTSTRAP, made.body.environment.id, 'failed');
      expect(failed.error).toMatch(/\/\.berth is not a folder/);
      expect(await containersOf(made.body.environment.id)).toEqual([]);
    });

    it('a caller that reads slowly slows the command down, and then gets all of its output', async () => {
      const env = await lease('box');
      const total = 30_000_000;
      const res = await new Promise<IncomingMessage>((resolve, reject) => {
        const req = request(`${s.url}/v1/environments/${env.id}/exec`, {
          method: 'POST',
          headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
        });
        req.once('response', resolve);
        req.once('error', reject);
        req.end(JSON.stringify({ command: ['sh', '-c', `head -c ${total} /dev/zero; touch /tmp/done`] }));
      });
      expect(res.statusCode).toBe(200);
      const chunks: Buffer[] = [];
      // The caller takes the first bytes, then reads nothing more for a while.
      await new Promise<void>((resolve) =>
        res.once('data', (chunk: Buffer) => {
          res.pause();
          chunks.push(chunk);
          resolve();
        }),
      );
      // Meanwhile the command waits for the caller: looked at for 3 s from inside, it does not end
      // (unchecked, 30 MB pass in well under a second).
      const watch = 'i=0; while [ $i -lt 30 ]; do test -e /tmp/done && { echo ended; exit; }; sleep 0.1; i=$((i+1)); done; echo waiting';
      expect((await sh(env.id, watch)).stdout).toBe('waiting\n');
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.resume();
      await once(res, 'end');
      const lines = Buffer.concat(chunks)
        .toString()
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      const bytes = lines.filter((l) => l.stream === 'stdout').reduce((n, l) => n + Buffer.from(l.data, 'base64').length, 0);
      expect(bytes).toBe(total);
      expect(lines.at(-1)).toMatchObject({ exitCode: 0 });
      expect((await sh(env.id, 'test -e /tmp/done; echo $?')).stdout).toBe('0\n');
    });

    it('a graphql-ws subscriber that reads slowly slows runCommand down, and then gets all of its output', async () => {
      const env = await lease('box');
      const total = 30_000_000;
      const ws = new WebSocket(`${s.url.replace(/^http/, 'ws')}/graphql`, 'graphql-transport-ws');
      await once(ws, 'open');
      ws.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${BOOTSTRAP}` } }));
      let bytes = 0;
      let exitCode: number | undefined;
      const first = new Promise<void>((resolve) => {
        ws.on('message', (data: Buffer) => {
          const message = JSON.parse(data.toString());
          if (message.type === 'connection_ack') {
            const query =
              'subscription($env: String!, $cmd: [String!]!) { runCommand(environment: $env, command: $cmd) { stream data exitCode } }';
            const cmd = ['sh', '-c', `head -c ${total} /dev/zero; touch /tmp/done-ws`];
            ws.send(JSON.stringify({ id: '1', type: 'subscribe', payload: { query, variables: { env: env.id, cmd } } }));
          } else if (message.type === 'next') {
            const out = message.payload.data.runCommand;
            if (out.data) bytes += Buffer.from(out.data, 'base64').length;
            if (out.exitCode !== null && out.exitCode !== undefined) exitCode = out.exitCode;
            resolve();
          }
        });
      });
      // The subscriber takes the first event, then reads nothing more for a while.
      await first;
      ws.pause();
      const watch = 'i=0; while [ $i -lt 30 ]; do test -e /tmp/done-ws && { echo ended; exit; }; sleep 0.1; i=$((i+1)); done; echo waiting';
      expect((await sh(env.id, watch)).stdout).toBe('waiting\n');
      const completed = new Promise<void>((resolve) =>
        ws.on('message', (data: Buffer) => JSON.parse(data.toString()).type === 'complete' && resolve()),
      );
      ws.resume();
      await completed;
      ws.close();
      expect(bytes).toBe(total);
      expect(exitCode).toBe(0);
    });

    it("two environments see neither each other's files nor processes", async () => {
      const a = await lease('box');
      const b = await lease('box');
      // setsid: a process of a session of its own outlives the command that started it.
      await sh(a.id, 'echo secret > /workspace/src/mine; setsid sh -c "sleep 120 </dev/null >/dev/null 2>&1 &"; echo started');
      const seen = await sh(b.id, 'ls -A /workspace/src; ps -o args | grep -c "^sleep 120" || true');
      expect(seen.stdout).toBe('0\n');
      // The whole answer, so a failure shows its status, error and exit code too.
      expect(await sh(a.id, 'ps -o args | grep -c "^sleep 120"')).toMatchObject({ status: 200, stdout: '1\n', exitCode: 0 });
    });

    it('network none has only loopback and reaches neither the server nor this machine', async () => {
      const env = await lease('box');
      const links = await sh(env.id, 'ip -o link | cut -d: -f2');
      expect(links.stdout.trim()).toBe('lo');
      const port = new URL(s.url).port;
      for (const host of ['127.0.0.1', ...hostAddresses()]) {
        const probe = await sh(env.id, `nc -w 2 ${host} ${port} </dev/null 2>&1; echo "exit $?"`);
        expect(probe.stdout, host).not.toContain('exit 0');
        expect(probe.stdout, host).toMatch(/unreachable|refused/i);
      }
    });

    it('egress reaches neither this machine, its gateway nor a neighbour, and cannot undo its rules', async () => {
      const env = await lease('egress');
      const neighbour = await lease('egress');
      const neighbourIp = (await sh(neighbour.id, "ip -o -4 addr show | grep -v ' lo ' | awk '{print $4}' | cut -d/ -f1")).stdout.trim();
      const gateway = (await sh(env.id, "ip route | awk '/default/ {print $3}'")).stdout.trim();
      expect(neighbourIp).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      const port = new URL(s.url).port;
      // Every one of them is this machine's or one of its containers': no probe leaves it.
      const targets = [...hostAddresses().map((h) => `${h}:${port}`), `${gateway}:${port}`, `${neighbourIp}:80`];
      for (const target of targets) {
        const [host, port] = target.split(':');
        const probe = await sh(env.id, `nc -w 2 ${host} ${port} </dev/null 2>&1; echo "exit $?"`);
        expect(probe.stdout, target).not.toContain('exit 0');
        expect(probe.stdout, target).toMatch(/denied|prohibited|unreachable|not permitted|timed out|refused/i);
      }
      const undo = await sh(env.id, 'ip rule del prio 10 2>&1; ip rule flush 2>&1; ip rule | grep -c prohibit');
      expect(undo.stdout).toMatch(/not permitted/i);
      expect(Number(undo.stdout.trim().split('\n').at(-1))).toBeGreaterThan(0);
    });

    /**
     * Gives this machine `address` on a veth of the test's own (checked local), listens there, and
     * probes it from the environment once `ready` has run: prohibited, and no connection arrives.
     * Skips the test where this machine cannot make links.
     */
    const probeOwnAddress = async (
      ctx: { skip: (note: string) => void },
      envId: string,
      address: string,
      ready: () => Promise<unknown> = async () => undefined,
    ) => {
      const own = await ownAddress(address);
      if ('missing' in own) return ctx.skip(own.missing);
      const listener = await countingListener(address).catch(async (error) => {
        await own.remove();
        throw error;
      });
      try {
        await ready();
        const probe = await sh(envId, `nc -w 2 ${address} ${listener.port} </dev/null 2>&1; echo "exit $?"`);
        expect(probe.stdout).not.toContain('exit 0');
        expect(probe.stdout).toMatch(/denied|prohibited/i);
        expect(listener.connections()).toBe(0);
      } finally {
        listener.close();
        await own.remove();
      }
    };

    it("egress reaches no link-local address: one of this machine's own, made for the test, is prohibited", async (ctx) => {
      const env = await lease('egress');
      // Link-local addresses (cloud metadata among them) are blocked as a whole, never one by one.
      expect((await sh(env.id, 'ip rule')).stdout).toMatch(/to 169\.254\.0\.0\/16 .*prohibit/);
      await probeOwnAddress(ctx, env.id, `169.254.77.${randomInt(1, 255)}`);
    });

    it('egress never reaches an address this machine gains while the environment runs', async (ctx) => {
      const env = await lease('egress');
      // 198.18.0.0/15 (benchmarking) is no one's on this machine but what the test gives it.
      const address = `198.18.${randomInt(0, 256)}.${randomInt(1, 255)}`;
      const rule = new RegExp(`to ${address.replaceAll('.', '\\.')} .*prohibit`);
      await probeOwnAddress(ctx, env.id, address, () =>
        vi.waitFor(async () => expect((await sh(env.id, 'ip rule')).stdout).toMatch(rule), WAIT),
      );
    });

    it("a service tunnel reaches the environment's own loopback and never a port of this machine", async () => {
      const name = `tunnel-${kind.replace(/\W/g, '')}`;
      const key = (await admin.post('/v1/sandboxes', { name })).body.key;
      const credential = (await client(() => s.url).post('/v1/sandboxes/join', { key })).body.credential;
      const made = await admin.post('/v1/environments', { template: 'box', sandbox: name });
      const env = await untilState(s, BOOTSTRAP, made.body.environment.id, 'ready');
      // The template's target is 127.0.0.1:8080: the server's own port 8080 on this machine, were
      // the node to dial it itself. Nothing listens in the environment yet: refused, not this machine.
      const early = await openRelay(s.url, credential, { environment: env.id, kind: 'import', service: 'web' });
      const closed = await new Promise<string>((resolve) => {
        early.once('close', (_code, reason) => resolve(reason.toString()));
        early.resume();
      });
      expect(closed).toMatch(/cannot reach port 8080/);
      // A port this machine's loopback answers on is the environment's own port, where nothing listens.
      const toHost = await openRelay(s.url, credential, { environment: env.id, kind: 'import', service: 'host' });
      let leaked = '';
      toHost.on('message', (data: Buffer, binary: boolean) => {
        if (binary) leaked += data.toString();
      });
      const refused = await new Promise<string>((resolve) => {
        toHost.once('close', (_code, reason) => resolve(reason.toString()));
        toHost.resume();
      });
      expect(refused).toMatch(new RegExp(`cannot reach port ${HOST_PORT}`));
      expect(leaked).toBe('');
      let served: Promise<Ran> | undefined;
      await new Promise<void>((resolve) => {
        served = run(env.id, ['sh', '-c', 'echo ready; echo inside-the-environment | nc -l -p 8080'], undefined, (t) => {
          if (t.includes('ready')) resolve();
        });
      });
      // Until nc listens (it starts just after "ready"), a tunnel is refused like the early one.
      let got = '';
      while (!got.includes('inside-the-environment')) {
        const ws = await openRelay(s.url, credential, { environment: env.id, kind: 'import', service: 'web' });
        got = await new Promise<string>((resolve) => {
          let text = '';
          ws.on('message', (data: Buffer, binary: boolean) => {
            if (binary) text += data.toString();
            if (text.includes('inside-the-environment')) ws.close();
          });
          ws.once('close', () => resolve(text));
          // What the service said first came with the relay's upgrade: it waited in the socket until now.
          ws.resume();
        });
      }
      expect(got).toBe('inside-the-environment\n');
      expect((await served)?.exitCode).toBe(0);
    });

    it('a missing image fails the lease naming it; files-only environments refuse commands and tunnels', async () => {
      const made = await admin.post('/v1/environments', { template: 'missing' });
      const failed = await untilState(s, BOOTSTRAP, made.body.environment.id, 'failed');
      expect(failed.error).toContain(MISSING_IMAGE);
      const files = await lease('files');
      expect(files).toMatchObject({ runtime: 'files' });
      expect(files.image).toBeUndefined();
      const refused = await run(files.id, ['true']);
      expect(refused.status).toBe(409);
      expect(refused.error).toMatchObject({ code: 'no_runtime' });
      expect(refused.error!.error).toMatch(/holds files only: template files has no image/);
    });

    it('a link the environment plants in a share is never followed by the snapshot or the restore', async () => {
      const key = `links-${kind.replace(/\W/g, '')}`;
      const made = await admin.post('/v1/environments', { template: 'box', snapshot: key });
      const env = await untilState(s, BOOTSTRAP, made.body.environment.id, 'ready');
      const planted = await sh(
        env.id,
        `echo real > /workspace/out/real; ln -s ${join(s.dataDir, 'master.key')} /workspace/out/key; ln -s ${s.dataDir} /workspace/out/data; ln -s /etc /workspace/src/etc`,
      );
      expect(planted.exitCode).toBe(0);
      await admin.del(`/v1/environments/${env.id}`);
      await untilState(s, BOOTSTRAP, env.id, 'stopped');
      const next = await admin.post('/v1/environments', { template: 'box', snapshot: key });
      const restored = await untilState(s, BOOTSTRAP, next.body.environment.id, 'ready');
      const seen = await sh(restored.id, 'cd /workspace && find . | sort; cat out/real');
      expect(seen.stdout).toBe('.\n./out\n./out/real\n./src\nreal\n');
    });

    it('a main process killed for memory fails the lease with the reason; its container is removed', async () => {
      const env = await lease('hog');
      await sh(env.id, 'touch /tmp/go');
      const failed = await untilState(s, BOOTSTRAP, env.id, 'failed');
      expect(failed.error).toMatch(/out of memory \(limit 64MiB\)|exited with code 137/);
      // The server records the end, then asks the node to discard what is left.
      await expect.poll(() => containersOf(env.id)).toEqual([]);
    });
  });
}
