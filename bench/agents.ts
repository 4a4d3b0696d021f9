/**
 * Agents benchmark (issue 11): the sandbox agent's relay against its peers, measured in one run.
 *
 *   npm run bench:agents
 *
 * Berth and `berth agent` run as processes of their own on loopback (PGlite, temp folders).
 * - Tunnel throughput: BENCH_TUNNEL_MIB (256) MiB sent through an import's listen port (agent ->
 *   Berth relay -> the built-in node -> berth-envd dial inside the environment's container -> a
 *   byte counter there) against the same copy straight to a counter on this machine.
 *   The built-in pool runs on a Podman service of its own (BENCH_ENGINE names another).
 * - Round-trip latency: BENCH_ROUNDS (2000) sequential 64-byte echoes on one connection, p50/p99,
 *   through the tunnel (to an echo in the environment) and direct (to one on this machine).
 * - New connections: BENCH_CONNECTIONS (100) connections one after another, each from its connect
 *   to its first echoed byte, p50/p99, through the tunnel and direct. The echo in the environment is
 *   busybox `nc -ll -e cat`, which starts a `cat` per connection; so "direct" is measured twice: to
 *   an echo of this process's own, and to the same busybox echo run on this machine (where busybox
 *   is installed; it listens on every address of the machine for the few seconds it runs).
 * - Initial sync: a BENCH_FILES (10,000)-file tree sent into an `in` share (this process plays the
 *   sandbox side with the agent's own code: the relay socket and sendFolder, until the node side
 *   acknowledged the whole batch) against `tar c | tar x` of the same tree on this machine.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { openRelay } from '../src/agent/sandbox-agent';
import { duplexPair, sendFolder } from '../src/dataplane/folder-sync';
import { bridge } from '../src/dataplane/ws-bridge';
import { benchEngine, TEST_ECHO_IMAGE } from '../test/helpers/engine-setup';
import { answers, type BerthProc, spawnNode, startBerth } from '../test/helpers/processes';
import { cpuSeconds } from './process-cpu';
import { restCalls } from './rest';

const TOKEN = 'bct_bench-agents-0123456789abcdef0123';
const MIB = 1024 * 1024;
const num = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const TUNNEL_MIB = num('BENCH_TUNNEL_MIB', 256);
const ROUNDS = num('BENCH_ROUNDS', 2000);
const FILES = num('BENCH_FILES', 10_000);
const CONNECTIONS = num('BENCH_CONNECTIONS', 100);
const run = promisify(execFile);

/** Counts what a connection sends until it half-closes, then answers the count (8 bytes). */
async function sinkServer(): Promise<net.Server> {
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    let bytes = 0;
    socket.on('data', (c: Buffer) => {
      bytes += c.length;
    });
    // As `wc -c` answers in the environment's sink: the count as a line of text.
    socket.on('end', () => socket.end(`${bytes}\n`));
    socket.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return server;
}

async function echoServer(): Promise<net.Server> {
  const server = net.createServer((socket) => {
    socket.setNoDelay(true);
    socket.on('error', () => undefined);
    socket.pipe(socket);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return server;
}

const portOf = (s: net.Server) => (s.address() as net.AddressInfo).port;

/** Sends `total` bytes to port and waits for the sink's count; answers seconds. */
function copy(port: number, total: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const block = randomBytes(MIB);
    const start = process.hrtime.bigint();
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const got: Buffer[] = [];
    socket.on('data', (c: Buffer) => got.push(c));
    socket.on('end', () => {
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      const count = Number.parseInt(Buffer.concat(got).toString().trim(), 10);
      socket.end();
      if (Number(count) !== total) reject(new Error(`sink counted ${count} bytes of ${total}`));
      else resolve(seconds);
    });
    socket.on('error', reject);
    socket.on('connect', () => {
      let sent = 0;
      const pump = () => {
        while (sent < total) {
          const n = Math.min(MIB, total - sent);
          sent += n;
          if (!socket.write(n === MIB ? block : block.subarray(0, n))) return void socket.once('drain', pump);
        }
        socket.end();
      };
      pump();
    });
  });
}

