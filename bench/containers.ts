/**
 * Containers benchmark (issue 17): what a lease and a command cost through Berth against the
 * engine's own commands on the same image and container, measured in one run.
 *
 *   npm run bench:containers
 *
 * Berth runs as `npm start` does (src/app/main.ts, PGlite, a temp folder) with the built-in pool on a
 * Podman service of its own (BENCH_ENGINE names another), and the offline busybox test image.
 * - Lease to ready: BENCH_LEASES (20) leases one after another, each ended before the next; the
 *   environment's own `readyMs` (lease to ready, measured by the server), against `podman run -d`
 *   of the same image with the same limits (wall time of the command).
 * - Warm lease to ready: the same BENCH_LEASES on a template of the same image and limits with
 *   `warm: 2` (docs/environments.md, "Warm templates"), each after the pool has refilled (as the
 *   `berth_warm_containers` gauge says), against the cold leases above: readyMs p50 and the ratio.
 * - Exec round trip: BENCH_EXECS (50) `POST /v1/environments/{id}/exec` of `true`, read to the end
 *   by this client, against `podman exec <its container> true`.
 * Both report p50 and p90 and the ratio of the p50s (lower is better for Berth).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { writeCatalog } from '../test/helpers/catalog';
import { benchEngine, PODMAN_FLAGS, podman, TEST_IMAGE } from '../test/helpers/engine-setup';
import { type BerthProc, startBerth } from '../test/helpers/processes';
import { untilWarm } from './berth';
import { knob, pct } from './environments/common';
import { restCalls } from './rest';

const run = promisify(execFile);
const TOKEN = 'bct_bench-containers-0123456789abcdef';
const METRICS = 'bench-containers-metrics-0123456789abcdef';
const LEASES = knob('BENCH_LEASES', 20);
const EXECS = knob('BENCH_EXECS', 50);

const api = restCalls(TOKEN);

async function until(berth: BerthProc, id: string, state: string): Promise<{ readyMs: number }> {
  for (;;) {
    const env = await api<{ state: string; readyMs: number; error?: string }>(berth, 'GET', `/v1/environments/${id}`);
    if (env.state === state) return env;
    if (['failed', 'stopped'].includes(env.state)) throw new Error(`environment ${id} is ${env.state}: ${env.error}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** One exec of `true` through Berth, read to its last line; milliseconds. */
async function execOnce(berth: BerthProc, id: string): Promise<number> {
  const start = performance.now();
  const res = await fetch(`${berth.url}/v1/environments/${id}/exec`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ command: ['true'] }),
  });
  const text = await res.text();
  if (!text.includes('"exitCode":0')) throw new Error(`exec failed: ${text}`);
  return performance.now() - start;
}

async function timed(args: string[]): Promise<number> {
  const start = performance.now();
  await run('podman', [...PODMAN_FLAGS, ...args]);
  return performance.now() - start;
}

async function main() {
  const { engine, stop } = await benchEngine();
  const base = await mkdtemp(join(tmpdir(), 'berth-bench-containers-'));
  const limits = { memory: '256MiB', pids: 256, cpus: 1 };
  const templates = await writeCatalog(base, [
    { name: 'box', image: TEST_IMAGE, startMs: 0, resources: limits },
    { name: 'warmbox', image: TEST_IMAGE, startMs: 0, resources: limits, warm: 2 },
  ]);
  const berth = await startBerth({
    DATA_DIR: join(base, 'data'),
    BOOTSTRAP_TOKEN: TOKEN,
    METRICS_TOKEN: METRICS,
    TEMPLATES_FILE: templates,
    DOCKER_HOST: engine,
  });
  const peers: string[] = [];
  try {
    const ready: number[] = [];
    const podmanRun: number[] = [];
    const runArgs = ['run', '-d', '--network', 'none', '--memory', '256m', '--memory-swap', '256m', '--pids-limit', '256', '--cpus', '1'];
    const ulimits = ['--ulimit', 'nofile=1024:8192', '--ulimit', 'nproc=16384'];
    for (let i = 0; i < LEASES; i++) {
      const created = await api<{ environment: { id: string } }>(berth, 'POST', '/v1/environments', { template: 'box' });
      ready.push((await until(berth, created.environment.id, 'ready')).readyMs);
      await api(berth, 'DELETE', `/v1/environments/${created.environment.id}`);
      const name = `berth-bench-peer-${i}`;
      peers.push(name);
      podmanRun.push(await timed([...runArgs, ...ulimits, '--name', name, TEST_IMAGE, 'sleep', '600']));
      podman('rm', '-f', '--time', '0', name);
    }
    const warm: number[] = [];
    for (let i = 0; i < LEASES; i++) {
      await untilWarm(berth.url, METRICS, 'warmbox', 2);
      const created = await api<{ environment: { id: string } }>(berth, 'POST', '/v1/environments', { template: 'warmbox' });
      warm.push((await until(berth, created.environment.id, 'ready')).readyMs);
      await api(berth, 'DELETE', `/v1/environments/${created.environment.id}`);
    }
    const created = await api<{ environment: { id: string } }>(berth, 'POST', '/v1/environments', { template: 'box' });
    const id = created.environment.id;
    await until(berth, id, 'ready');
    const container = `berth-${id}`;
    const berthExec: number[] = [];
    const podmanExec: number[] = [];
    await execOnce(berth, id);
    await timed(['exec', container, 'true']);
    for (let i = 0; i < EXECS; i++) {
      berthExec.push(await execOnce(berth, id));
      podmanExec.push(await timed(['exec', container, 'true']));
    }
    await api(berth, 'DELETE', `/v1/environments/${id}`);
    const f = (n: number) => n.toFixed(0);
    console.log(`containers benchmark (${engine}, image ${TEST_IMAGE})`);
    console.log(
      `  lease to ready (readyMs, n=${LEASES}): p50 ${f(pct(ready, 50))} ms, p90 ${f(pct(ready, 90))} ms; ` +
        `podman run -d: p50 ${f(pct(podmanRun, 50))} ms, p90 ${f(pct(podmanRun, 90))} ms; ratio ${(pct(ready, 50) / pct(podmanRun, 50)).toFixed(2)}x`,
    );
    console.log(
      `  warm lease to ready (readyMs, n=${LEASES}): p50 ${f(pct(warm, 50))} ms, p90 ${f(pct(warm, 90))} ms; ` +
        `ratio to cold ${(pct(warm, 50) / pct(ready, 50)).toFixed(2)}x`,
    );
    console.log(
      `  exec round trip (n=${EXECS}): p50 ${f(pct(berthExec, 50))} ms, p90 ${f(pct(berthExec, 90))} ms; ` +
        `podman exec: p50 ${f(pct(podmanExec, 50))} ms, p90 ${f(pct(podmanExec, 90))} ms; ratio ${(pct(berthExec, 50) / pct(podmanExec, 50)).toFixed(2)}x`,
    );
  } finally {
    for (const name of peers) {
      try {
        podman('rm', '-f', '--time', '0', name);
      } catch {
        // already gone
      }
    }
    await berth.kill();
    await rm(base, { recursive: true, force: true });
    await stop();
  }
}

await main();
