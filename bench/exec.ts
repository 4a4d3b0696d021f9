/**
 * Exec benchmark (issue 35): a command's round trip through Berth against a process start on this
 * machine, measured in one run.
 *
 *   npm run bench:exec
 *
 * Berth runs as in bench:containers (PGlite in a temp folder, or with BENCH_DATABASE_URL a fresh
 * schema of that PostgreSQL; the built-in node on a Podman service of its own or BENCH_ENGINE; the
 * offline busybox test image), with one ready environment.
 * - Round trip: BENCH_EXECS (200) `POST /v1/environments/{id}/exec` of `true`, each read to its
 *   last line, one at a time, interleaved with as many starts of `true` on this machine from Node
 *   (spawn to exit): the floor, since the command is one process start inside plus a round trip.
 *   Goals: p50 ≤ 1.5x of the floor's p50, p99 ≤ 5x.
 * - Concurrency: BENCH_CLIENTS (8) clients, each running `true` one after another for
 *   BENCH_SECONDS (10): execs per second. Goal ≥ 150.
 * - The CLI: BENCH_CLI (15) runs of `berth exec ENV -- true` (the checkout's bin/berth.js) against
 *   `node -e 0`, alternated: wall time p50. Goal ≤ 2x. Its input is /dev/null, as `berth exec` from a
 *   terminal or `… </dev/null` in a script (one POST); beside it the same with a pipe for input,
 *   which the command passes on, so it is a session over a WebSocket (docs/agents.md, "Exec").
 * - The engine: the CPU its service (the one started for the run) uses while the environment idles,
 *   which every figure after it competes with.
 * BENCH_PROFILE=DIR writes a CPU profile of the server into DIR
 * (summarize with `tsx bench/cpuprofile-summary.ts DIR/*.cpuprofile`).
 * It exits 1 when a command fails; goals missed are reported, not fatal (the machine is shared).
 */
import { spawn } from 'node:child_process';
import { request } from '../src/cli/http';
import { TEST_IMAGE } from '../test/helpers/engine-setup';
import type { BerthProc } from '../test/helpers/processes';
import { benchBerth } from './berth';
import { knob, pct } from './environments/common';
import { cpuSeconds } from './process-cpu';
import { restCalls } from './rest';