/** `rounds` sequential 64-byte echoes on one connection after a warm-up; answers microseconds each. */
function roundTrips(port: number, rounds: number): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    socket.setNoDelay(true);
    const message = randomBytes(64);
    const times: number[] = [];
    const warmup = Math.min(200, rounds);
    let pending = 0;
    let started = 0n;
    let i = 0;
    const send = () => {
      pending = message.length;
      started = process.hrtime.bigint();
      socket.write(message);
    };
    socket.on('data', (c: Buffer) => {
      pending -= c.length;
      if (pending > 0) return;
      if (i >= warmup) times.push(Number(process.hrtime.bigint() - started) / 1e3);
      i++;
      if (i < rounds + warmup) send();
      else {
        socket.end();
        resolve(times);
      }
    });
    socket.on('error', reject);
    socket.on('connect', send);
  });
}

/** The environment's echo program run on this machine (busybox `nc -ll -e cat` on a free port), or undefined without busybox. */
async function busyboxEcho(): Promise<{ port: number; stop: () => void } | undefined> {
  const free = net.createServer();
  await new Promise<void>((r) => free.listen(0, '127.0.0.1', () => r()));
  const port = portOf(free);
  await new Promise<void>((r) => free.close(() => r()));
  const child = spawn('busybox', ['nc', '-ll', '-p', String(port), '-e', 'cat'], { stdio: 'ignore' });
  const failed = new Promise<undefined>((resolve) => child.once('error', () => resolve(undefined)));
  const listening = (async () => {
    for (let attempt = 0; attempt < 200; attempt++) {
      if (await answers(port)) return { port, stop: () => child.kill() };
      await new Promise((r) => setTimeout(r, 10));
    }
    child.kill();
    return undefined;
  })();
  return Promise.race([failed, listening]);
}

/** `count` connections one after another: each from its connect to its first echoed byte, closed after; microseconds each. */
async function firstBytes(port: number, count: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    times.push(
      await new Promise<number>((resolve, reject) => {
        const started = process.hrtime.bigint();
        const socket = net.connect({ port, host: '127.0.0.1' });
        socket.setNoDelay(true);
        socket.once('connect', () => socket.write('x'));
        socket.once('data', () => {
          resolve(Number(process.hrtime.bigint() - started) / 1e3);
          socket.end();
        });
        socket.once('error', reject);
      }),
    );
  }
  return times;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function makeTree(root: string, files: number): Promise<number> {
  let bytes = 0;
  const perDir = 100;
  for (let d = 0; d * perDir < files; d++) {
    const dir = join(root, `dir-${String(d).padStart(3, '0')}`);
    await mkdir(dir, { recursive: true });
    for (let f = 0; f < perDir && d * perDir + f < files; f++) {
      const size = 256 + ((d * perDir + f) % 16) * 256; // 256 B .. 4 KiB
      await writeFile(join(dir, `file-${f}.txt`), randomBytes(size));
      bytes += size;
    }
  }
  return bytes;
}

const api = restCalls(TOKEN);

