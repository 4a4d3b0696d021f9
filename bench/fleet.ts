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
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BerthProc, type Proc, spawnNode, startBerth } from '../test/helpers/processes';
import { knob, percentile } from './environments/common';

const TOKEN = 'bct_bench-fleet-0123456789abcdef0123';
const NODES = knob('BENCH_NODES', 3);
const LEASES = knob('BENCH_LEASES', 60);
const ENGINE = process.env.BENCH_ENGINE ?? 'none';
const GIB = 1024 ** 3;

interface NodeView {
  name: string;
  builtin: boolean;
  capacity?: { cpus: number; memory: number };
  allocated: { cpus: number; memory: number };
  environments: string[];
}

async function api<T>(berth: BerthProc, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${berth.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

const pct = (values: number[], p: number) =>
  percentile(
    [...values].sort((a, b) => a - b),
    p,
  );

interface Rush {
  ready: number;
  readyMs: number[];
  /** Leases per node, by name. */
  spread: Map<string, number>;
  capacity: Map<string, { cpus: number; memory: number }>;
  /** The highest allocated/capacity (CPU or memory) any node showed while placing. */
  peak: number;
}

/** One rush on a fresh server with `nodes` (name, declared capacity): every lease made at once, then every one waited for. */
async function rush(nodes: [string, string][]): Promise<Rush> {
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
      await agent.waitFor(new RegExp(`online as ${name}`));
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
    const ids = await Promise.all(
      Array.from(
        { length: LEASES },
        async () => (await api<{ environment: { id: string } }>(berth, 'POST', '/v1/environments', { template: 'sized' })).environment.id,
      ),
    );
    const readyMs: number[] = [];
    let ready = 0;
    for (const id of ids) {
      for (;;) {
        const env = await api<{ state: string; readyMs?: number }>(berth, 'GET', `/v1/environments/${id}`);
        if (env.state === 'ready') {
          ready++;
          readyMs.push(env.readyMs ?? 0);
          break;
        }
        if (['failed', 'stopped'].includes(env.state)) break;
        await new Promise((r) => setTimeout(r, 20));
      }
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
    };
  } finally {
    for (const agent of agents) await agent.kill('SIGKILL');
    await berth.kill();
    await rm(base, { recursive: true, force: true });
  }
}

async function main() {
  const fleet: [string, string][] = Array.from({ length: NODES }, (_, i) => [
    `node-${i + 1}`,
    `cpus=${8 * (i + 1)},memory=${16 * (i + 1)}GiB`,
  ]);
  const total = (NODES * (NODES + 1)) / 2;
  const one: [string, string][] = [['node-all', `cpus=${8 * total},memory=${16 * total}GiB`]];
  const a = await rush(fleet);
  const b = await rush(one);
  const f = (n: number) => n.toFixed(0);
  console.log(`\nThe morning rush: ${LEASES} leases at once (0.5 CPU, 1GiB each), engine ${ENGINE}`);
  console.log(
    `fleet of ${NODES}: ${a.ready}/${LEASES} ready, lease to ready p50 ${f(pct(a.readyMs, 50))} ms, p99 ${f(pct(a.readyMs, 99))} ms`,
  );
  const fleetCpus = [...a.capacity.values()].reduce((n, c) => n + c.cpus, 0);
  for (const [name, count] of a.spread) {
    const cap = a.capacity.get(name)!;
    const share = cap.cpus / fleetCpus;
    console.log(
      `  ${name}: ${count} leases (${((100 * count) / LEASES).toFixed(0)}%), its share of capacity ${(100 * share).toFixed(0)}% (${cap.cpus} CPUs, ${cap.memory / GIB} GiB)`,
    );
  }
  console.log(`  over-commit: highest allocated/capacity seen ${a.peak.toFixed(2)} (${a.peak <= 1 ? 'none' : 'OVER-COMMITTED'})`);
  console.log(
    `one node of the same capacity: ${b.ready}/${LEASES} ready, p50 ${f(pct(b.readyMs, 50))} ms, p99 ${f(pct(b.readyMs, 99))} ms`,
  );
  console.log(`fleet/one p50 ratio: ${(pct(a.readyMs, 50) / pct(b.readyMs, 50)).toFixed(2)}x`);
  if (a.ready < LEASES || a.peak > 1) process.exitCode = 1;
}

await main();
