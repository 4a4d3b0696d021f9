// A container benchmark's Berth (bench:exec, bench:first-command): started as `npm start` does
// (src/app/main.ts) in a temporary folder with a catalog of its own, the built-in node on the
// benchmark's engine (benchEngine: BENCH_ENGINE, else a Podman service of its own), on PGlite or,
// with BENCH_DATABASE_URL, on a fresh schema of that PostgreSQL, dropped afterwards.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { writeCatalog } from '../test/helpers/catalog';
import { benchEngine } from '../test/helpers/engine-setup';
import { type BerthProc, startBerth } from '../test/helpers/processes';
import { sleep } from './environments/common';

export interface BenchBerth {
  berth: BerthProc;
  engine: string;
  /** The engine's service process, when the benchmark started it. */
  enginePid?: number;
  /** Which database, for the report. */
  database: 'PGlite' | 'PostgreSQL';
  /** Ends Berth, removes the containers it made, drops its schema, removes its folder and stops the engine started for it. */
  stop(): Promise<void>;
}

export async function benchBerth(opts: {
  name: string;
  templates: Record<string, unknown>[];
  env: Record<string, string>;
  /** Flags for Node (a CPU profile). */
  nodeArgs?: string[];
}): Promise<BenchBerth> {
  const { engine, pid: enginePid, stop } = await benchEngine();
  const base = await mkdtemp(join(tmpdir(), `berth-bench-${opts.name}-`));
  const url = process.env.BENCH_DATABASE_URL;
  const schema = url ? `berth_bench_${randomBytes(4).toString('hex')}` : undefined;
  const berth = await startBerth(
    {
      ...(schema ? { DATABASE_URL: url!, DATABASE_SCHEMA: schema } : {}),
      ...opts.env,
      DATA_DIR: join(base, 'data'),
      TEMPLATES_FILE: await writeCatalog(base, opts.templates),
      DOCKER_HOST: engine,
    },
    opts.nodeArgs,
  );
  return {
    berth,
    engine,
    enginePid,
    database: schema ? 'PostgreSQL' : 'PGlite',
    async stop() {
      await berth.kill();
      if (schema) {
        const client = new pg.Client({ connectionString: url });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await client.end();
      }
      await rm(base, { recursive: true, force: true });
      await stop();
    },
  };
}

/** Waits until the built-in pool holds `n` ready warm containers of `template` (the berth_warm_containers gauge). */
export async function untilWarm(url: string, metricsToken: string, template: string, n: number): Promise<void> {
  for (;;) {
    const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } });
    const line = (await res.text())
      .split('\n')
      .find((l) => l.startsWith('berth_warm_containers{') && l.includes(`template="${template}"`) && l.includes('state="ready"'));
    if (line && Number(line.split(' ').pop()) >= n) return;
    await sleep(20);
  }
}
