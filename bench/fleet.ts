/**
 * The morning rush (issue 32): many leases at once on a fleet of nodes with declared capacities,
 * against the same leases on one node offering the fleet's whole capacity, measured in one run.
 *
 *   npm run bench:fleet
 *
 * Berth runs as `npm start` does (src/app/main.ts, PGlite, a temp folder); BENCH_NODES (3) `berth
 * node` processes serve a pool with `hotNodes: 0`, node i declaring cpus=8i,memory=16iGiB (shares
 * 1:2:3 of the fleet), files only unless BENCH_ENGINE names a container engine. BENCH_LEASES (60)
 * leases of a template allowed 0.5 CPU and 1GiB are made at once. Reported:
 * - every lease ready (the success rate), and lease to ready (`readyMs`, measured by the server)
 *   p50/p99;
 * - the spread: each node's leases against its share of the fleet's capacity;
 * - over-commit: the highest allocated/capacity any node showed on GET /v1/nodes, read every 50 ms
 *   while the leases were placed (1.00 at most is none);
 * - the baseline: the same leases on one node declaring the whole fleet's capacity, and the ratio
 *   of the p50s (what placing across nodes costs over one node).
 *
 * Then the same fleet with a container engine (BENCH_ENGINE, else a Podman service of its own with
 * the test image): BENCH_WARM (30) leases at once of a template with an image, first cold, then
 * with `warm` set to as many, once every warm container is ready: lease to ready p50/p99 of each,
 * how many leases claimed a warm container, the spread and the over-commit (warm containers count
 * against capacity too). Last, BENCH_STEADY (20) leases one a second, each waited for, with
 * `warm: 4`: what a claim of a warm container on a node takes when the fleet is not in a rush.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchEngine, podman, TEST_IMAGE } from '../test/helpers/engine-setup';
import { type Proc, spawnNode, startBerth } from '../test/helpers/processes';
import { knob, pct } from './environments/common';
import { restCalls } from './rest';

const TOKEN = 'bct_bench-fleet-0123456789abcdef0123';
const NODES = knob('BENCH_NODES', 3);
const LEASES = knob('BENCH_LEASES', 60);
const WARM = knob('BENCH_WARM', 30);
const STEADY = knob('BENCH_STEADY', 20);
const GIB = 1024 ** 3;

interface NodeView {
  name: string;
  builtin: boolean;
  capacity?: { cpus: number; memory: number };
  allocated: { cpus: number; memory: number };
  environments: string[];
  warm: { state: string }[];
}

const api = restCalls(TOKEN);

interface Rush {
  ready: number;
  readyMs: number[];
  /** Leases per node, by name. */
  spread: Map<string, number>;
  capacity: Map<string, { cpus: number; memory: number }>;
  /** The highest allocated/capacity (CPU or memory) any node showed while placing. */
  peak: number;
  /** Leases that claimed a warm container. */
  claimed: number;
}

interface RushOptions {
  leases: number;
  /** The nodes' container engine ('none': files only). */
  engine: string;
  /** The template's `warm` (with an engine): the rush starts once that many are ready. */
  warm: number;
  /** One lease a second instead of all at once, each waited for (a working day, not a rush). */
  steady?: boolean;
}

/**
 * The engine's containers of the bench's pool that were warm and were claimed by a lease: once
 * their count held for 5 s, as a claimed container takes its lease's name after the lease is ready.
 */
async function claimedWarm(): Promise<number> {
  const count = async () => {
    const names = await podman('ps', '-a', '--filter', 'label=berth.pool=fleet', '--filter', 'label=berth.warm', '--format', '{{.Names}}');
    return names.split('\n').filter((n) => n.startsWith('berth-env_')).length;
  };
  let last = await count();
  for (let since = Date.now(); Date.now() - since < 5000; ) {
    await new Promise((r) => setTimeout(r, 500));
    const now = await count();
    if (now !== last) [last, since] = [now, Date.now()];
  }
  return last;
}

/** Removes what the killed nodes left in the engine: every container of the bench's template, claimed, warm or cold. */
async function removeFleetContainers(): Promise<void> {
  const left = (await podman('ps', '-aq', '--filter', 'label=berth.template=sized')).split('\n').filter(Boolean);
  if (left.length) await podman('rm', '-f', '-t', '0', ...left);
}