/** Runs a command to its end, its input /dev/null or an empty pipe; fails unless it exits 0. */
function run(file: string, args: string[], options: { env?: NodeJS.ProcessEnv; input?: 'ignore' | 'pipe' } = {}): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env: options.env, stdio: [options.input ?? 'ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (data) => (stderr += data));
    child.stdin?.end();
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${file} ${args.join(' ')} exited ${code}: ${stderr}`))));
  });
}
const TOKEN = 'bct_bench-exec-0123456789abcdef0123';
const EXECS = knob('BENCH_EXECS', 200);
const CLIENTS = knob('BENCH_CLIENTS', 8);
const SECONDS = knob('BENCH_SECONDS', 10);
const CLI_RUNS = knob('BENCH_CLI', 15);

const api = restCalls(TOKEN);

/** The server's durationMs of each exec (node, line and command: what the request adds is the rest). */
const onNode: number[] = [];

/** One exec of `true` through Berth, read to its last line; milliseconds. */
async function execOnce(berth: BerthProc, id: string): Promise<number> {
  const start = performance.now();
  // The CLI's node:http requests (Node's global agent keeps connections alive): fetch took ~3 ms
  // of CPU a request here, a third of a core at 110 execs/s on the two cores Berth is measured on.
  const answer = await request(new URL(`/v1/environments/${id}/exec`, berth.url), {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: '{"command":["true"]}',
  });
  const text = await answer.text();
  if (!text.includes('"exitCode":0')) throw new Error(`exec failed: ${answer.status} ${text}`);
  const elapsed = performance.now() - start;
  onNode.push((JSON.parse(text) as { exec: { durationMs: number } }).exec.durationMs);
  return elapsed;
}

const IDLE_MS = 3_000;

/** The cores process `pid` used over the next `ms`. */
async function coresOf(pid: number, ms: number): Promise<number> {
  const before = await cpuSeconds(pid);
  await new Promise((resolve) => setTimeout(resolve, ms));
  return ((await cpuSeconds(pid)) - before) / (ms / 1000);
}

/** `argv` started from Node and waited for; milliseconds. */
function started(argv: string[]): Promise<number> {
  const start = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: 'ignore' });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(performance.now() - start) : reject(new Error(`${argv.join(' ')}: ${code}`))));
  });
}

async function main() {
  const profile = process.env.BENCH_PROFILE;
  const bench = await benchBerth({
    name: 'exec',
    templates: [{ name: 'box', image: TEST_IMAGE, startMs: 0, resources: { memory: '256MiB', pids: 256, cpus: 1 } }],
    env: { BOOTSTRAP_TOKEN: TOKEN },
    nodeArgs: profile ? ['--cpu-prof', `--cpu-prof-dir=${profile}`] : [],
  });
  const { berth, engine } = bench;
  try {
    const created = await api<{ environment: { id: string; name: string } }>(berth, 'POST', '/v1/environments', { template: 'box' });
    const { id, name } = created.environment;
    for (;;) {
      const env = await api<{ state: string; error?: string }>(berth, 'GET', `/v1/environments/${id}`);
      if (env.state === 'ready') break;
      if (env.state !== 'pending' && env.state !== 'starting') throw new Error(`environment ${id} is ${env.state}: ${env.error}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    for (let i = 0; i < 10; i++) {
      await execOnce(berth, id);
      await started(['true']);
    }
    // What the engine spends while nothing happens is taken from everything measured after it.
    const engineIdle = bench.enginePid ? await coresOf(bench.enginePid, IDLE_MS) : undefined;
    const berthExec: number[] = [];
    const host: number[] = [];
    onNode.length = 0;
    for (let i = 0; i < EXECS; i++) {
      berthExec.push(await execOnce(berth, id));
      host.push(await started(['true']));
    }
    const nodePart = pct(onNode, 50);
    let done = 0;
    const until = performance.now() + SECONDS * 1000;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (performance.now() < until) {
          await execOnce(berth, id);
          done++;
        }
      }),
    );
    const rate = done / SECONDS;
    const cli: number[] = [];
    const piped: number[] = [];
    const bare: number[] = [];
    const env = { ...process.env, BERTH_URL: berth.url, BERTH_TOKEN: TOKEN };
    const berthCli = ['bin/berth.js', 'exec', name, '--', 'true'];
    await run(process.execPath, berthCli, { env });
    const timed = async (into: number[], args: string[], options?: Parameters<typeof run>[2]) => {
      const start = performance.now();
      await run(process.execPath, args, options);
      into.push(performance.now() - start);
    };
    for (let i = 0; i < CLI_RUNS; i++) {
      await timed(cli, berthCli, { env });
      await timed(piped, berthCli, { env, input: 'pipe' });
      await timed(bare, ['-e', '0']);
    }
    await api(berth, 'DELETE', `/v1/environments/${id}`);
    const f = (n: number) => n.toFixed(1);
    const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
    console.log(`exec benchmark (${bench.database}, ${engine}, image ${TEST_IMAGE})`);
    console.log(
      `  round trip of true (n=${EXECS}): p50 ${f(pct(berthExec, 50))} ms, p99 ${f(pct(berthExec, 99))} ms; ` +
        `true started on this machine: p50 ${f(pct(host, 50))} ms, p99 ${f(pct(host, 99))} ms; ` +
        `p50 ${ratio(pct(berthExec, 50), pct(host, 50))} (goal ≤ 1.5x), p99 ${ratio(pct(berthExec, 99), pct(host, 50))} of its p50 (goal ≤ 5x)`,
    );
    console.log(`    of which the server's durationMs (to the node, the command, back): p50 ${nodePart} ms`);
    if (engineIdle !== undefined)
      console.log(`  the engine's service while the environment idles (${IDLE_MS / 1000} s): ${engineIdle.toFixed(2)} cores`);
    console.log(`  ${CLIENTS} clients for ${SECONDS} s: ${rate.toFixed(0)} execs/s (goal ≥ 150)`);
    console.log(
      `  berth exec ENV -- true (n=${CLI_RUNS}): p50 ${f(pct(cli, 50))} ms; node -e 0: p50 ${f(pct(bare, 50))} ms; ` +
        `${ratio(pct(cli, 50), pct(bare, 50))} (goal ≤ 2x)`,
    );
    console.log(`    with a pipe for input (a session): p50 ${f(pct(piped, 50))} ms, ${ratio(pct(piped, 50), pct(bare, 50))}`);
  } finally {
    await bench.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
