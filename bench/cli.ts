/**
 * CLI start-up benchmark (issues 22 and 33): what `berth` costs before it does anything, against the
 * cost of starting Node itself, measured in one run: the checkout's `berth` (bin/berth.js, which
 * runs dist/cli/berth.js) and the single-file CLI that /install.sh installs (dist/install/berth.mjs,
 * every package inlined).
 *
 *   npm run bench:cli
 *
 * BENCH_RUNS (20) rounds, after two of warm-up; each round runs `node bin/berth.js --version`,
 * `node dist/install/berth.mjs --version` and `node -e 0` one after the other (so all see the same
 * machine load), as child processes of this one, timed from spawn to exit. It reports p50 and p90
 * of each and the ratios of the p50s; the goal is at most 6x for both. Both bundles are built first
 * when they are stale, so no round pays for a build.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { knob, pct } from './environments/common';

const RUNS = knob('BENCH_RUNS', 20);
const GOAL = 6;
const root = new URL('..', import.meta.url).pathname;
const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

/** Milliseconds from spawn to exit of `node …args`; it must exit 0 and print `expect` when given. */
function time(args: string[], expect?: string): number {
  const started = process.hrtime.bigint();
  const run = spawnSync(process.execPath, args, { cwd: root, encoding: 'utf8', env: process.env });
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  if (run.status !== 0 || (expect !== undefined && run.stdout.trim() !== expect)) {
    throw new Error(`node ${args.join(' ')} exited ${run.status}: ${run.stdout}${run.stderr}`);
  }
  return ms;
}

time(['scripts/build-cli.mjs']);
time(['scripts/build-cli-standalone.mjs']);
const berth: number[] = [];
const single: number[] = [];
const bare: number[] = [];
for (let round = -2; round < RUNS; round++) {
  const b = time(['bin/berth.js', '--version'], version);
  const s = time(['dist/install/berth.mjs', '--version'], version);
  const n = time(['-e', '0']);
  if (round < 0) continue;
  berth.push(b);
  single.push(s);
  bare.push(n);
}

const row = (what: string, values: number[]) => `| ${what} | ${pct(values, 50).toFixed(0)} ms | ${pct(values, 90).toFixed(0)} ms |`;
console.log(`Node ${process.version}, ${RUNS} rounds\n`);
console.log('| command | p50 | p90 |\n| --- | --- | --- |');
console.log(row('`node -e 0`', bare));
console.log(row('`node bin/berth.js --version`', berth));
console.log(row('`node dist/install/berth.mjs --version`', single));
console.log('');
for (const [what, values] of [
  ['berth --version (checkout)', berth],
  ['berth --version (single file)', single],
] as const) {
  const ratio = pct(values, 50) / pct(bare, 50);
  console.log(`${what} / node -e 0 (p50s): ${ratio.toFixed(2)}x (goal: at most ${GOAL}x)`);
  if (ratio > GOAL) process.exitCode = 1;
}