/** One rush on a fresh server with `nodes` (name, declared capacity): every lease made at once, then every one waited for. */
async function rush(nodes: [string, string][], { leases: LEASES, engine: ENGINE, warm, steady }: RushOptions): Promise<Rush> {
  const base = await mkdtemp(join(tmpdir(), 'berth-bench-fleet-'));
  const templates = join(base, 'templates.json');
  await writeFile(
    templates,
    JSON.stringify({
      pools: [{ name: 'fleet', hotNodes: 0, maxQueued: LEASES * 2 }],
      templates: [
        {
          name: 'sized',
          pool: 'fleet',
          startMs: 0,
          idle: '30m',
          hard: '1h',
          resources: { cpus: 0.5, memory: '1GiB' },
          ...(ENGINE !== 'none' ? { image: TEST_IMAGE, warm } : {}),
          shares: [],
          services: [],
        },
      ],
    }),
  );
  const berth = await startBerth({ DATA_DIR: join(base, 'data'), BOOTSTRAP_TOKEN: TOKEN, TEMPLATES_FILE: templates, DOCKER_HOST: 'none' });
  const agents: Proc[] = [];
  try {
    for (const [name, capacity] of nodes) {
      const { secret } = await api<{ secret: string }>(berth, 'POST', '/v1/nodes', { pool: 'fleet', name });
      const agent = spawnNode(
        [
          'bin/berth.js',
          'node',
          '--server',
          berth.url,
          '--dir',
          join(base, name),
          '--slots',
          '64',
          '--engine',
          ENGINE,
          '--capacity',
          capacity,
        ],
        { BERTH_NODE_TOKEN: secret },
      );
      agents.push(agent);
    }
    // All at once: the first warm containers are made with every node there.
    await Promise.all(agents.map((agent, i) => agent.waitFor(new RegExp(`online as ${nodes[i]![0]}`))));
    if (warm > 0) {
      const started = Date.now();
      for (;;) {
        const listed = (await api<{ nodes: NodeView[] }>(berth, 'GET', '/v1/nodes')).nodes;
        const ready = listed.flatMap((n) => n.warm).filter((w) => w.state === 'ready').length;
        if (ready >= warm) break;
        if (Date.now() - started > 600_000) throw new Error(`only ${ready} of ${warm} warm containers ready after 10 min`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    let peak = 0;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        for (const n of (await api<{ nodes: NodeView[] }>(berth, 'GET', '/v1/nodes')).nodes) {
          if (n.builtin || !n.capacity) continue;
          peak = Math.max(peak, n.allocated.cpus / n.capacity.cpus, n.allocated.memory / n.capacity.memory);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const lease = async () =>
      (await api<{ environment: { id: string } }>(berth, 'POST', '/v1/environments', { template: 'sized' })).environment.id;
    const readyMs: number[] = [];
    let ready = 0;
    const waitReady = async (id: string) => {
      for (;;) {
        const env = await api<{ state: string; readyMs?: number }>(berth, 'GET', `/v1/environments/${id}`);
        if (env.state === 'ready') {
          ready++;
          readyMs.push(env.readyMs ?? 0);
          return;
        }
        if (['failed', 'stopped'].includes(env.state)) return;
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    if (steady) {
      for (let i = 0; i < LEASES; i++) {
        const started = Date.now();
        await waitReady(await lease());
        await new Promise((r) => setTimeout(r, Math.max(0, 1000 - (Date.now() - started))));
      }
    } else {
      for (const id of await Promise.all(Array.from({ length: LEASES }, lease))) await waitReady(id);
    }
    watching = false;
    await watcher;
    const listed = (await api<{ nodes: NodeView[] }>(berth, 'GET', '/v1/nodes')).nodes.filter((n) => !n.builtin);
    return {
      ready,
      readyMs,
      spread: new Map(listed.map((n) => [n.name, n.environments.length])),
      capacity: new Map(listed.map((n) => [n.name, n.capacity!])),
      peak,
      claimed: ENGINE === 'none' ? 0 : await claimedWarm(),
    };
  } finally {
    for (const agent of agents) await agent.kill('SIGKILL');
    await berth.kill();
    if (ENGINE !== 'none') await removeFleetContainers();
    await rm(base, { recursive: true, force: true });
  }
}

const f = (n: number) => n.toFixed(0);

/** Each node's leases against its share of the fleet's capacity, and the over-commit seen. */
function printSpread(r: Rush, leases: number): void {
  const fleetCpus = [...r.capacity.values()].reduce((n, c) => n + c.cpus, 0);
  for (const [name, count] of r.spread) {
    const cap = r.capacity.get(name)!;
    const share = cap.cpus / fleetCpus;
    console.log(
      `  ${name}: ${count} leases (${((100 * count) / leases).toFixed(0)}%), its share of capacity ${(100 * share).toFixed(0)}% (${cap.cpus} CPUs, ${cap.memory / GIB} GiB)`,
    );
  }
  console.log(`  over-commit: highest allocated/capacity seen ${r.peak.toFixed(2)} (${r.peak <= 1 ? 'none' : 'OVER-COMMITTED'})`);
}

async function main() {
  const fleet: [string, string][] = Array.from({ length: NODES }, (_, i) => [
    `node-${i + 1}`,
    `cpus=${8 * (i + 1)},memory=${16 * (i + 1)}GiB`,
  ]);
  const total = (NODES * (NODES + 1)) / 2;
  const one: [string, string][] = [['node-all', `cpus=${8 * total},memory=${16 * total}GiB`]];
  const files = { leases: LEASES, engine: 'none', warm: 0 };
  const a = await rush(fleet, files);
  const b = await rush(one, files);
  console.log(`\nThe morning rush: ${LEASES} leases at once (0.5 CPU, 1GiB each), files only`);
  console.log(
    `fleet of ${NODES}: ${a.ready}/${LEASES} ready, lease to ready p50 ${f(pct(a.readyMs, 50))} ms, p99 ${f(pct(a.readyMs, 99))} ms`,
  );
  printSpread(a, LEASES);
  console.log(
    `one node of the same capacity: ${b.ready}/${LEASES} ready, p50 ${f(pct(b.readyMs, 50))} ms, p99 ${f(pct(b.readyMs, 99))} ms`,
  );
  console.log(`fleet/one p50 ratio: ${(pct(a.readyMs, 50) / pct(b.readyMs, 50)).toFixed(2)}x`);

  // With containers: cold, then warm (the template keeps as many warm containers as leases come).
  const { engine, stop } = await benchEngine();
  let cold: Rush;
  let warm: Rush;
  let steady: Rush;
  try {
    cold = await rush(fleet, { leases: WARM, engine, warm: 0 });
    warm = await rush(fleet, { leases: WARM, engine, warm: WARM });
    steady = await rush(fleet, { leases: STEADY, engine, warm: 4, steady: true });
  } finally {
    stop();
  }
  console.log(`\nWith containers (${engine}): ${WARM} leases at once of an image's template, on the fleet of ${NODES}`);
  console.log(`cold: ${cold.ready}/${WARM} ready, lease to ready p50 ${f(pct(cold.readyMs, 50))} ms, p99 ${f(pct(cold.readyMs, 99))} ms`);
  printSpread(cold, WARM);
  console.log(
    `warm (warm: ${WARM}, all ready first): ${warm.ready}/${WARM} ready, ${warm.claimed} claimed a warm container, p50 ${f(pct(warm.readyMs, 50))} ms, p99 ${f(pct(warm.readyMs, 99))} ms`,
  );
  printSpread(warm, WARM);
  console.log(`warm/cold p50 ratio: ${(pct(warm.readyMs, 50) / pct(cold.readyMs, 50)).toFixed(2)}x`);
  console.log(
    `one lease a second (warm: 4): ${steady.ready}/${STEADY} ready, ${steady.claimed} claimed a warm container, p50 ${f(pct(steady.readyMs, 50))} ms, p99 ${f(pct(steady.readyMs, 99))} ms`,
  );
  if (a.ready < LEASES || a.peak > 1 || cold.ready < WARM || warm.ready < WARM || steady.ready < STEADY || cold.peak > 1 || warm.peak > 1)
    process.exitCode = 1;
}

await main();
