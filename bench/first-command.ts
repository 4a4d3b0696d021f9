/**
 * Lease to first command (issue 35), the way independent sandbox benchmarks measure a sandbox
 * service: create, wait until ready, run `echo hi`; every run's wall time and whether it succeeded.
 *
 *   npm run bench:first-command
 *
 * Berth runs as in bench:containers (PGlite in a temp folder, or with BENCH_DATABASE_URL a fresh
 * schema of that PostgreSQL; the built-in node on a Podman service of its own or BENCH_ENGINE; the
 * offline busybox test image) with a template of `warm: 4`. Once
 * four warm containers are ready, BENCH_RUNS (40) runs start one a second (a run slower than a
 * second overlaps the next, as with real traffic); each is `POST /v1/environments`, the CLI's wait
 * (a GraphQL subscription over SSE until `ready`), then `POST /v1/environments/{id}/exec` of
 * `echo hi` read to its end, and its lease is ended afterwards. Against it, BENCH_PEER_RUNS (10)
 * `podman run --rm IMAGE echo hi` on the same engine, measured before and after.
 * It reports the success rate, p50/p95/p99 of each, the parts of Berth's p50 (create call, wait,
 * exec, and the server's own readyMs), and the ratios: goals p50 ≤ 0.15x of podman run and p95 ≤ 2x p50. It exits 1 when a run
 * fails; goals missed are reported, not fatal (the machine is shared).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { BerthClient } from '../src/cli/client';
import { waitForReady } from '../src/cli/env';
import { PODMAN_FLAGS, TEST_IMAGE } from '../test/helpers/engine-setup';
import { benchBerth, untilWarm } from './berth';
import { knob, pct, sleep } from './environments/common';

const run = promisify(execFile);
const TOKEN = 'bct_bench-first-command-0123456789ab';
const METRICS = 'bench-first-command-metrics-0123456789';
const RUNS = knob('BENCH_RUNS', 40);
const PEER_RUNS = knob('BENCH_PEER_RUNS', 10);
const WARM = 4;

interface Timed {
  ok: boolean;
  total: number;
  create: number;
  wait: number;
  exec: number;
  /** The exec's durationMs: the node, the line into the container and the command. */
  execNode: number;
  /** The server's own lease to ready. */
  readyMs: number;
  error?: string;
}

async function firstCommand(client: BerthClient): Promise<Timed> {
  const start = performance.now();
  let id: string | undefined;
  try {
    const { environment } = await client.post<{ environment: { id: string; state: string } }>('/v1/environments', { template: 'warm' });
    id = environment.id;
    const created = performance.now();
    const ready = await waitForReady(client, environment.id, () => undefined);
    if (ready.state !== 'ready') throw new Error(`environment ${ready.id} is ${ready.state}: ${ready.error}`);
    const readyAt = performance.now();
    const res = await fetch(`${client.base}/v1/environments/${environment.id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: '{"command":["echo","hi"]}',
    });
    const lines = (await res.text()).trim().split('\n');
    const out = lines.map((l) => JSON.parse(l) as { data?: string; exitCode?: number; exec?: { durationMs: number } });
    const said = Buffer.concat(out.filter((l) => l.data).map((l) => Buffer.from(l.data!, 'base64'))).toString();
    if (said !== 'hi\n' || out.at(-1)?.exitCode !== 0) throw new Error(`echo hi answered ${lines.join(' ')}`);
    const end = performance.now();
    return {
      ok: true,
      total: end - start,
      create: created - start,
      wait: readyAt - created,
      exec: end - readyAt,
      execNode: out.at(-1)?.exec?.durationMs ?? 0,
      readyMs: ready.readyMs ?? 0,
    };
  } catch (error) {
    return { ok: false, total: performance.now() - start, create: 0, wait: 0, exec: 0, execNode: 0, readyMs: 0, error: String(error) };
  } finally {
    if (id) await client.delete(`/v1/environments/${id}`).catch(() => undefined);
  }
}

async function podmanRun(): Promise<number> {
  const start = performance.now();
  const { stdout } = await run('podman', [
    ...PODMAN_FLAGS,
    'run',
    '--rm',
    '--network',
    'none',
    '--ulimit',
    'nofile=1024:8192',
    '--ulimit',
    'nproc=16384',
    TEST_IMAGE,
    'echo',
    'hi',
  ]);
  if (stdout !== 'hi\n') throw new Error(`podman run said ${stdout}`);
  return performance.now() - start;
}

async function main() {
  const bench = await benchBerth({
    name: 'first',
    templates: [{ name: 'warm', image: TEST_IMAGE, startMs: 0, resources: { memory: '256MiB', pids: 256, cpus: 1 }, warm: WARM }],
    env: { BOOTSTRAP_TOKEN: TOKEN, METRICS_TOKEN: METRICS },
  });
  const { berth, engine } = bench;
  try {
    const client = new BerthClient({ server: berth.url, token: TOKEN });
    const peer: number[] = [];
    await podmanRun();
    for (let i = 0; i < PEER_RUNS / 2; i++) peer.push(await podmanRun());
    await untilWarm(berth.url, METRICS, 'warm', WARM);
    // One run first, not counted: the first request of each kind compiles its code.
    await firstCommand(client);
    await untilWarm(berth.url, METRICS, 'warm', WARM);
    const started = performance.now();
    const runs = await Promise.all(
      Array.from({ length: RUNS }, async (_, i) => {
        await sleep(started + i * 1000 - performance.now());
        return firstCommand(client);
      }),
    );
    for (let i = PEER_RUNS / 2; i < PEER_RUNS; i++) peer.push(await podmanRun());
    const good = runs.filter((r) => r.ok);
    const f = (n: number) => n.toFixed(0);
    const of = (key: keyof Omit<Timed, 'ok' | 'error'>) => good.map((r) => r[key]);
    const total = of('total');
    console.log(`first-command benchmark (${bench.database}, ${engine}, image ${TEST_IMAGE}, warm: ${WARM}, one lease a second)`);
    console.log(`  success: ${good.length}/${runs.length}`);
    for (const r of runs.filter((r) => !r.ok)) console.log(`    failed: ${r.error}`);
    if (good.length > 0) {
      console.log(
        `  create → ready → echo hi: p50 ${f(pct(total, 50))} ms, p95 ${f(pct(total, 95))} ms, p99 ${f(pct(total, 99))} ms ` +
          `(p50 of its parts: create ${f(pct(of('create'), 50))}, wait ${f(pct(of('wait'), 50))}, exec ${f(pct(of('exec'), 50))} ms (on the node ${f(pct(of('execNode'), 50))}); the server's readyMs ${f(pct(of('readyMs'), 50))} ms)`,
      );
      console.log(`  podman run --rm IMAGE echo hi (n=${peer.length}): p50 ${f(pct(peer, 50))} ms, p95 ${f(pct(peer, 95))} ms`);
      console.log(
        `  p50 ${(pct(total, 50) / pct(peer, 50)).toFixed(2)}x of podman run (goal ≤ 0.15x); ` +
          `p95 ${(pct(total, 95) / pct(total, 50)).toFixed(2)}x of p50 (goal ≤ 2x)`,
      );
    }
    if (good.length < runs.length) process.exitCode = 1;
  } finally {
    await bench.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