async function untilReady(berth: BerthProc, id: string): Promise<void> {
  for (;;) {
    const env = await api<{ state: string }>(berth, 'GET', `/v1/environments/${id}`);
    if (env.state === 'ready') return;
    if (!['pending', 'starting'].includes(env.state)) throw new Error(`environment ${id} is ${env.state}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function main() {
  const base = await mkdtemp(join(tmpdir(), 'berth-bench-agents-'));
  const sink = await sinkServer();
  const echo = await echoServer();
  const templates = join(base, 'templates.json');
  await writeFile(
    templates,
    JSON.stringify({
      pools: [{ name: 'bench', hotNodes: 2, maxQueued: 4 }],
      templates: [
        {
          name: 'bench',
          pool: 'bench',
          startMs: 10,
          idle: '1h',
          hard: '2h',
          // Its command serves a byte counter on 9000 and an echo on 7000, inside the environment.
          image: TEST_ECHO_IMAGE,
          shares: [{ name: 'src', direction: 'in', envPath: '/workspace/src' }],
          services: [
            { service: 'sink', target: '127.0.0.1:9000' },
            { service: 'echo', target: '127.0.0.1:7000' },
          ],
        },
      ],
    }),
  );
  const dataDir = join(base, 'data');
  const { engine, stop } = await benchEngine();
  const berth = await startBerth({
    DATA_DIR: dataDir,
    BOOTSTRAP_TOKEN: TOKEN,
    TEMPLATES_FILE: templates,
    NODE_ENV: 'production',
    DOCKER_HOST: engine,
  });
  let agent: ReturnType<typeof spawnNode> | undefined;
  try {
    // The tunnel: a real `berth agent` with an environment wired to it.
    const agentDir = join(base, 'agent');
    await mkdir(join(agentDir, 'src'), { recursive: true });
    const laptop = await api<{ key: string }>(berth, 'POST', '/v1/sandboxes', { name: 'bench-laptop' });
    agent = spawnNode(['bin/berth.js', 'agent', '--server', berth.url, '--join', laptop.key, '--dir', agentDir], {});
    await agent.waitFor(/connected to/);
    const created = await api<{ environment: { id: string; exports: { service: string; listen: string }[] } }>(
      berth,
      'POST',
      '/v1/environments',
      { template: 'bench', sandbox: 'bench-laptop' },
    );
    const listen = (service: string) => Number(created.environment.exports.find((e) => e.service === service)!.listen.split(':')[1]);
    await untilReady(berth, created.environment.id);
    await agent.waitFor(/forwarding echo/);
    await agent.waitFor(/forwarding sink/);

    const total = TUNNEL_MIB * MIB;
    // Warm both paths once, then measure each twice, alternating, and keep the better of each.
    await copy(listen('sink'), 16 * MIB);
    await copy(portOf(sink), 16 * MIB);
    const direct: number[] = [];
    const tunnel: number[] = [];
    // CPU of the relay's two processes over the tunnel copies: steadier than wall time on a busy machine.
    const relayCpu = { berth: 0, agent: 0 };
    const bench = { direct: 0, tunnel: 0 };
    for (let i = 0; i < 2; i++) {
      let own = process.cpuUsage();
      direct.push(await copy(portOf(sink), total));
      own = process.cpuUsage(own);
      bench.direct += (own.user + own.system) / 1e6;
      const before = { berth: await cpuSeconds(berth.proc.pid!), agent: await cpuSeconds(agent.proc.pid!), own: process.cpuUsage() };
      tunnel.push(await copy(listen('sink'), total));
      const mine = process.cpuUsage(before.own);
      bench.tunnel += (mine.user + mine.system) / 1e6;
      relayCpu.berth += (await cpuSeconds(berth.proc.pid!)) - before.berth;
      relayCpu.agent += (await cpuSeconds(agent.proc.pid!)) - before.agent;
    }
    const msPerMib = (seconds: number) => (seconds * 1000) / (2 * TUNNEL_MIB);
    const directMibS = TUNNEL_MIB / Math.min(...direct);
    const tunnelMibS = TUNNEL_MIB / Math.min(...tunnel);

    const directRtt = await roundTrips(portOf(echo), ROUNDS);
    const tunnelRtt = await roundTrips(listen('echo'), ROUNDS);
    const directFirst = await firstBytes(portOf(echo), CONNECTIONS);
    const sameEcho = await busyboxEcho();
    const sameFirst = sameEcho && (await firstBytes(sameEcho.port, CONNECTIONS).finally(sameEcho.stop));
    const tunnelFirst = await firstBytes(listen('echo'), CONNECTIONS);

    // Initial sync: a second sandbox, played by this process with the agent's code.
    const tree = join(base, 'tree');
    const bytes = await makeTree(tree, FILES);
    const reg = await api<{ key: string }>(berth, 'POST', '/v1/sandboxes', { name: 'bench-sync' });
    const joined = await api<{ credential: string; sandbox: { id: string } }>(berth, 'POST', '/v1/sandboxes/join', { key: reg.key });
    const syncEnv = await api<{ environment: { id: string } }>(berth, 'POST', '/v1/environments', {
      template: 'bench',
      sandbox: 'bench-sync',
      shares: { src: 'tree' },
    });
    await untilReady(berth, syncEnv.environment.id);
    const tarDst = join(base, 'tar-copy');
    await mkdir(tarDst);
    const tarStart = process.hrtime.bigint();
    await run('sh', ['-c', `tar cf - -C "${tree}" . | tar xf - -C "${tarDst}"`]);
    const tarSeconds = Number(process.hrtime.bigint() - tarStart) / 1e9;

    const syncStart = process.hrtime.bigint();
    const ws = await openRelay(berth.url, joined.credential, { environment: syncEnv.environment.id, kind: 'share', share: 'src' });
    const [near, far] = duplexPair();
    const ended = bridge(ws, near);
    const stats = await sendFolder(far, { root: tree, rules: { include: [], noIgnore: false }, watch: false });
    await ended;
    const syncSeconds = Number(process.hrtime.bigint() - syncStart) / 1e9;
    const landed = (
      await readdir(join(dataDir, 'workspaces', syncEnv.environment.id, 'workspace', 'src'), { recursive: true, withFileTypes: true })
    ).filter((e) => e.isFile()).length;
    if (landed !== FILES || stats.files !== FILES) throw new Error(`sync landed ${landed} files, sent ${stats.files}, of ${FILES}`);

    const f = (n: number, d = 1) => n.toFixed(d);
    console.log('\nAgents benchmark (loopback; Berth and berth agent as processes; PGlite)\n');
    console.log(`tunnel throughput, ${TUNNEL_MIB} MiB (best of 2):`);
    console.log(`  direct loopback TCP   ${f(directMibS, 0)} MiB/s`);
    console.log(`  through the relay     ${f(tunnelMibS, 0)} MiB/s   ratio ${f(tunnelMibS / directMibS, 2)}x (goal >= 0.5x)`);
    console.log(
      `  CPU ms per MiB: sender + sink ${f(msPerMib(bench.direct), 2)} direct, ${f(msPerMib(bench.tunnel), 2)} tunnel; ` +
        `berth agent ${f(msPerMib(relayCpu.agent), 2)}, Berth ${f(msPerMib(relayCpu.berth), 2)}`,
    );
    console.log(`round trip, 64 B, ${ROUNDS} sequential:`);
    console.log(`  direct                p50 ${f(percentile(directRtt, 50), 0)} µs   p99 ${f(percentile(directRtt, 99), 0)} µs`);
    console.log(
      `  through the relay     p50 ${f(percentile(tunnelRtt, 50), 0)} µs   p99 ${f(percentile(tunnelRtt, 99), 0)} µs   ` +
        `(p50 ${f(percentile(tunnelRtt, 50) / percentile(directRtt, 50), 1)}x direct)`,
    );
    console.log(`new connection to its first echoed byte, ${CONNECTIONS} one after another:`);
    console.log(`  direct                p50 ${f(percentile(directFirst, 50), 0)} µs   p99 ${f(percentile(directFirst, 99), 0)} µs`);
    if (sameFirst) {
      console.log(
        `  direct, busybox echo  p50 ${f(percentile(sameFirst, 50), 0)} µs   p99 ${f(percentile(sameFirst, 99), 0)} µs   (the environment's echo program)`,
      );
    }
    console.log(
      `  through the relay     p50 ${f(percentile(tunnelFirst, 50) / 1000, 1)} ms   p99 ${f(percentile(tunnelFirst, 99) / 1000, 1)} ms   ` +
        `(p50 ${f(percentile(tunnelFirst, 50) / percentile(directFirst, 50), 1)}x direct` +
        `${sameFirst ? `, ${f(percentile(tunnelFirst, 50) / percentile(sameFirst, 50), 1)}x the same echo direct` : ''}; goal <= 3x)`,
    );
    console.log(`initial sync, ${FILES} files, ${f(bytes / MIB)} MiB:`);
    console.log(`  tar c | tar x         ${f(tarSeconds, 2)} s`);
    console.log(`  berth in-share sync   ${f(syncSeconds, 2)} s   ratio ${f(syncSeconds / tarSeconds, 1)}x the time of tar`);
  } finally {
    await agent?.kill();
    await berth.kill();
    sink.close();
    echo.close();
    await rm(base, { recursive: true, force: true });
    await stop();
  }
}

await main();
process.exit(0);
